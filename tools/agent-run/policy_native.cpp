// native:CKPT: the assistant's turns sampled from a native checkpoint (libcommon/nn on the CPU, or
// libcommon/nn_cuda on a GPU with --policy-device cuda) with its tokenizer.json and Qwen2.5's ChatML tool format, so the same episode records come out as from a
// served model, and ppo-step can train on them.
//
// The context is kept as token ids, not re-rendered: each turn's prompt is the previous prompt, the
// previous completion exactly as sampled, the end of that turn, and the new messages (tool results)
// rendered and tokenized (tokenizer::ChatContext, the rendering ppo-step uses for episodes recorded
// without ids). So every turn's prompt_token_ids is a prefix of the next, which is what ppo-step
// needs, and the KV cache carries over from turn to turn.
//
// CKPT may be a LoRA adapter folder (PEFT's adapter_config.json + adapter_model.safetensors, as ppo-step
// --lora-rank writes): the base its config names is loaded and the adapter merged into it
// (nn::load_policy), so the sampler runs W + (alpha/r) B A; the tokenizer is the adapter folder's own
// tokenizer.json when it has one, else the base's.
#include <algorithm>
#include <chrono>
#include <filesystem>
#include <mutex>
#include <optional>
#include <random>

#include "libcommon/errors.hpp"
#include "libcommon/nn/lora.hpp"
#include "libcommon/nn/model.hpp"
#include "libcommon/nn/sample.hpp"
#include "libcommon/paths.hpp"
#include "libcommon/nn_cuda/model.hpp"
#include "libcommon/tokenizer/tokenizer.hpp"
#include "tools/agent-run/adapter.hpp"
#include "tools/agent-run/policy.hpp"

namespace ca::agent_run {

namespace {
namespace fs = std::filesystem;
}  // namespace

std::vector<ToolCall> parse_tool_calls(const std::string& text, std::string& content, int turn) {
  static const std::string open = "<tool_call>", close = "</tool_call>";
  std::vector<ToolCall> calls;
  content.clear();
  std::size_t pos = 0;
  while (true) {
    std::size_t a = text.find(open, pos);
    if (a == std::string::npos) {
      content += text.substr(pos);
      break;
    }
    content += text.substr(pos, a - pos);
    std::size_t b = text.find(close, a + open.size());
    std::string inner = text.substr(a + open.size(), b == std::string::npos ? std::string::npos : b - a - open.size());
    pos = b == std::string::npos ? text.size() : b + close.size();
    // Trim the newlines the format puts around the JSON.
    std::size_t s = inner.find_first_not_of(" \n\r\t"), e = inner.find_last_not_of(" \n\r\t");
    inner = s == std::string::npos ? "" : inner.substr(s, e - s + 1);
    ToolCall call;
    call.id = "call_" + std::to_string(turn) + "_" + std::to_string(calls.size());
    call.arguments = inner;  // malformed: the model's own text, which agent-run answers as malformed
    Json j;
    try {
      j = parse_json(inner, "tool call");  // nesting limited: the model may write anything
    } catch (const InputError&) {
    }
    {
      if (j.is_object() && j.contains("name") && j["name"].is_string()) {
        call.name = j["name"].get<std::string>();
        const Json& args = j.contains("arguments") ? j["arguments"] : Json::object();
        call.arguments = args.is_string() ? args.get<std::string>() : args.dump();
      }
    }
    calls.push_back(call);
  }
  std::size_t s = content.find_first_not_of(" \n\r\t"), e = content.find_last_not_of(" \n\r\t");
  content = s == std::string::npos ? "" : content.substr(s, e - s + 1);
  return calls;
}

namespace {

class NativePolicy;

// The model's state for one episode: its KV cache on the CPU or the GPU. Episodes run on threads of
// their own; on the GPU they take turns (one stream), holding the policy's lock for a whole feed or
// response, so a response is sampled at full speed while other episodes run their tools.
class ContextState {
 public:
  virtual ~ContextState() = default;
  virtual int length() const = 0;
  virtual int capacity() const = 0;
  virtual void feed(const std::vector<int>& ids) = 0;
  virtual nn::SampleResult generate(const nn::SampleOptions& options, std::mt19937_64& rng) = 0;
};

class CpuContext final : public ContextState {
 public:
  CpuContext(const nn::Model<float>& model, int max_len) : decoder_(model, max_len) {}
  int length() const override { return decoder_.length(); }
  int capacity() const override { return decoder_.capacity(); }
  void feed(const std::vector<int>& ids) override { decoder_.feed(ids); }
  nn::SampleResult generate(const nn::SampleOptions& o, std::mt19937_64& rng) override { return nn::generate(decoder_, o, rng); }

