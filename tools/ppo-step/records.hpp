// What ppo-step reads from records: a sequence for `advantages`, a trajectory from an episode record.
// A missing or mistyped field throws FieldError naming it (the record loop's bad-record rule).
#pragma once
#include <string>
#include <vector>

#include "libcommon/jsonl.hpp"
#include "libcommon/tokenizer/tokenizer.hpp"
#include "tools/ppo-step/advantages.hpp"

namespace ca::ppo_step {

// `advantages` input: id, group, response_mask, values (GAE), reward or token_rewards.
Sequence parse_sequence(const Json& record, bool need_values);
// Adds advantages and returns (and the schema tag when the record has none).
void write_sequence_result(Json& record, const Sequence& s);

// One episode flattened for training. Token t of `tokens` is scored by the model's output at t - 1.
struct Trajectory {
  std::string id, group;
  std::vector<int> tokens;            // every turn's token ids, in order
  int response_start = 0;             // index of the first token of the first assistant turn
  std::vector<double> mask;           // per token: 1 = assistant (trained), 0 = prompt or tool
  std::vector<double> old_logprobs;   // per token; NaN where the record gave none
  bool has_old_logprobs = true;       // every assistant token had a recorded logprob
  double reward = 0;
  bool clean_tool_use = true;         // no tool turn carried an error
  bool rendered = false;              // no recorded ids: rendered with the policy's tokenizer
  std::size_t response_tokens() const { return tokens.size() - std::size_t(response_start); }
  std::size_t model_tokens() const;
};

// A token id read at full width (FieldError naming `where`): get<int>() would read 2^32 + 5 as token 5.
int token_id(const Json& v, const std::string& where);

struct EpisodeFields {
  std::string reward_pointer;          // empty: `reward` (a number) or `reward.value` (reward-calc)
  std::string group_pointer = "/task_id";
  // The policy's tokenizer: agent-run episodes without token ids (the replay policy, a server that
  // returned none) are rendered with it as the native policy samples (libcommon/tokenizer/agent_chat).
  const tokenizer::Tokenizer* tokenizer = nullptr;
  bool need_reward = true;             // false: `ppo-step tokenize` (a missing reward is 0)
  // > 0: every token id must be below it (the smallest vocab_size of the models the step loads), so an
  // id past the vocabulary is this record's error, not the whole step's. vocab_origin names the file.
  int vocab_size = 0;
  std::string vocab_origin;
};

// Reads episode.turns[] = {role, token_ids, logprobs (assistant, optional), error (tool, optional)},
// or agent-run's turns: with the server's prompt and completion ids, or, when no turn has any, rendered
// with fields.tokenizer (no old logprobs then: rft, or ppo with actor.recompute_old_logprobs).
Trajectory parse_episode(const Json& record, const EpisodeFields& fields);

}  // namespace ca::ppo_step
