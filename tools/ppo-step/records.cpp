// Parsing of ppo-step's input records.
#include "tools/ppo-step/records.hpp"

#include <algorithm>
#include <climits>
#include <cmath>

#include "libcommon/errors.hpp"
#include "libcommon/fields.hpp"
#include "libcommon/ids.hpp"
#include "libcommon/tokenizer/agent_chat.hpp"

namespace ca::ppo_step {

namespace {
std::vector<double> number_array(const Json& record, const std::string& key) {
  if (!record.contains(key)) throw FieldError(key, "missing");
  const Json& a = record[key];
  if (!a.is_array()) throw FieldError(key, std::string("expected an array of numbers, got ") + a.type_name());
  std::vector<double> out;
  out.reserve(a.size());
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (!a[i].is_number()) throw FieldError(key + "[" + std::to_string(i) + "]", "expected a number");
    out.push_back(a[i].get<double>());
  }
  return out;
}

std::string key_text(const Json& v) { return v.is_string() ? v.get<std::string>() : v.dump(); }

}  // namespace

int token_id(const Json& v, const std::string& where) {
  if (!v.is_number_integer() || (!v.is_number_unsigned() && v.get<int64_t>() < 0))
    throw FieldError(where, "expected a non-negative integer token id, got " + v.dump());
  if (v.get<uint64_t>() > uint64_t(INT32_MAX)) throw FieldError(where, "token id " + v.dump() + " does not fit 32 bits");
  return v.get<int>();
}