 private:
  nn::Decoder<float> decoder_;
};

class GpuContext final : public ContextState {
 public:
  GpuContext(nn_cuda::CudaModel& model, std::mutex& mutex, int max_len) : gpu_(model.gpu()), mutex_(mutex) {
    auto lock = device();
    decoder_ = std::make_unique<nn_cuda::CudaDecoder>(model, max_len);
  }
  ~GpuContext() override {
    auto lock = device();  // the KV cache is freed on this thread
    decoder_.reset();
  }
  int length() const override { return decoder_->length(); }
  int capacity() const override { return decoder_->capacity(); }
  void feed(const std::vector<int>& ids) override {
    auto lock = device();
    decoder_->feed(ids);
  }
  nn::SampleResult generate(const nn::SampleOptions& o, std::mt19937_64& rng) override {
    auto lock = device();
    return nn_cuda::generate(*decoder_, o, rng);
  }

 private:
  std::unique_lock<std::mutex> device() {
    std::unique_lock<std::mutex> lock(mutex_);
    gpu_.make_current();
    return lock;
  }
  nn_cuda::Gpu& gpu_;
  std::mutex& mutex_;
  std::unique_ptr<nn_cuda::CudaDecoder> decoder_;
};

class NativeSession : public PolicySession {
 public:
  NativeSession(const NativePolicy& policy, uint64_t seed, std::unique_ptr<ContextState> state);
  AssistantTurn next(const Json& messages, const Json& tools, const TurnBudget& budget) override;

 private:
  const NativePolicy& policy_;
  std::unique_ptr<ContextState> state_;
  std::mt19937_64 rng_;
  tokenizer::ChatContext chat_;  // every token fed and sampled so far
  int turn_ = 0;
};

class NativePolicy : public Policy {
 public:
  NativePolicy(const std::string& dir, const PolicyOptions& options)
      : dir_(dir), options_(options), base_(adapter_base(dir, adapter_)), model_(nn::load_policy<float>(dir)) {
    if (model_.config().value_head) throw InputError("native:" + dir + " is a critic, not a policy");
    std::string tok = (fs::path(dir) / "tokenizer.json").string();
    if (adapter_ && !fs::exists(tok)) tok = (fs::path(base_) / "tokenizer.json").string();
    if (!fs::exists(tok))
      throw InputError("native:" + dir + " has no tokenizer.json" + (adapter_ ? " (nor has its base " + base_ + ")" : ""));
    tokenizer_ = tokenizer::Tokenizer::from_file(tok);
    im_end_ = tokenizer_.token_id("<|im_end|>");
    if (im_end_ < 0) throw InputError(tok + " has no <|im_end|> token: the ChatML template needs it");
    for (const char* s : {"<|im_end|>", "<|endoftext|>"})
      if (int id = tokenizer_.token_id(s); id >= 0) stop_.push_back(id);
    if (tokenizer_.vocab_size() > model_.config().vocab_size)
      throw InputError(tok + " has " + std::to_string(tokenizer_.vocab_size()) + " tokens, the model " +
                       std::to_string(model_.config().vocab_size));
    // The KV cache holds what an episode may reach, not the model's whole window.
    max_len_ = model_.config().max_position_embeddings;
    if (options_.max_context > 0) max_len_ = int(std::min<int64_t>(max_len_, options_.max_context + 1));
    if (const int ordinal = nn_cuda::parse_device(options_.device, "--policy-device"); ordinal >= 0) {
      gpu_ = std::make_unique<nn_cuda::Gpu>(ordinal);
      nn_cuda::CudaModelOptions o;
      o.dtype = nn_cuda::parse_dtype(options_.dtype);
      cuda_model_ = std::make_unique<nn_cuda::CudaModel>(*gpu_, model_, o);
    }
    model_.release_gradients();  // sampling runs forward only
  }
  ~NativePolicy() override {
    cuda_model_.reset();
    gpu_.reset();
  }
  Json describe() const override {
    Json d = {{"kind", "native"},
            {"checkpoint", dir_},
            {"model", fs::path(adapter_ ? base_ : dir_).filename().string()},
            {"device", gpu_ ? "cuda:" + std::to_string(gpu_->info().ordinal) : "cpu"},
            {"dtype", gpu_ ? options_.dtype : "f32"},
            {"temperature", options_.temperature},
            {"top_p", options_.top_p},
            {"max_tokens", options_.max_tokens},
            {"max_position_embeddings", model_.config().max_position_embeddings},
            {"adapter", adapter_ ? adapter_->to_json() : Json(nullptr)}};
    if (adapter_) d["base"] = base_;
    return d;
  }
  std::unique_ptr<PolicySession> start(const std::string&, uint64_t seed) override {
    std::unique_ptr<ContextState> state;
    if (cuda_model_)
      state = std::make_unique<GpuContext>(*cuda_model_, gpu_mutex_, max_len_);
    else
      state = std::make_unique<CpuContext>(model_, max_len_);
    return std::make_unique<NativeSession>(*this, seed, std::move(state));
  }

