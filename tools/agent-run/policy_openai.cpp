// The openai:URL policy: chat completions with tools over libcurl, retries with backoff on 429, 5xx
// and transport errors, token ids and logprobs recorded when the server returns them. Before any
// episode the server may be asked to load a checkpoint (--load-weights) or a LoRA adapter (--load-lora),
// which every request then names.

#include <chrono>
#include <mutex>
#include <cmath>
#include <cstdlib>
#include <optional>
#include <thread>

#include "libcommon/errors.hpp"
#include "libcommon/log.hpp"
#include "tools/agent-run/adapter.hpp"
#include "tools/agent-run/http_client.hpp"
#include "tools/agent-run/policy.hpp"
#include "tools/agent-run/text.hpp"

namespace ca::agent_run {
namespace {

HttpResponse http(const std::string& method, const std::string& url, const std::string& body,
                  const std::string& api_key, double timeout_s, std::size_t max_bytes = kDefaultMaxBodyBytes) {
  std::vector<std::string> headers = {"Content-Type: application/json", "Accept: application/json"};
  if (!api_key.empty()) headers.push_back("Authorization: Bearer " + api_key);
  return http_request(method, url, body, headers, timeout_s, std::min(30.0, std::max(1.0, timeout_s)), max_bytes);
}

std::string trim_slash(std::string s) {
  while (!s.empty() && s.back() == '/') s.pop_back();
  return s;
}

// The parts of a chat-completions answer a turn is made of; nothing else of the answer is built
// while parsing (a hostile answer full of other keys, or of extra choices, costs what it is long).
const JsonSelection& completion_selection(std::size_t max_items) {
  static thread_local JsonSelection sel;
  if (sel.keep.empty()) {
    const std::vector<std::string> m = {"choices", "0", "message"};
    auto msg = [&](std::initializer_list<std::string> rest) {
      std::vector<std::string> p = m;
      p.insert(p.end(), rest);
      return p;
    };
    sel.keep = {msg({"content"}),
                msg({"reasoning_content"}),
                msg({"reasoning"}),
                msg({"tool_calls", "*", "id"}),
                msg({"tool_calls", "*", "function", "name"}),
                msg({"tool_calls", "*", "function", "arguments"}),
                {"choices", "0", "finish_reason"},
                {"choices", "0", "token_ids"},
                {"choices", "0", "logprobs", "content", "*", "token"},
                {"choices", "0", "logprobs", "content", "*", "logprob"},
                {"usage", "prompt_tokens"},
                {"usage", "completion_tokens"},
                {"prompt_token_ids"},
                {"error", "message"}};
  }
  sel.max_array_items = max_items;
  return sel;
}

// Token ids as the record keeps them: an array of integers, else nothing (what ppo-step trains on
// must be ids; a hostile array of arrays would also nest the record past the readers' limit).
Json token_id_array(Json& v) {
  if (!v.is_array()) return nullptr;
  for (const auto& x : v)
    if (!x.is_number_integer() || x.get<int64_t>() < 0) return nullptr;
  return std::move(v);
}

std::string take_string(Json& v) { return v.is_string() ? std::move(v.get_ref<std::string&>()) : std::string(); }

// Parses one chat-completions answer into a turn; throws std::runtime_error on a malformed one. The
// strings are moved out of the parsed answer, never copied. `max_items`: no array in it may be
// longer (token ids and logprobs are at most the context).
AssistantTurn parse_completion(const std::string& body, std::size_t max_items) {
  Json j = parse_json(body, "the answer", completion_selection(max_items));
  if (!j.is_object() || !j.contains("choices") || !j["choices"].is_array() || j["choices"].empty()) {
    std::string why = j.is_object() && j.contains("error") && j["error"].is_object() && j["error"].contains("message") &&
                              j["error"]["message"].is_string()
                          ? j["error"]["message"].get<std::string>()
                          : body.substr(0, 200);
    throw std::runtime_error("answer without choices: " + why.substr(0, 300));
  }
  Json& choice = j["choices"][0];
  if (!choice.is_object() || !choice.contains("message") || !choice["message"].is_object())
    throw std::runtime_error("answer without choices[0].message");
  Json& msg = choice["message"];
  AssistantTurn t;
  if (msg.contains("content")) t.content = take_string(msg["content"]);
  for (const char* k : {"reasoning_content", "reasoning"})
    if (!t.reasoning && msg.contains(k) && msg[k].is_string()) t.reasoning = take_string(msg[k]);
  if (msg.contains("tool_calls") && msg["tool_calls"].is_array()) {
    for (auto& c : msg["tool_calls"]) {
      ToolCall call;
      if (c.is_object() && c.contains("id")) call.id = take_string(c["id"]);
      if (c.is_object() && c.contains("function") && c["function"].is_object()) {
        Json& f = c["function"];
        if (f.contains("name")) call.name = take_string(f["name"]);
        if (f.contains("arguments")) {
          Json& a = f["arguments"];
          call.arguments = a.is_string() ? take_string(a) : (a.is_null() ? "" : a.dump());
        }
      }
      t.tool_calls.push_back(std::move(call));
    }
  }
  if (choice.contains("finish_reason")) t.finish_reason = take_string(choice["finish_reason"]);
  if (j.contains("usage") && j["usage"].is_object()) {
    for (auto [key, out] : {std::pair<const char*, int64_t*>{"prompt_tokens", &t.prompt_tokens},
                            std::pair<const char*, int64_t*>{"completion_tokens", &t.completion_tokens}})
      // A count past 2^40 tokens is no count (the sums and the context check would overflow): estimated.
      if (j["usage"].contains(key) && j["usage"][key].is_number_integer() && j["usage"][key].get<int64_t>() >= 0 &&
          j["usage"][key].get<int64_t>() <= (int64_t{1} << 40))
        *out = j["usage"][key].get<int64_t>();
  }
  // vLLM (>= 0.10.2, return_token_ids): prompt_token_ids beside the choices and choices[].token_ids;
  // logprobs.content[] with token and logprob. ppo-step trains on the two id lists.
  if (j.contains("prompt_token_ids")) t.prompt_token_ids = token_id_array(j["prompt_token_ids"]);
  if (choice.contains("token_ids")) t.token_ids = token_id_array(choice["token_ids"]);
  if (choice.contains("logprobs") && choice["logprobs"].is_object() && choice["logprobs"].contains("content") &&
      choice["logprobs"]["content"].is_array()) {
    Json lp = Json::array(), toks = Json::array(), ids = Json::array();
    bool all_ids = true;
    for (auto& e : choice["logprobs"]["content"]) {
      if (!e.is_object()) continue;
      lp.push_back(e.contains("logprob") && e["logprob"].is_number() ? e["logprob"].get<double>() : 0.0);
      std::string tok = e.contains("token") ? take_string(e["token"]) : std::string();
      // return_tokens_as_token_ids gives "token_id:123".
      if (tok.rfind("token_id:", 0) == 0) ids.push_back(std::strtoll(tok.c_str() + 9, nullptr, 10));
      else all_ids = false;
      toks.push_back(std::move(tok));
    }
    t.logprobs = std::move(lp);
    t.tokens = std::move(toks);
    if (t.token_ids.is_null() && all_ids && !ids.empty()) t.token_ids = token_id_array(ids);
  }
  return t;
}

class OpenAIPolicy;

class OpenAISession : public PolicySession {
 public:
  OpenAISession(const OpenAIPolicy& policy, uint64_t seed) : policy_(policy), seed_(seed) {}
  AssistantTurn next(const Json& messages, const Json& tools, const TurnBudget& budget) override;

