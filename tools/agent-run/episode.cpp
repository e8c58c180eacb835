// The ReAct loop.
#include "tools/agent-run/episode.hpp"

#include <chrono>
#include <cstdlib>

#include "libcommon/ids.hpp"
#include "libcommon/log.hpp"
#include "tools/agent-run/text.hpp"
#include "tools/agent-run/toolbox.hpp"
#include "tools/agent-run/workspace.hpp"

namespace ca::agent {

std::string system_prompt() {
  return "You are an expert CUDA engineer. Your job: make the PyTorch model in model.py faster on the GPU by "
         "writing CUDA kernels and a plan that runs them, and prove it with the tools.\n\n"
         "Your workspace (/workspace) holds SKILL.md (the bundle format, the rules and worked examples: read it "
         "first), model.py (the reference: class Model, get_inputs(), get_init_inputs()), kernels/ (put your .cu "
         "files here) and plan.yaml (the plan that says how to launch them).\n\n"
         "Tools: read_file, write_file, edit_file, list_files, grep and bash work on the workspace (bash runs in a "
         "sandbox without network or GPU). compile() builds kernels/*.cu and checks plan.yaml; verify() runs the "
         "bundle against the reference on fresh inputs; profile() times it against PyTorch eager and "
         "torch.compile. Work in steps: write, compile, verify, profile, improve. The bundle must stay correct; "
         "the goal is to beat torch.compile. When you are done, answer without calling a tool: the workspace "
         "as you leave it is your submission.";
}

std::string user_prompt(const Json& task) {
  std::string s = "Task";
  if (task.contains("task_id") && task["task_id"].is_string()) s += " " + task["task_id"].get<std::string>();
  s += ": write a CUDA bundle (kernels/*.cu + plan.yaml) computing the same outputs as model.py, faster.\n\n"
       "model.py:\n```python\n" +
       task.value("code", std::string()) + "\n```\n\nStart by reading SKILL.md.";
  return s;
}

int64_t estimate_tokens(const std::string& text) { return static_cast<int64_t>(text.size() + 3) / 4; }

Json best_result(const Json& results) {
  Json best = nullptr;
  double best_key = -1;
  for (const auto& r : results) {
    if (!r.contains("check") || !r["check"].is_object() || !(r["check"].contains("correct") && r["check"]["correct"].is_boolean() && r["check"]["correct"].get<bool>()))
      continue;
    double key = 0;  // verified, not profiled
    if (r.contains("prof") && r["prof"].is_object() && r["prof"].contains("speedup_vs_compile") &&
        r["prof"]["speedup_vs_compile"].is_number())
      key = 1 + r["prof"]["speedup_vs_compile"].get<double>();
    if (key > best_key) {  // ties: the earlier one
      best_key = key;
      best = r;
    }
  }
  return best;
}

namespace {

// Everything a policy returned, as valid UTF-8 (a server or a sampler may hand back broken bytes).
void make_valid(AssistantTurn& t) {
  t.content = valid_text(t.content);
  if (t.reasoning) t.reasoning = valid_text(*t.reasoning);
  t.finish_reason = valid_text(t.finish_reason);
  for (auto& c : t.tool_calls) {
    c.id = valid_text(c.id);
    c.name = valid_text(c.name);
    c.arguments = valid_text(c.arguments);
  }
}

std::string dump_safe(const Json& j) { return j.dump(-1, ' ', false, Json::error_handler_t::replace); }

Json turn_record(int index, const AssistantTurn& t, int64_t context_tokens, bool estimated) {
  Json calls = Json::array();
  for (const auto& c : t.tool_calls) calls.push_back({{"id", c.id}, {"name", c.name}, {"arguments", c.arguments}});
  Json a = {{"content", t.content}, {"tool_calls", calls}, {"finish_reason", t.finish_reason}};
  if (t.reasoning) a["reasoning_content"] = *t.reasoning;
  if (!t.token_ids.is_null()) a["token_ids"] = t.token_ids;
  if (!t.logprobs.is_null()) a["logprobs"] = t.logprobs;
  if (!t.tokens.is_null()) a["tokens"] = t.tokens;
  Json usage = Json::object();
  if (t.prompt_tokens >= 0) usage["prompt_tokens"] = t.prompt_tokens;
  if (t.completion_tokens >= 0) usage["completion_tokens"] = t.completion_tokens;
  Json turn = {{"index", index},
               {"assistant", a},
               {"usage", usage},
               {"attempts", t.attempts},
               {"latency_ms", t.latency_ms},
               {"tool_results", Json::array()},
               {"context_tokens", context_tokens},
               {"context_tokens_estimated", estimated}};
  if (!t.prompt_token_ids.is_null()) turn["prompt_token_ids"] = t.prompt_token_ids;
  return turn;
}

// The assistant message as it goes back to the server. Arguments that are not JSON are sent back
// as "{}": servers parse the history's arguments to render the chat template and would refuse the
// whole request; the record keeps the model's own text.
Json assistant_message(const AssistantTurn& t) {
  Json m = {{"role", "assistant"}, {"content", t.content}};
  if (t.reasoning) m["reasoning_content"] = *t.reasoning;
  if (!t.tool_calls.empty()) {
    Json calls = Json::array();
    for (const auto& c : t.tool_calls) {
      std::string args = c.arguments;
      if (!Json::accept(args) || !Json::parse(args).is_object()) args = "{}";
      calls.push_back({{"id", c.id}, {"type", "function"}, {"function", {{"name", c.name}, {"arguments", args}}}});
    }
    m["tool_calls"] = calls;
  }
  return m;
}

}  // namespace

Json run_episode(const EpisodeInput& in, Policy& policy, const Json& policy_description, const RunSettings& settings,
                   const std::string& skill_text) {
  auto start = std::chrono::steady_clock::now();
  auto elapsed_s = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(); };
  Workspace ws(skill_text, in.task.value("code", std::string()), settings.sandbox.workspace_mib << 20);
  Toolbox tools(settings, ws, in.task, in.task_id, in.sandbox_uid);
  const Json& schemas = tool_schemas();

