// The token context of an agent episode in Qwen2.5's tool format: one rendering for the native policy
// (agent-run native:CKPT, which samples with it) and for ppo-step (which tokenizes recorded turns
// that carry no token ids with it), so a trajectory trains on exactly the tokens the policy would
// have been fed and would have had to sample.
//
//   ChatContext ctx(tok);
//   auto feed = ctx.prompt(messages, tools);   // system (+ tool signatures), user, ...; then tool results
//   ctx.complete(sampled_ids);                 // the completion as sampled (or as assistant_ids() gives it)
#pragma once
#include <string>
#include <vector>

#include "libcommon/jsonl.hpp"
#include "libcommon/tokenizer/tokenizer.hpp"

namespace ca::tokenizer {

// The system prompt's suffix that lists the tools (OpenAI tool schemas, one JSON per line inside
// <tools></tools>), as Qwen2.5's template writes it; empty without tools.
std::string tools_system_block(const Json& tools);

// One tool call of an assistant turn as recorded: `arguments` is the model's text (JSON, or not).
struct RenderedCall {
  std::string name;       // empty: a malformed block, `arguments` is its whole text
  std::string arguments;
};
// The text of an assistant turn as the model writes it after "<|im_start|>assistant\n" (Qwen2.5's
// template): the content, then one "<tool_call>\n{"name": ..., "arguments": ...}\n</tool_call>" block
// per call, separated by newlines. The native policy's parser reads it back to the same content and calls.
std::string assistant_text(const std::string& content, const std::vector<RenderedCall>& calls);

class ChatContext {
 public:
  // Throws InputError when the tokenizer has no <|im_end|>.
  explicit ChatContext(const Tokenizer& tok);

  // The tokens to feed before the next assistant turn. `messages` is the whole conversation so far in
  // OpenAI form ({role, content}); the first call renders all of it (the tool signatures appended to
  // the system message, or to the default one), later calls the messages after the last completion
  // (tool results), after closing that completion with <|im_end|> (unless it ended with one) and "\n".
  // Every call ends with the generation prompt. The returned ids are appended to tokens().
  std::vector<int> prompt(const Json& messages, const Json& tools);
  // The completion as sampled; the caller's `messages` gain this turn (one message) before the next prompt().
  void complete(const std::vector<int>& ids);
  // The ids of a recorded turn's completion: the tokenized assistant_text, and <|im_end|> unless the
  // turn stopped for length (a model that finishes its turn samples <|im_end|>; it is trained on).
  std::vector<int> assistant_ids(const std::string& content, const std::vector<RenderedCall>& calls,
                                 bool stopped_for_length) const;

  const std::vector<int>& tokens() const { return context_; }
  int im_end() const { return im_end_; }
  const Tokenizer& tokenizer() const { return tok_; }

 private:
  const Tokenizer& tok_;
  int im_end_ = -1;
  std::vector<int> context_;  // every token fed or completed so far
  std::size_t seen_ = 0;      // messages already in the context
  bool open_turn_ = false;    // the last completion has not been closed with <|im_end|>\n yet
};

// A recorded agent-run episode (episode.prompt, episode.turns with assistant {content, tool_calls,
// finish_reason} and tool_results) rendered as the native policy would have seen and sampled it:
// the tokens and, per token, 1 where the model sampled it (assistant turns), 0 for prompts and tool
// output. Throws FieldError naming the field that is missing or mistyped.
struct RenderedEpisode {
  std::vector<int> tokens;
  std::vector<double> mask;
  int response_start = -1;  // first model token
};
RenderedEpisode render_episode(const Tokenizer& tok, const Json& episode);

}  // namespace ca::tokenizer