 private:
  const OpenAIPolicy& policy_;
  uint64_t seed_;
};

class OpenAIPolicy : public Policy {
 public:
  OpenAIPolicy(std::string base, PolicyOptions o) : base_(trim_slash(std::move(base))), opt_(std::move(o)) {
    // The adapter folder is checked (and named by its content) before any request: exit 2 naming the file.
    if (!opt_.load_lora.empty()) adapter_ = read_adapter_ref(opt_.load_lora);
    if (const char* k = std::getenv(opt_.api_key_env.c_str()); k && *k) key_ = k;
    if (!opt_.load_weights.empty()) load_weights(opt_.load_weights);
    std::optional<Json> models;
    if (opt_.model.empty() || adapter_) models = list_models();
    if (opt_.model.empty()) opt_.model = discover_model(models);
    request_model_ = opt_.model;
    if (adapter_) load_lora(*adapter_, models);
  }
  Json describe() const override {
    return {{"kind", "openai"},           {"url", base_},
            {"model", opt_.model},        {"temperature", opt_.temperature},
            {"top_p", opt_.top_p},        {"max_tokens", opt_.max_tokens},
            {"request_timeout_s", opt_.request_timeout_s}, {"retries", opt_.retries},
            {"max_answer_mib", opt_.max_answer_mib},
            {"logprobs", opt_.logprobs},  {"api_key_env", opt_.api_key_env},
            {"extra", opt_.extra},
            {"weights", opt_.load_weights.empty() ? Json(nullptr) : Json(opt_.load_weights)},
            {"server", opt_.server.empty() ? Json(nullptr) : Json(opt_.server)},
            {"adapter", adapter_ ? adapter_->to_json() : Json(nullptr)}};
  }
  std::unique_ptr<PolicySession> start(const std::string&, uint64_t seed) override {
    return std::make_unique<OpenAISession>(*this, seed);
  }