  Json messages = Json::array({{{"role", "system"}, {"content", system_prompt()}},
                               {{"role", "user"}, {"content", user_prompt(in.task)}}});
  Json turns = Json::array(), results = Json::array();
  std::string stop_reason, error;
  int64_t prompt_total = 0, completion_total = 0, tool_calls = 0, tool_errors = 0, malformed = 0;
  std::map<std::string, int64_t> per_tool;
  bool any_estimated = false;
  const int64_t tools_tokens = estimate_tokens(schemas.dump());
  // Context now: the server's count after the last turn plus an estimate of what came since.
  int64_t context_known = 0;
  std::size_t known_upto = 0;  // messages covered by context_known
  auto context_now = [&] {
    int64_t est = context_known;
    if (known_upto == 0) est += tools_tokens;
    for (std::size_t i = known_upto; i < messages.size(); ++i) est += estimate_tokens(dump_safe(messages[i])) + 4;
    return est;
  };
  std::unique_ptr<PolicySession> session;
  // Whatever fails inside the loop (a tool, the policy, our own code) ends the episode with stop
  // reason `error` and the reason; the trajectory so far and the bundle are still the record.
  try {
  try {
    session = policy.start(in.task_id, in.seed);
  } catch (const PolicyError& e) {
    stop_reason = "policy_error";
    error = e.what();
  }

  // For the tests of this very path: CA_AGENT_RUN_FAULT_TURN=N makes turn N fail as a bug would.
  const char* fault = std::getenv("CA_AGENT_RUN_FAULT_TURN");
  const int fault_turn = fault && *fault ? std::atoi(fault) : -1;
  for (int turn = 0; session && stop_reason.empty(); ++turn) {
    if (turn == fault_turn) throw std::logic_error("injected fault at turn " + std::to_string(turn) + " (CA_AGENT_RUN_FAULT_TURN)");
    if (g_interrupted) { stop_reason = "interrupted"; break; }
    if (turn >= settings.max_turns) { stop_reason = "max_turns"; break; }
    double left_s = settings.episode_timeout_s - elapsed_s();
    if (left_s <= 0) { stop_reason = "timeout"; break; }
    int64_t context = context_now();
    if (context >= settings.max_context) { stop_reason = "context_limit"; break; }
    AssistantTurn t;
    try {
      t = session->next(messages, schemas, TurnBudget{settings.max_context - context, left_s});
    } catch (const PolicyError& e) {
      stop_reason = g_interrupted ? "interrupted" : "policy_error";
      error = e.what();
      break;
    }
    make_valid(t);
    for (std::size_t i = 0; i < t.tool_calls.size(); ++i)
      if (t.tool_calls[i].id.empty()) t.tool_calls[i].id = "call_" + std::to_string(turn) + "_" + std::to_string(i);
    messages.push_back(assistant_message(t));
    bool estimated = t.prompt_tokens < 0 || t.completion_tokens < 0;
    if (!estimated) {
      context_known = t.prompt_tokens + t.completion_tokens;
      known_upto = messages.size();
      prompt_total += t.prompt_tokens;
      completion_total += t.completion_tokens;
    } else {
      any_estimated = true;
      completion_total += t.token_ids.is_array() ? static_cast<int64_t>(t.token_ids.size())
                                                 : estimate_tokens(t.content) +
                                                       estimate_tokens(messages.back().value("tool_calls", Json()).dump());
    }
    Json rec = turn_record(turn, t, context_now(), estimated);
    log::verbose("task ", in.task_id, " turn ", turn, ": ", t.tool_calls.size(), " tool call(s), context ~",
                 context_now(), " tokens");
    if (t.tool_calls.empty()) {
      stop_reason = t.finish_reason == "length" ? "max_tokens" : "done";
      turns.push_back(rec);
      break;
    }
    for (const auto& call : t.tool_calls) {
      ++tool_calls;
      ++per_tool[call.name];
      ToolOutcome o = tools.call(call);
      if (!o.ok) ++tool_errors;
      if (o.malformed) ++malformed;
      messages.push_back({{"role", "tool"}, {"tool_call_id", call.id}, {"name", call.name}, {"content", o.text}});
      rec["tool_results"].push_back({{"tool_call_id", call.id},
                                     {"name", call.name},
                                     {"content", o.text},
                                     {"ok", o.ok},
                                     {"malformed", o.malformed},
                                     {"elapsed_ms", o.elapsed_ms}});
      if (!o.result.is_null()) {
        o.result["turn"] = turn;
        results.push_back(with_valid_utf8(o.result));
      }
      if (g_interrupted) break;
    }
    rec["context_tokens"] = context_now();
    turns.push_back(rec);
    if (g_interrupted && stop_reason.empty()) stop_reason = "interrupted";
  }
  } catch (const std::exception& e) {
    stop_reason = g_interrupted ? "interrupted" : "error";
    error = e.what();
    log::error("task ", in.task_id, " episode ", in.index, ": ", valid_text(error));
  }