namespace {
// Turns as ppo-step sample (and a tokenizing policy) writes them: {role, token_ids, logprobs, error}.
void parse_role_turns(const Json& turns, Trajectory& tr) {
  tr.response_start = -1;
  for (std::size_t i = 0; i < turns.size(); ++i) {
    const Json& turn = turns[i];
    const std::string where = "episode.turns[" + std::to_string(i) + "]";
    if (!turn.is_object()) throw FieldError(where, "expected an object");
    if (!turn.contains("role") || !turn["role"].is_string()) throw FieldError(where + ".role", "missing or not a string");
    const std::string role = turn["role"];
    if (!turn.contains("token_ids") || !turn["token_ids"].is_array())
      throw FieldError(where + ".token_ids", "missing (training needs the token ids of every turn)");
    const Json& ids = turn["token_ids"];
    const bool assistant = role == "assistant";
    std::vector<double> lps;
    bool have_lps = assistant && turn.contains("logprobs") && !turn["logprobs"].is_null();
    if (have_lps) {
      lps = number_array(turn, "logprobs");
      if (lps.size() != ids.size()) throw FieldError(where + ".logprobs", "length differs from token_ids");
    }
    if (assistant && !have_lps && !ids.empty()) tr.has_old_logprobs = false;
    if (role == "tool" && turn.contains("error") && turn["error"].is_boolean() && turn["error"].get<bool>())
      tr.clean_tool_use = false;
    if (assistant && tr.response_start < 0 && !ids.empty()) tr.response_start = int(tr.tokens.size());
    for (std::size_t j = 0; j < ids.size(); ++j) {
      tr.tokens.push_back(token_id(ids[j], where + ".token_ids[" + std::to_string(j) + "]"));
      tr.mask.push_back(assistant ? 1.0 : 0.0);
      tr.old_logprobs.push_back(have_lps ? lps[j] : NAN);
    }
  }
}

// Turns as agent-run writes them: {assistant: {token_ids, logprobs}, tool_results: [...], prompt_token_ids}.
// The context the server saw is turn.prompt_token_ids (vLLM returns it with return_token_ids); the
// trajectory is the last turn's prompt plus its completion, and every earlier completion must sit at its
// own prompt's end inside it. A chat template that re-renders earlier turns breaks that: the record is
// then refused, naming the turn, rather than trained on misaligned tokens.
bool has_token_ids(const Json& turns) {
  for (const auto& t : turns)
    if (t.is_object() && (t.contains("prompt_token_ids") ||
                          (t.contains("assistant") && t["assistant"].is_object() && t["assistant"].contains("token_ids"))))
      return true;
  return false;
}

// Whether agent-run marked one of a turn's tool results malformed (a call it could not parse); a mark that
// is not a boolean is a bad record naming it.
bool malformed_tool_result(const Json& turn, const std::string& where) {
  if (!turn.is_object() || !turn.contains("tool_results") || !turn["tool_results"].is_array()) return false;
  const Json& results = turn["tool_results"];
  bool any = false;
  for (std::size_t j = 0; j < results.size(); ++j)
    any = get_optional<bool>(results[j], "/malformed", where + ".tool_results[" + std::to_string(j) + "].malformed")
              .value_or(false) || any;
  return any;
}

// Turns recorded without token ids (the replay policy; a server that returned none): rendered with the
// policy's tokenizer and chat template exactly as the native policy would have been fed them and would
// have had to sample them (libcommon/tokenizer/agent_chat). Tool output is masked; there are no old
// logprobs (rft; ppo recomputes them with actor.recompute_old_logprobs).
void render_agent_run_turns(const Json& episode, const tokenizer::Tokenizer& tok, Trajectory& tr) {
  auto r = tokenizer::render_episode(tok, episode);
  tr.tokens = std::move(r.tokens);
  tr.mask = std::move(r.mask);
  tr.old_logprobs.assign(tr.tokens.size(), NAN);
  tr.response_start = r.response_start;
  tr.has_old_logprobs = false;
  tr.rendered = true;
  const Json& turns = episode["turns"];
  for (std::size_t i = 0; i < turns.size(); ++i)
    if (malformed_tool_result(turns[i], "episode.turns[" + std::to_string(i) + "]")) tr.clean_tool_use = false;
  for (int t : tr.tokens)
    if (t >= tok.vocab_size()) throw FieldError("episode.turns", "rendered a token id past the tokenizer's vocabulary");
}

void parse_agent_run_turns(const Json& turns, Trajectory& tr) {
  auto ints = [](const Json& a, const std::string& where) {
    if (!a.is_array()) throw FieldError(where, "expected an array of token ids");
    std::vector<int> out;
    for (std::size_t j = 0; j < a.size(); ++j) out.push_back(token_id(a[j], where + "[" + std::to_string(j) + "]"));
    return out;
  };
  int last = -1;
  for (std::size_t i = 0; i < turns.size(); ++i)
    if (turns[i].contains("prompt_token_ids") && turns[i].contains("assistant") &&
        turns[i]["assistant"].contains("token_ids") && !turns[i]["assistant"]["token_ids"].empty())
      last = int(i);
  if (last < 0)
    throw FieldError("episode.turns[].prompt_token_ids",
                     "missing: training needs the server's prompt and completion token ids (vLLM return_token_ids)");
  const std::string lw = "episode.turns[" + std::to_string(last) + "]";
  tr.tokens = ints(turns[last]["prompt_token_ids"], lw + ".prompt_token_ids");
  auto tail = ints(turns[last]["assistant"]["token_ids"], lw + ".assistant.token_ids");
  tr.tokens.insert(tr.tokens.end(), tail.begin(), tail.end());
  tr.mask.assign(tr.tokens.size(), 0.0);
  tr.old_logprobs.assign(tr.tokens.size(), NAN);
  tr.response_start = -1;
  for (int i = 0; i <= last; ++i) {
    const Json& turn = turns[i];
    const std::string where = "episode.turns[" + std::to_string(i) + "]";
    if (malformed_tool_result(turn, where)) tr.clean_tool_use = false;
    if (!turn.contains("assistant") || !turn["assistant"].contains("token_ids") || turn["assistant"]["token_ids"].empty())
      continue;
    if (!turn.contains("prompt_token_ids")) throw FieldError(where + ".prompt_token_ids", "missing");
    auto prompt = ints(turn["prompt_token_ids"], where + ".prompt_token_ids");
    auto completion = ints(turn["assistant"]["token_ids"], where + ".assistant.token_ids");
    const std::size_t start = prompt.size(), end = start + completion.size();
    if (end > tr.tokens.size() || !std::equal(prompt.begin(), prompt.end(), tr.tokens.begin()) ||
        !std::equal(completion.begin(), completion.end(), tr.tokens.begin() + long(start)))
      throw FieldError(where + ".prompt_token_ids", "this turn is not a prefix of the final context (re-rendered history)");
    std::vector<double> lps;
    if (turn["assistant"].contains("logprobs") && !turn["assistant"]["logprobs"].is_null()) {
      lps = number_array(turn["assistant"], "logprobs");
      if (lps.size() != completion.size()) throw FieldError(where + ".assistant.logprobs", "length differs from token_ids");
    } else {
      tr.has_old_logprobs = false;
    }
    for (std::size_t k = start; k < end; ++k) {
      tr.mask[k] = 1.0;
      if (!lps.empty()) tr.old_logprobs[k] = lps[k - start];
    }
    if (tr.response_start < 0) tr.response_start = int(start);
  }
}
}  // namespace

