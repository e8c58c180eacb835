// The openai:URL policy: chat completions with tools over libcurl, retries with backoff on 429, 5xx
// and transport errors, token ids and logprobs recorded when the server returns them.

#include <chrono>
#include <mutex>
#include <cmath>
#include <cstdlib>
#include <thread>

#include "libcommon/errors.hpp"
#include "libcommon/log.hpp"
#include "tools/agent-run/http_client.hpp"
#include "tools/agent-run/policy.hpp"

namespace ca::agent {
namespace {

HttpResponse http(const std::string& method, const std::string& url, const std::string& body,
                  const std::string& api_key, double timeout_s) {
  std::vector<std::string> headers = {"Content-Type: application/json", "Accept: application/json"};
  if (!api_key.empty()) headers.push_back("Authorization: Bearer " + api_key);
  return http_request(method, url, body, headers, timeout_s, std::min(30.0, std::max(1.0, timeout_s)));
}

std::string trim_slash(std::string s) {
  while (!s.empty() && s.back() == '/') s.pop_back();
  return s;
}

// Parses one chat-completions answer into a turn; throws std::runtime_error on a malformed one.
AssistantTurn parse_completion(const Json& j) {
  if (!j.contains("choices") || !j["choices"].is_array() || j["choices"].empty())
    throw std::runtime_error("answer without choices: " + j.dump().substr(0, 300));
  const Json& choice = j["choices"][0];
  const Json& msg = choice.at("message");
  AssistantTurn t;
  if (msg.contains("content") && msg["content"].is_string()) t.content = msg["content"];
  for (const char* k : {"reasoning_content", "reasoning"})
    if (!t.reasoning && msg.contains(k) && msg[k].is_string()) t.reasoning = msg[k].get<std::string>();
  if (msg.contains("tool_calls") && msg["tool_calls"].is_array()) {
    for (const auto& c : msg["tool_calls"]) {
      ToolCall call;
      call.id = c.value("id", "");
      if (c.contains("function") && c["function"].is_object()) {
        call.name = c["function"].value("name", "");
        const Json& a = c["function"].contains("arguments") ? c["function"]["arguments"] : Json();
        call.arguments = a.is_string() ? a.get<std::string>() : (a.is_null() ? "" : a.dump());
      }
      t.tool_calls.push_back(call);
    }
  }
  if (choice.contains("finish_reason") && choice["finish_reason"].is_string()) t.finish_reason = choice["finish_reason"];
  if (j.contains("usage") && j["usage"].is_object()) {
    t.prompt_tokens = j["usage"].value("prompt_tokens", -1);
    t.completion_tokens = j["usage"].value("completion_tokens", -1);
  }
  // vLLM (>= 0.10.2, return_token_ids): prompt_token_ids beside the choices and choices[].token_ids;
  // logprobs.content[] with token and logprob. ppo-step trains on the two id lists.
  if (j.contains("prompt_token_ids") && j["prompt_token_ids"].is_array()) t.prompt_token_ids = j["prompt_token_ids"];
  if (choice.contains("token_ids") && choice["token_ids"].is_array()) t.token_ids = choice["token_ids"];
  if (choice.contains("logprobs") && choice["logprobs"].is_object() && choice["logprobs"].contains("content") &&
      choice["logprobs"]["content"].is_array()) {
    Json lp = Json::array(), toks = Json::array(), ids = Json::array();
    bool all_ids = true;
    for (const auto& e : choice["logprobs"]["content"]) {
      lp.push_back(e.value("logprob", 0.0));
      std::string tok = e.value("token", "");
      toks.push_back(tok);
      // return_tokens_as_token_ids gives "token_id:123".
      if (tok.rfind("token_id:", 0) == 0) ids.push_back(std::strtoll(tok.c_str() + 9, nullptr, 10));
      else all_ids = false;
    }
    t.logprobs = lp;
    t.tokens = toks;
    if (t.token_ids.is_null() && all_ids && !ids.empty()) t.token_ids = ids;
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
    if (const char* k = std::getenv(opt_.api_key_env.c_str()); k && *k) key_ = k;
    if (!opt_.load_weights.empty()) load_weights(opt_.load_weights);
    if (opt_.model.empty()) opt_.model = discover_model();
  }
  Json describe() const override {
    return {{"kind", "openai"},           {"url", base_},
            {"model", opt_.model},        {"temperature", opt_.temperature},
            {"top_p", opt_.top_p},        {"max_tokens", opt_.max_tokens},
            {"request_timeout_s", opt_.request_timeout_s}, {"retries", opt_.retries},
            {"logprobs", opt_.logprobs},  {"api_key_env", opt_.api_key_env},
            {"extra", opt_.extra},
            {"weights", opt_.load_weights.empty() ? Json(nullptr) : Json(opt_.load_weights)}};
  }
  std::unique_ptr<PolicySession> start(const std::string&, uint64_t seed) override {
    return std::make_unique<OpenAISession>(*this, seed);
  }

  // POST with retries. Returns the parsed answer; throws PolicyError when the retries are spent.
  AssistantTurn complete(const Json& body, double budget_s) const {
    const std::string url = base_ + "/chat/completions";
    const std::string text = body.dump(-1, ' ', false, Json::error_handler_t::replace);
    auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(budget_s);
    std::string last;
    for (int attempt = 0; attempt <= opt_.retries; ++attempt) {
      if (g_interrupted) throw PolicyError("interrupted");
      double left = std::chrono::duration<double>(deadline - std::chrono::steady_clock::now()).count();
      if (left <= 0) throw PolicyError("episode time ran out waiting for the server (" + last + ")");
      auto t0 = std::chrono::steady_clock::now();
      HttpResponse r = http("POST", url, text, key_, std::min(opt_.request_timeout_s, left));
      double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      bool retry = false;
      if (!r.transport_error.empty()) {
        last = r.transport_error;
        retry = true;
      } else if (r.status == 429 || r.status >= 500) {
        last = "HTTP " + std::to_string(r.status) + ": " + r.body.substr(0, 200);
        retry = true;
      } else if (r.status != 200) {
        // 4xx other than 429: the request itself is wrong (context too long, bad model); no retry.
        throw PolicyError("HTTP " + std::to_string(r.status) + " from " + url + ": " + r.body.substr(0, 500));
      } else {
        try {
          AssistantTurn t = parse_completion(Json::parse(r.body));
          t.attempts = attempt + 1;
          t.latency_ms = ms;
          return t;
        } catch (const std::exception& e) {
          last = std::string("malformed answer: ") + e.what();
          retry = true;
        }
      }
      if (!retry || attempt == opt_.retries) break;
      double wait = r.retry_after_s >= 0 ? r.retry_after_s : opt_.retry_base_s * std::pow(2.0, attempt);
      wait = std::min(wait, 60.0);
      log::warn("policy: ", last, "; retry ", attempt + 1, "/", opt_.retries, " in ", wait, " s");
      auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(wait);
      while (std::chrono::steady_clock::now() < until && !g_interrupted)
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    throw PolicyError("no answer from " + url + " after " + std::to_string(opt_.retries + 1) + " attempts: " + last);
  }

  const PolicyOptions& options() const { return opt_; }

 private:
  // The new checkpoint reaches the server before any episode: SGLang's POST /update_weights_from_disk
  // (at the server's root, beside /v1) with {"model_path": DIR}; DIR must be readable by the server.
  // A server that refuses, or has no such endpoint (vLLM: restart it on DIR instead), is an
  // environment error: sampling the old weights would train on the wrong policy.
  void load_weights(const std::string& dir) {
    std::string root = base_;
    if (root.size() >= 3 && root.compare(root.size() - 3, 3, "/v1") == 0) root.resize(root.size() - 3);
    const std::string url = root + "/update_weights_from_disk";
    const auto t0 = std::chrono::steady_clock::now();
    HttpResponse r = http("POST", url, Json{{"model_path", dir}}.dump(), key_, std::max(600.0, opt_.request_timeout_s));
    if (!r.transport_error.empty()) throw EnvironmentError("--load-weights: " + url + ": " + r.transport_error);
    Json answer = Json::accept(r.body) ? Json::parse(r.body) : Json(r.body);
    const bool ok = r.status == 200 && (!answer.is_object() || answer.value("success", true));
    if (!ok)
      throw EnvironmentError("--load-weights: the server did not load " + dir + " (HTTP " + std::to_string(r.status) +
                             " from " + url + ": " + r.body.substr(0, 300) + ")" +
                             (r.status == 404 ? "; a server without this endpoint (vLLM) must be restarted on the checkpoint" : ""));
    log::info("policy: the server loaded ", dir, " in ",
              std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), " s");
  }

  std::string discover_model() {
    HttpResponse r = http("GET", base_ + "/models", "", key_, 30);
    if (!r.transport_error.empty() || r.status != 200) {
      log::warn("policy: cannot list models at ", base_, "/models (",
                r.transport_error.empty() ? "HTTP " + std::to_string(r.status) : r.transport_error,
                "); using model 'default' (set --model)");
      return "default";
    }
    try {
      Json j = Json::parse(r.body);
      return j.at("data").at(0).at("id").get<std::string>();
    } catch (const std::exception&) {
      log::warn("policy: no model listed at ", base_, "/models; using model 'default' (set --model)");
      return "default";
    }
  }
  std::string base_, key_;
  PolicyOptions opt_;
};

AssistantTurn OpenAISession::next(const Json& messages, const Json& tools, const TurnBudget& budget) {
  const PolicyOptions& o = policy_.options();
  Json body = {{"model", o.model},
               {"messages", messages},
               {"tools", tools},
               {"tool_choice", "auto"},
               {"temperature", o.temperature},
               {"top_p", o.top_p},
               {"max_tokens", std::max<int64_t>(1, std::min(o.max_tokens, budget.max_tokens))},
               {"seed", seed_ & 0x7fffffffffffffffULL}};
  if (o.logprobs) {
    body["logprobs"] = true;
    body["return_token_ids"] = true;  // vLLM >= 0.10.2; servers that do not know it ignore it
  }
  for (auto& [k, v] : o.extra.items()) body[k] = v;
  return policy_.complete(body, budget.timeout_s);
}

}  // namespace

std::unique_ptr<Policy> make_openai_policy(const std::string& base_url, const PolicyOptions& options) {
  return std::make_unique<OpenAIPolicy>(base_url, options);
}

}  // namespace ca::agent