  // The submission.
  BundleRead read;
  try {
    read = ws.read_bundle();
  } catch (const std::exception& e) {
    read.bundle = Json{{"kernels", Json::object()}, {"plan", ""}};
    read.notes = std::string("the bundle could not be read: ") + e.what() + "\n";
  }
  std::string notes = read.notes;
  Json bundle = read.bundle;
  Json submitted = {{"mode", settings.submit}, {"from", "final"}};
  if (settings.submit == "best") {
    Json best = best_result(results);
    if (!best.is_null()) {
      bundle = with_valid_utf8(best["bundle"]);
      submitted = {{"mode", "best"}, {"from", "turn"}, {"turn", best["turn"]}, {"candidate_id", best["candidate_id"]}};
    } else {
      submitted["note"] = "no verified bundle seen; the final workspace is submitted";
    }
  }
  // Results keep their candidate ids; their bundles are dropped (the submitted one is `bundle`).
  Json seen = Json::array();
  for (auto r : results) {
    r.erase("bundle");
    seen.push_back(r);
  }
  Json counts = {{"turns", static_cast<int64_t>(turns.size())},
                 {"tool_calls", tool_calls},
                 {"tool_errors", tool_errors},
                 {"malformed_calls", malformed},
                 {"calls_by_tool", per_tool},
                 {"prompt_tokens", prompt_total},
                 {"completion_tokens", completion_total},
                 {"context_tokens", context_now()},
                 {"tokens_estimated", any_estimated}};
  Json episode = {{"policy", policy_description},
                  {"settings", settings.to_json()},
                  {"episode_index", in.index},
                  {"seed", in.seed},
                  {"prompt", {{"system", messages[0]["content"]}, {"user", messages[1]["content"]}}},
                  {"tools", schemas},
                  {"turns", turns},
                  {"results", seen},
                  {"stop_reason", stop_reason},
                  {"submitted", submitted},
                  {"counts", counts},
                  {"elapsed_s", elapsed_s()}};
  if (!error.empty()) episode["error"] = valid_text(error);
  if (!notes.empty()) episode["bundle_notes"] = valid_text(notes);
  if (!read.refused.empty()) episode["bundle_refused"] = read.refused;

  Json out;
  out["schema"] = "cuda-agent/candidate/v1";
  out["task_id"] = in.task_id;
  out["candidate_id"] = candidate_id_for(in.task_id, bundle);
  out["bundle"] = bundle;
  out["task"] = in.task;
  out["episode"] = with_valid_utf8(std::move(episode));
  return out;
}

}  // namespace ca::agent

namespace ca::agent {

Json RunSettings::to_json() const {
  return {{"max_turns", max_turns},
          {"max_context", max_context},
          {"episode_timeout_s", episode_timeout_s},
          {"submit", submit},
          {"tool_output_chars", tool_output_chars},
          {"sandbox", sandbox.to_json()},
          {"kernel_check", kernel_check},
          {"kernel_prof", kernel_prof},
          {"check_args", check_args},
          {"prof_args", prof_args},
          {"locked_timeout_s", locked_timeout_s},
          {"judge", judge_urls},
          {"skill", skill_path}};
}

}  // namespace ca::agent