Sequence parse_sequence(const Json& record, bool need_values) {
  Sequence s;
  s.id = record.contains("id") ? key_text(record["id"]) : content_id(record);
  s.group = record.contains("group") ? key_text(record["group"]) : s.id;
  s.mask = number_array(record, "response_mask");
  for (std::size_t i = 0; i < s.mask.size(); ++i)
    if (s.mask[i] != 0 && s.mask[i] != 1) throw FieldError("response_mask[" + std::to_string(i) + "]", "must be 0 or 1");
  const std::size_t n = s.mask.size();
  if (need_values) {
    s.values = number_array(record, "values");
    if (s.values.size() != n) throw FieldError("values", "length differs from response_mask");
  } else {
    s.values.assign(n, 0.0);
  }
  if (record.contains("token_rewards")) {
    s.token_rewards = number_array(record, "token_rewards");
    if (s.token_rewards.size() != n) throw FieldError("token_rewards", "length differs from response_mask");
  } else {
    auto reward = get_optional<double>(record, "/reward");
    if (!reward) throw FieldError("reward", "missing (or give token_rewards)");
    if (last_model_token(s.mask) < 0) throw FieldError("response_mask", "has no model token to place the reward on");
    s.token_rewards = outcome_token_rewards(s.mask, *reward);
  }
  return s;
}

void write_sequence_result(Json& record, const Sequence& s) {
  record["advantages"] = s.advantages;
  record["returns"] = s.returns;
  if (!record.contains("schema")) record["schema"] = "cuda-agent/ppo-batch/v1";
}

std::size_t Trajectory::model_tokens() const {
  std::size_t n = 0;
  for (double m : mask) n += m > 0;
  return n;
}

Trajectory parse_episode(const Json& record, const EpisodeFields& fields) {
  Trajectory tr;
  for (const char* key : {"episode_id", "candidate_id", "id", "task_id"})
    if (record.contains(key)) {
      tr.id = key_text(record[key]);
      break;
    }
  if (tr.id.empty()) tr.id = content_id(record);
  const auto group_ptr = Json::json_pointer(fields.group_pointer);
  tr.group = has_pointer(record, group_ptr) ? key_text(record.at(group_ptr)) : tr.id;

  if (!fields.need_reward && !(fields.reward_pointer.empty() ? record.contains("reward")
                                                             : has_pointer(record, Json::json_pointer(fields.reward_pointer)))) {
    tr.reward = 0;
  } else if (!fields.reward_pointer.empty()) {
    tr.reward = get_required<double>(record, fields.reward_pointer);
  } else if (record.contains("reward") && record["reward"].is_number()) {
    tr.reward = record["reward"].get<double>();
  } else if (record.contains("reward") && record["reward"].is_object()) {
    tr.reward = get_required<double>(record, "/reward/value");  // reward-calc's section
  } else {
    throw FieldError("reward", "missing (a number, or the reward section's value as reward-calc writes it)");
  }
  if (!std::isfinite(tr.reward)) throw FieldError("reward", "not finite");

  const auto turns_ptr = Json::json_pointer("/episode/turns");
  if (!record.contains(turns_ptr) || !record.at(turns_ptr).is_array()) throw FieldError("episode.turns", "missing or not an array");
  const Json& turns = record.at(turns_ptr);
  if (!turns.empty() && turns[0].is_object() && turns[0].contains("assistant")) {
    if (!has_token_ids(turns) && fields.tokenizer)
      render_agent_run_turns(record.at(Json::json_pointer("/episode")), *fields.tokenizer, tr);
    else if (!has_token_ids(turns))
      throw FieldError("episode.turns[].prompt_token_ids",
                       "missing, and the policy checkpoint has no tokenizer.json to render the turns with");
    else
      parse_agent_run_turns(turns, tr);
  } else {
    parse_role_turns(turns, tr);
  }
  if (record.contains(Json::json_pointer("/episode/clean_tool_use")) &&
      record.at(Json::json_pointer("/episode/clean_tool_use")) == false)
    tr.clean_tool_use = false;
  const auto malformed = Json::json_pointer("/episode/counts/malformed_calls");  // agent-run's count
  if (record.contains(malformed) && record.at(malformed).is_number() && record.at(malformed).get<double>() > 0)
    tr.clean_tool_use = false;
  if (tr.response_start < 0) throw FieldError("episode.turns", "no assistant turn with tokens");
  if (fields.vocab_size > 0)
    for (std::size_t t = 0; t < tr.tokens.size(); ++t)
      if (tr.tokens[t] >= fields.vocab_size)
        throw FieldError("episode.turns", "token id " + std::to_string(tr.tokens[t]) + " (token " + std::to_string(t) +
                                              " of the trajectory) is past the vocabulary of " + fields.vocab_origin +
                                              " (vocab_size " + std::to_string(fields.vocab_size) + ")");
  if (tr.response_start == 0) throw FieldError("episode.turns", "no prompt before the first assistant turn");
  return tr;
}

}  // namespace ca::ppo_step