  // POST with retries, never past the episode's deadline (budget_s from now): each request gets
  // the time left, a Retry-After or backoff that would end after it is not waited for. Returns the
  // parsed answer; throws PolicyDeadline when the time ran out, PolicyError when the retries are
  // spent or the answer is over --max-answer-mib (not retried: it would be again).
  AssistantTurn complete(const Json& body, double budget_s, int64_t max_context) const {
    const std::string url = base_ + "/chat/completions";
    const std::string text = body.dump(-1, ' ', false, Json::error_handler_t::replace);
    const std::size_t max_bytes = static_cast<std::size_t>(opt_.max_answer_mib) << 20;
    const std::size_t max_items = static_cast<std::size_t>(std::max<int64_t>(max_context, 4096));
    auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(budget_s);
    auto left_s = [&] { return std::chrono::duration<double>(deadline - std::chrono::steady_clock::now()).count(); };
    std::string last;
    for (int attempt = 0; attempt <= opt_.retries; ++attempt) {
      if (g_interrupted) throw PolicyError("interrupted");
      double left = left_s();
      if (left <= 0) throw PolicyDeadline("episode time ran out waiting for the server (" + last + ")");
      auto t0 = std::chrono::steady_clock::now();
      HttpResponse r = http("POST", url, text, key_, std::min(opt_.request_timeout_s, left), max_bytes);
      double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      bool retry = false;
      if (r.too_large) {
        throw PolicyError(url + ": " + r.transport_error + " (--max-answer-mib " + std::to_string(opt_.max_answer_mib) + ")");
      } else if (!r.transport_error.empty()) {
        last = r.transport_error;
        if (r.timed_out && left_s() <= 0.05)
          throw PolicyDeadline("episode time ran out waiting for the server (" + last + ")");
        retry = true;
      } else if (r.status == 429 || r.status >= 500) {
        last = "HTTP " + std::to_string(r.status) + ": " + valid_text(cut_utf8(r.body, 200));
        retry = true;
      } else if (r.status != 200) {
        // 4xx other than 429: the request itself is wrong (context too long, bad model); no retry.
        throw PolicyError("HTTP " + std::to_string(r.status) + " from " + url + ": " + valid_text(cut_utf8(r.body, 500)));
      } else {
        try {
          AssistantTurn t = parse_completion(r.body, max_items);
          t.attempts = attempt + 1;
          t.latency_ms = ms;
          return t;
        } catch (const std::exception& e) {
          last = std::string("malformed answer: ") + e.what();
          retry = true;
        }
      }
      r.body = std::string();  // not held through the wait
      if (!retry || attempt == opt_.retries) break;
      double wait = r.retry_after_s >= 0 ? r.retry_after_s : opt_.retry_base_s * std::pow(2.0, attempt);
      wait = std::min(wait, 60.0);
      if (wait >= left_s())
        throw PolicyDeadline("episode time ran out: " + last + "; the next try (in " + log::cat(wait) +
                             " s) would come after the episode's end (" + log::cat(std::max(0.0, left_s())) + " s left)");
      log::warn("policy: ", last, "; retry ", attempt + 1, "/", opt_.retries, " in ", wait, " s");
      auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(wait);
      while (std::chrono::steady_clock::now() < until && !g_interrupted)
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    throw PolicyError("no answer from " + url + " after " + std::to_string(opt_.retries + 1) + " attempts: " + last);
  }

  const PolicyOptions& options() const { return opt_; }
  // What a request names: the served model, or with --load-lora the adapter (vLLM: its name; SGLang:
  // "base:name", and its lora_path field for servers older than that syntax).
  void select_model(Json& body) const {
    body["model"] = request_model_;
    if (adapter_ && opt_.server == "sglang") body["lora_path"] = adapter_->name;
  }

 private:
  // The new checkpoint reaches the server before any episode: SGLang's POST /update_weights_from_disk
  // (at the server's root, beside /v1) with {"model_path": DIR}; DIR must be readable by the server.
  // A server that refuses, or has no such endpoint (vLLM: restart it on DIR instead), is an
  // environment error: sampling the old weights would train on the wrong policy.
  void load_weights(const std::string& dir) {
    const std::string url = root() + "/update_weights_from_disk";
    const auto t0 = std::chrono::steady_clock::now();
    HttpResponse r = http("POST", url, Json{{"model_path", dir}}.dump(), key_, std::max(600.0, opt_.request_timeout_s));
    if (!r.transport_error.empty()) throw EnvironmentError("--load-weights: " + url + ": " + r.transport_error);
    Json answer;
    try {
      answer = parse_json(r.body, url);
    } catch (const InputError&) {
      answer = r.body.substr(0, 300);
    }
    // Loaded: HTTP 200 and no "success" other than true (a null or "true" is not a yes).
    const bool ok = r.status == 200 && (!answer.is_object() || !answer.contains("success") || answer["success"] == true);
    if (!ok)
      throw EnvironmentError("--load-weights: the server did not load " + dir + " (HTTP " + std::to_string(r.status) +
                             " from " + url + ": " + r.body.substr(0, 300) + ")" +
                             (r.status == 404 ? "; a server without this endpoint (vLLM) must be restarted on the checkpoint" : ""));
    log::info("policy: the server loaded ", dir, " in ",
              std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), " s");
  }

