// Policies: what produces the assistant's turns. openai:URL talks to an OpenAI-compatible server
// (vLLM, SGLang); replay:FILE plays scripted turns.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "libcommon/jsonl.hpp"
#include "libcommon/tokenizer/agent_chat.hpp"
#include "tools/agent-run/agent.hpp"

namespace ca::agent_run {

struct PolicyOptions {
  std::string model;              // empty: the first model the server lists
  double temperature = 1.0;
  double top_p = 1.0;
  int64_t max_tokens = 8192;      // per assistant turn (also capped by the context left)
  std::string api_key_env = "OPENAI_API_KEY";
  double request_timeout_s = 600;
  int retries = 6;                // after the first attempt
  double retry_base_s = 1.0;      // backoff: base * 2^k, at most 60 s (Retry-After wins when given)
  bool logprobs = true;           // ask for logprobs and token ids
  Json extra = Json::object();    // merged into every request body
  int64_t max_answer_mib = 64;    // an answer larger than this (decompressed) ends the episode (policy_error)
  std::string load_weights;       // a checkpoint folder the server loads before any episode (SGLang's
                                  // POST /update_weights_from_disk {"model_path"}); empty: as served
  std::string load_lora;          // a PEFT adapter folder the server loads, and every request then names
                                  // (vLLM's /v1/load_lora_adapter, SGLang's /load_lora_adapter)
  std::string server;             // "vllm" | "sglang": how to load and select an adapter; "" when not said
  bool keep_loras = false;        // leave the server's other ca-lora-* adapters loaded
  // native:DIR
  std::string device = "cpu";     // cpu | cuda | cuda:N: where the policy samples
  std::string dtype = "bf16";     // compute dtype on cuda
  int64_t max_context = 0;        // the episode's context limit: sizes the KV cache (0: the model's window)
};

// What a turn may use: tokens left in the context, seconds left in the episode.
struct TurnBudget {
  int64_t max_tokens = 0;
  double timeout_s = 0;
};

// A policy that could not answer before the episode's time ran out (--episode-timeout): the
// episode's stop reason is `timeout`, not policy_error.
struct PolicyDeadline : PolicyError {
  using PolicyError::PolicyError;
};

class PolicySession {
 public:
  virtual ~PolicySession() = default;
  // The next assistant turn for this conversation; throws PolicyError when there is none to be had.
  virtual AssistantTurn next(const Json& messages, const Json& tools, const TurnBudget& budget) = 0;
};

class Policy {
 public:
  virtual ~Policy() = default;
  // The policy and its settings, for the episode record.
  virtual Json describe() const = 0;
  // One conversation; `seed` is the episode's sampling seed. Sessions may run on several threads.
  virtual std::unique_ptr<PolicySession> start(const std::string& task_id, uint64_t seed) = 0;
};

// "openai:URL" | "replay:FILE" | "native:DIR"; throws UsageError on anything else.
std::unique_ptr<Policy> make_policy(const std::string& spec, const PolicyOptions& options);
std::unique_ptr<Policy> make_openai_policy(const std::string& base_url, const PolicyOptions& options);
std::unique_ptr<Policy> make_replay_policy(const std::string& path);
// A Hugging Face folder of the native model (libcommon/nn) with its tokenizer.json, sampled on the CPU
// or, with options.device cuda[:N], on a GPU (libcommon/nn_cuda).
std::unique_ptr<Policy> make_native_policy(const std::string& dir, const PolicyOptions& options);

// Qwen2.5's tool format, as the native policy writes and reads it (libcommon/tokenizer/agent_chat.hpp,
// shared with ppo-step): the system prompt's suffix that lists the tools, and the parser of completions.
using tokenizer::tools_system_block;
// The <tool_call>{"name": ..., "arguments": {...}}</tool_call> blocks of a completion, with ids
// call_<turn>_<i>; `content` gets the text around them. A block that is not such JSON becomes a call
// with no name and the block's text as its arguments (agent-run answers it as malformed).
std::vector<ToolCall> parse_tool_calls(const std::string& text, std::string& content, int turn);

}  // namespace ca::agent_run