  // With an adapter folder: its content name (read first: a folder that is not one is named as such), and
  // the base checkpoint its config names; "" for a full checkpoint.
  static std::string adapter_base(const std::string& dir, std::optional<AdapterRef>& adapter) {
    if (!nn::is_adapter_dir(dir)) return "";
    adapter = read_adapter_ref(dir);
    const std::string cpath = (fs::path(dir) / "adapter_config.json").string();
    return nn::adapter_base_dir(nn::LoraConfig::from_json(parse_json(read_file(cpath), cpath), cpath), dir);
  }

  std::string dir_;
  PolicyOptions options_;
  std::optional<AdapterRef> adapter_;
  std::string base_;
  nn::Model<float> model_;
  tokenizer::Tokenizer tokenizer_;
  int im_end_ = -1;
  std::vector<int> stop_;
  int max_len_ = 0;
  std::unique_ptr<nn_cuda::Gpu> gpu_;
  std::unique_ptr<nn_cuda::CudaModel> cuda_model_;
  std::mutex gpu_mutex_;
};

NativeSession::NativeSession(const NativePolicy& policy, uint64_t seed, std::unique_ptr<ContextState> state)
    : policy_(policy), state_(std::move(state)), rng_(seed), chat_(policy.tokenizer_) {}

AssistantTurn NativeSession::next(const Json& messages, const Json& tools, const TurnBudget& budget) {
  const auto& tok = policy_.tokenizer_;
  std::vector<int> ids;
  try {
    ids = chat_.prompt(messages, tools);
  } catch (const InputError& e) {
    throw PolicyError(std::string("native: ") + e.what());
  }
  if (state_->length() + int64_t(ids.size()) >= state_->capacity())
    throw PolicyError("native: the context (" + std::to_string(state_->length() + ids.size()) +
                      " tokens) reaches the context limit of " + std::to_string(state_->capacity()) + " tokens");
  const auto t0 = std::chrono::steady_clock::now();
  state_->feed(ids);

  AssistantTurn t;
  t.prompt_token_ids = Json(chat_.tokens());
  t.prompt_tokens = int64_t(chat_.tokens().size());
  nn::SampleOptions so;
  so.temperature = policy_.options_.temperature;
  so.top_p = policy_.options_.top_p;
  int64_t room = state_->capacity() - state_->length();
  int64_t max_new = std::min<int64_t>({policy_.options_.max_tokens, budget.max_tokens > 0 ? budget.max_tokens : room, room});
  so.max_new_tokens = int(std::max<int64_t>(1, max_new));
  so.stop_tokens = policy_.stop_;
  nn::SampleResult r = state_->generate(so, rng_);
  chat_.complete(r.tokens);

  std::vector<int> body;  // the text's tokens: not the stop token, nor ids past the tokenizer's
  for (std::size_t i = 0; i < r.tokens.size(); ++i)  // vocabulary (models pad theirs; a trained one
    if (r.tokens[i] < tok.vocab_size() &&            // never samples the padding, a random one may)
        !(r.stop_reason == "stop" && i + 1 == r.tokens.size()))
      body.push_back(r.tokens[i]);
  t.tool_calls = parse_tool_calls(tok.decode(body), t.content, turn_);
  t.finish_reason = r.stop_reason == "length" ? "length" : (t.tool_calls.empty() ? "stop" : "tool_calls");
  t.token_ids = Json(r.tokens);
  t.logprobs = Json(std::vector<double>(r.logprobs.begin(), r.logprobs.end()));
  t.completion_tokens = int64_t(r.tokens.size());
  t.latency_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  ++turn_;  // agent-run appends this turn to `messages` before the next call
  return t;
}

}  // namespace

std::unique_ptr<Policy> make_native_policy(const std::string& dir, const PolicyOptions& options) {
  return std::make_unique<NativePolicy>(dir, options);
}

}  // namespace ca::agent_run