  // The server's root: SGLang's own endpoints are beside /v1, not under it.
  std::string root() const {
    std::string r = base_;
    if (r.size() >= 3 && r.compare(r.size() - 3, 3, "/v1") == 0) r.resize(r.size() - 3);
    return r;
  }

  // GET /models: the `data` array (base models, and the adapters loaded, with "parent" naming their base
  // on vLLM and on SGLang since late 2025), or nothing (with a warning) when the server lists none.
  std::optional<Json> list_models() {
    const std::string url = base_ + "/models";
    HttpResponse r = http("GET", url, "", key_, 30);
    if (!r.transport_error.empty() || r.status != 200) {
      log::warn("policy: cannot list models at ", url, " (",
                r.transport_error.empty() ? "HTTP " + std::to_string(r.status) : r.transport_error, ")");
      return std::nullopt;
    }
    try {
      Json j = parse_json(r.body, url);
      if (j.is_object() && j.contains("data") && j["data"].is_array()) return std::move(j["data"]);
    } catch (const InputError&) {
    }
    log::warn("policy: no model list at ", url);
    return std::nullopt;
  }

  static bool is_adapter_entry(const Json& m) { return m.is_object() && m.contains("parent") && m["parent"].is_string(); }

  // The first base model listed (an adapter names its base in "parent"), else 'default'.
  std::string discover_model(const std::optional<Json>& models) {
    if (models)
      for (const Json& m : *models)
        if (m.is_object() && m.contains("id") && m["id"].is_string() && !is_adapter_entry(m))
          return valid_text(m["id"].get<std::string>());
    log::warn("policy: no model listed at ", base_, "/models; using model 'default' (set --model)");
    return "default";
  }

  // The adapter reaches the server before any episode, under its content name (ca-lora-<id>):
  //   vLLM   POST <url>/load_lora_adapter {"lora_name", "lora_path"} (the server needs
  //          VLLM_ALLOW_RUNTIME_LORA_UPDATING=True), requests then say "model": <name>;
  //   SGLang POST <root>/load_lora_adapter {"lora_name", "lora_path"} (--enable-lora), requests then say
  //          "model": "<base>:<name>" and "lora_path": <name>.
  // A name the server lists already holds this very content (the name is the content's hash), so it is
  // not loaded again; the server's other ca-lora-* adapters (earlier steps) are unloaded first unless
  // --keep-loras, through the matching unload_lora_adapter. A refusal of the load (any non-2xx, or
  // "success": false) is an environment error: sampling without the adapter would train the wrong policy.
  void load_lora(const AdapterRef& a, const std::optional<Json>& models) {
    const bool vllm = opt_.server == "vllm";
    const std::string at = vllm ? base_ : root();
    bool loaded = false;
    std::vector<std::string> stale;
    if (models)
      for (const Json& m : *models) {
        if (!m.is_object() || !m.contains("id") || !m["id"].is_string()) continue;
        const std::string id = m["id"].get<std::string>();
        if (id == a.name) loaded = true;
        else if (id.rfind(kAdapterPrefix, 0) == 0 && is_adapter_entry(m)) stale.push_back(id);
        if (!m.contains("owned_by") || !m["owned_by"].is_string()) continue;
        const std::string owner = m["owned_by"].get<std::string>();
        if ((owner == "vllm" || owner == "sglang") && owner != opt_.server)
          log::warn("policy: ", base_, "/models says its models are owned by ", owner, ", but --server is ", opt_.server);
      }
    if (!opt_.keep_loras)
      for (const std::string& name : stale) {
        const std::string url = at + "/unload_lora_adapter";
        HttpResponse r = http("POST", url, Json{{"lora_name", name}}.dump(), key_, std::max(60.0, opt_.request_timeout_s));
        if (r.transport_error.empty() && r.status >= 200 && r.status < 300)
          log::info("policy: unloaded the earlier adapter ", name);
        else
          log::warn("policy: could not unload the earlier adapter ", name, " (",
                    r.transport_error.empty() ? "HTTP " + std::to_string(r.status) + ": " + valid_text(cut_utf8(r.body, 200))
                                              : r.transport_error,
                    ")");
      }
    if (loaded) {
      log::info("policy: the server has adapter ", a.name, " (", a.path, ") loaded already");
    } else {
      const std::string url = at + "/load_lora_adapter";
      const auto t0 = std::chrono::steady_clock::now();
      HttpResponse r = http("POST", url, Json{{"lora_name", a.name}, {"lora_path", a.path}}.dump(), key_,
                            std::max(600.0, opt_.request_timeout_s));
      if (!r.transport_error.empty()) throw EnvironmentError("--load-lora: " + url + ": " + r.transport_error);
      Json answer;
      try {
        answer = parse_json(r.body, url);
      } catch (const InputError&) {  // vLLM answers in plain text
      }
      const bool ok = r.status >= 200 && r.status < 300 &&
                      !(answer.is_object() && answer.contains("success") && answer["success"] == false);
      if (!ok) {
        std::string hint;
        if (r.status == 404)
          hint = vllm ? "; is the server vLLM with VLLM_ALLOW_RUNTIME_LORA_UPDATING=True and --enable-lora?"
                      : "; is the server SGLang with --enable-lora (and --max-lora-rank, --lora-target-modules for adapters loaded later)?";
        throw EnvironmentError("--load-lora: the server did not load " + a.path + " as " + a.name + " (HTTP " +
                               std::to_string(r.status) + " from " + url + ": " + valid_text(cut_utf8(r.body, 300)) + ")" + hint);
      }
      log::info("policy: the server loaded adapter ", a.path, " as ", a.name, " in ",
                std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), " s");
    }
    request_model_ = vllm ? a.name : opt_.model + ":" + a.name;
  }

  std::string base_, key_;
  PolicyOptions opt_;
  std::optional<AdapterRef> adapter_;
  std::string request_model_;  // what requests name in "model"
};

AssistantTurn OpenAISession::next(const Json& messages, const Json& tools, const TurnBudget& budget) {
  const PolicyOptions& o = policy_.options();
  Json body = {{"messages", messages},
               {"tools", tools},
               {"tool_choice", "auto"},
               {"temperature", o.temperature},
               {"top_p", o.top_p},
               {"max_tokens", std::max<int64_t>(1, std::min(o.max_tokens, budget.max_tokens))},
               {"seed", seed_ & 0x7fffffffffffffffULL}};
  policy_.select_model(body);
  if (o.logprobs) {
    body["logprobs"] = true;
    body["return_token_ids"] = true;  // vLLM >= 0.10.2; servers that do not know it ignore it
  }
  for (auto& [k, v] : o.extra.items()) body[k] = v;
  return policy_.complete(body, budget.timeout_s, o.max_context);
}

}  // namespace

std::unique_ptr<Policy> make_openai_policy(const std::string& base_url, const PolicyOptions& options) {
  return std::make_unique<OpenAIPolicy>(base_url, options);
}

}  // namespace ca::agent_run
