// The ReAct loop.
#include "tools/agent-run/episode.hpp"

#include <chrono>
#include <cstdlib>

#include "libcommon/errors.hpp"
#include "libcommon/ids.hpp"
#include "libcommon/log.hpp"
#include "tools/agent-run/text.hpp"
#include "tools/agent-run/toolbox.hpp"
#include "tools/agent-run/workspace.hpp"

namespace ca::agent_run {

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

// Everything a policy returned, as valid UTF-8 (a server or a sampler may hand back broken bytes);
// in place: an answer is not copied to be checked.
void make_valid(AssistantTurn& t) {
  make_valid_text(t.content);
  if (t.reasoning) make_valid_text(*t.reasoning);
  make_valid_text(t.finish_reason);
  for (auto& c : t.tool_calls) {
    make_valid_text(c.id);
    make_valid_text(c.name);
    make_valid_text(c.arguments);
  }
}

// A conversation may hold at most this many bytes per token of --max-context, whatever the server
// says its usage is: a server that answers 60 MB and reports 1 token would otherwise grow the
// conversation (and the requests, and the record) by 60 MB a turn. Real text is 3 to 5 bytes a token.
constexpr int64_t kMaxBytesPerToken = 16;
// Tool calls run in one turn; past them the rest are left out of the conversation and the record
// (counted in the assistant's "truncated"), and the model is told. 300,000 calls of an unknown tool in one
// answer made a record that no cut of its values could bring under the readers' line limit, and the
// episode ended as error with nothing of it kept.
constexpr std::size_t kMaxCallsPerTurn = 100;

// A string of the episode cut for the record, and what it was.
struct StringRef {
  Json* parent;
  std::string key;
  std::size_t bytes;
  int depth;  // of the parent: marks go deepest first (a mark added to an object may move what it holds)
};

// Every string of `v` that is the value of an object's key (not those in arrays: token strings are
// short), without recursion.
void collect_strings(Json& v, std::vector<StringRef>& out) {
  std::vector<std::pair<Json*, int>> todo = {{&v, 0}};
  while (!todo.empty()) {
    auto [j, depth] = todo.back();
    todo.pop_back();
    if (j->is_object()) {
      for (auto it = j->begin(); it != j->end(); ++it) {
        if (it.key() == "truncated") continue;
        if (it->is_string()) out.push_back({j, it.key(), it->get_ref<const std::string&>().size(), depth});
        else if (it->is_structured()) todo.push_back({&*it, depth + 1});
      }
    } else if (j->is_array()) {
      for (auto& x : *j)
        if (x.is_structured()) todo.push_back({&x, depth + 1});
    }
  }
}

void mark_cut(Json& parent, const std::string& key, Json what) {
  if (!parent.contains("truncated") || !parent["truncated"].is_object()) parent["truncated"] = Json::object();
  if (!parent["truncated"].contains(key)) parent["truncated"][key] = std::move(what);
}

// Keeps the record under kMaxRecordBytes (the readers' line limit, with room for the sections later
// tools add) and its nesting under kMaxJsonDepth: the longest strings of the episode, and only those, are cut to one common length, each
// marked in its object ("truncated": {"content": {"bytes": original, "kept_bytes": kept}}); if that is
// not enough, the turns' token arrays go (marked with their item counts). Returns how many values were
// cut; -1 when even that cannot make it fit (the task or the bundle alone is too large).
// Containers of `root` (at container level root_level) nested past max_level are replaced by a
// marker: a judge's answer nested 510 deep, put into results[i].check, would nest the record past
// what the next tool reads. Without recursion.
int64_t cut_deep(Json& root, int root_level, int max_level) {
  int64_t cuts = 0;
  std::vector<std::pair<Json*, int>> todo = {{&root, root_level}};
  while (!todo.empty()) {
    auto [j, level] = todo.back();
    todo.pop_back();
    for (auto& child : *j) {
      if (!child.is_structured()) continue;
      if (level + 1 > max_level) {
        child = "[agent-run: cut here, nested deeper than " + std::to_string(max_level) + " levels in the record]";
        ++cuts;
      } else {
        todo.push_back({&child, level + 1});
      }
    }
  }
  return cuts;
}

int64_t fit_record(Json& out, std::size_t budget) {
  Json& episode = out["episode"];
  int64_t cuts = 0;
  // One level below the readers' limit, for a tool that nests the record one level deeper.
  const int max_level = kMaxJsonDepth - 1;
  if (json_depth(out) > max_level) {
    cuts += cut_deep(episode, 2, max_level);
    if (json_depth(out) > max_level) return -1;  // the task itself
  }
  std::size_t size = dumped_size(out);
  if (size <= budget) return cuts;
  for (int round = 0; round < 4 && size > budget; ++round) {
    std::vector<StringRef> strings;
    collect_strings(episode, strings);
    if (strings.empty()) break;
    // The common length T: cutting every string longer than T to T removes at least the excess,
    // with room for the markers (each under 100 bytes).
    const std::size_t excess = size - budget;
    auto removed = [&](std::size_t t) {
      std::size_t sum = 0, n = 0;
      for (const auto& r : strings)
        if (r.bytes > t) sum += r.bytes - t, ++n;
      return sum >= excess + 100 * n;
    };
    std::size_t lo = 0, hi = 0;
    for (const auto& r : strings) hi = std::max(hi, r.bytes);
    if (!removed(0)) break;  // all strings together are not the excess
    while (lo < hi) {  // the largest T that still removes enough
      const std::size_t mid = lo + (hi - lo + 1) / 2;
      if (removed(mid)) lo = mid;
      else hi = mid - 1;
    }
    // Cut first (nothing moves), then mark, deepest objects first: a key added to an object may
    // move the objects it holds, never those around it.
    std::vector<std::pair<const StringRef*, std::size_t>> marks;
    for (const auto& r : strings) {
      if (r.bytes <= lo) continue;
      std::string& text = (*r.parent)[r.key].get_ref<std::string&>();
      text = cut_utf8(text, lo);
      marks.push_back({&r, text.size()});
      ++cuts;
    }
    std::stable_sort(marks.begin(), marks.end(), [](const auto& a, const auto& b) { return a.first->depth > b.first->depth; });
    for (const auto& [r, kept] : marks) mark_cut(*r->parent, r->key, Json{{"bytes", r->bytes}, {"kept_bytes", kept}});
    size = dumped_size(out);
  }
  if (size > budget && episode.contains("turns") && episode["turns"].is_array()) {
    for (auto& turn : episode["turns"]) {
      if (!turn.is_object()) continue;
      auto drop = [&](Json& parent, const char* key) {
        if (!parent.is_object() || !parent.contains(key) || !parent[key].is_array()) return;
        mark_cut(parent, key, Json{{"items", parent[key].size()}, {"kept_items", 0}});
        parent.erase(key);
        ++cuts;
      };
      drop(turn, "prompt_token_ids");
      if (turn.contains("assistant"))
        for (const char* k : {"token_ids", "logprobs", "tokens"}) drop(turn["assistant"], k);
    }
    size = dumped_size(out);
  }
  return size <= budget ? cuts : -1;
}

// The turn as the record keeps it. The text, reasoning and token arrays are moved out of `t` (an
// answer may be tens of MB: it is not copied once more); its tool calls stay, to be run.
Json turn_record(int index, AssistantTurn& t, int64_t context_tokens, bool estimated) {
  Json calls = Json::array();
  for (const auto& c : t.tool_calls) calls.push_back({{"id", c.id}, {"name", c.name}, {"arguments", c.arguments}});
  Json a = {{"content", std::move(t.content)}, {"tool_calls", std::move(calls)}, {"finish_reason", t.finish_reason}};
  if (t.reasoning) a["reasoning_content"] = std::move(*t.reasoning);
  if (!t.token_ids.is_null()) a["token_ids"] = std::move(t.token_ids);
  if (!t.logprobs.is_null()) a["logprobs"] = std::move(t.logprobs);
  if (!t.tokens.is_null()) a["tokens"] = std::move(t.tokens);
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
  if (!t.prompt_token_ids.is_null()) turn["prompt_token_ids"] = std::move(t.prompt_token_ids);
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
      bool object = false;
      try {
        object = parse_json(args, "arguments").is_object();
      } catch (const InputError&) {
      }
      if (!object) args = "{}";
      calls.push_back({{"id", c.id}, {"type", "function"}, {"function", {{"name", c.name}, {"arguments", args}}}});
    }
    m["tool_calls"] = calls;
  }
  return m;
}

// One episode's conversation as it goes (run_episode's state): the messages with their token
// estimates, the turns and tool results recorded, the tallies, and why it stopped.
struct EpisodeRunner {
  EpisodeRunner(const EpisodeInput& in, const RunSettings& settings, Toolbox& tools,
                std::chrono::steady_clock::time_point start, std::chrono::steady_clock::time_point deadline)
      : in(in), settings(settings), tools(tools), start(start), deadline(deadline) {
    messages = Json::array({{{"role", "system"}, {"content", system_prompt()}},
                            {{"role", "user"}, {"content", user_prompt(in.task)}}});
    for (const auto& m : messages) {
      const std::size_t bytes = dumped_size(m);
      conversation_bytes += static_cast<int64_t>(bytes);
      message_tokens.push_back(static_cast<int64_t>(bytes + 3) / 4 + 4);
    }
  }

  const EpisodeInput& in;
  const RunSettings& settings;
  Toolbox& tools;
  const std::chrono::steady_clock::time_point start, deadline;
  const Json& schemas = tool_schemas();
  Json messages;
  Json turns = Json::array(), results = Json::array();
  std::string stop_reason, error;
  int64_t prompt_total = 0, completion_total = 0, tool_calls = 0, tool_errors = 0, malformed = 0;
  std::map<std::string, int64_t> per_tool;
  bool any_estimated = false;
  const int64_t tools_tokens = estimate_tokens(schemas.dump());
  // Each message's estimate, made once as it is added (a message is never dumped again to count it).
  std::vector<int64_t> message_tokens;
  int64_t conversation_bytes = 0;
  const int64_t max_conversation_bytes =
      settings.max_context > INT64_MAX / kMaxBytesPerToken ? INT64_MAX : settings.max_context * kMaxBytesPerToken;
  // Context now: the server's count after the last turn plus an estimate of what came since.
  int64_t context_known = 0;
  std::size_t known_upto = 0;  // messages covered by context_known

  double elapsed_s() const { return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(); }
  bool past_deadline() const { return std::chrono::steady_clock::now() >= deadline; }

  void add_message(Json m) {
    const std::size_t bytes = dumped_size(m);
    conversation_bytes += static_cast<int64_t>(bytes);
    message_tokens.push_back(static_cast<int64_t>(bytes + 3) / 4 + 4);
    messages.push_back(std::move(m));
  }

  int64_t context_now() const {
    int64_t est = context_known;
    if (known_upto == 0) est += tools_tokens;
    for (std::size_t i = known_upto; i < messages.size(); ++i) est += message_tokens[i];
    return est;
  }

  // The turns, until the policy stops, a limit is reached or something fails. Whatever fails inside
  // the loop (a tool, the policy, our own code) ends the episode with stop reason `error` and the
  // reason; the trajectory so far and the bundle are still the record.
  void converse(Policy& policy) {
    std::unique_ptr<PolicySession> session;
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
        if (!one_turn(turn, *session)) break;
      }
    } catch (const std::exception& e) {
      stop_reason = g_interrupted ? "interrupted" : "error";
      error = e.what();
      log::error("task ", in.task_id, " episode ", in.index, ": ", valid_text(error));
    }
  }

  // One turn: the limits, the policy's answer, its tool calls. False when the episode stops here.
  bool one_turn(int turn, PolicySession& session) {
    if (g_interrupted) { stop_reason = "interrupted"; return false; }
    if (turn >= settings.max_turns) { stop_reason = "max_turns"; return false; }
    double left_s = settings.episode_timeout_s - elapsed_s();
    if (left_s <= 0) { stop_reason = "timeout"; return false; }
    int64_t context = context_now();
    if (context >= settings.max_context) { stop_reason = "context_limit"; return false; }
    if (conversation_bytes > max_conversation_bytes) {
      stop_reason = "context_limit";
      error = "the conversation holds " + std::to_string(conversation_bytes) + " bytes, more than " +
              std::to_string(kMaxBytesPerToken) + " per token of --max-context, whatever the server counted";
      return false;
    }
    AssistantTurn t;
    try {
      t = session.next(messages, schemas, TurnBudget{settings.max_context - context, left_s});
    } catch (const PolicyDeadline& e) {
      stop_reason = g_interrupted ? "interrupted" : "timeout";
      error = e.what();
      return false;
    } catch (const PolicyError& e) {
      stop_reason = g_interrupted ? "interrupted" : "policy_error";
      error = e.what();
      return false;
    }
    make_valid(t);
    const std::size_t calls_asked = t.tool_calls.size();
    if (calls_asked > kMaxCallsPerTurn) t.tool_calls.resize(kMaxCallsPerTurn);
    for (std::size_t i = 0; i < t.tool_calls.size(); ++i)
      if (t.tool_calls[i].id.empty()) t.tool_calls[i].id = "call_" + std::to_string(turn) + "_" + std::to_string(i);
    add_message(assistant_message(t));
    bool estimated = count_usage(t);
    Json rec = turn_record(turn, t, context_now(), estimated);
    if (calls_asked > kMaxCallsPerTurn)
      rec["assistant"]["truncated"]["tool_calls"] = {{"items", calls_asked}, {"kept_items", kMaxCallsPerTurn}};
    log::verbose("task ", in.task_id, " turn ", turn, ": ", t.tool_calls.size(), " tool call(s), context ~",
                 context_now(), " tokens");
    if (t.tool_calls.empty()) {
      stop_reason = t.finish_reason == "length" ? "max_tokens" : "done";
      turns.push_back(std::move(rec));
      return false;
    }
    call_tools(t, rec, turn);
    if (calls_asked > kMaxCallsPerTurn && !messages.back().value("content", std::string()).empty()) {
      const std::string note = "\nnote: this turn asked for " + std::to_string(calls_asked) + " tool calls; the first " +
                               std::to_string(kMaxCallsPerTurn) + " were run, the rest left out (at most " +
                               std::to_string(kMaxCallsPerTurn) + " a turn)";
      messages.back()["content"] = messages.back()["content"].get<std::string>() + note;
      rec["tool_results"].back()["content"] = rec["tool_results"].back()["content"].get<std::string>() + note;
    }
    rec["context_tokens"] = context_now();
    turns.push_back(std::move(rec));
    if (g_interrupted && stop_reason.empty()) stop_reason = "interrupted";
    if (stop_reason.empty() && past_deadline()) stop_reason = "timeout";
    return true;
  }

  // The turn's tokens: the server's counts, or an estimate (then the context is estimated too).
  // True when estimated.
  bool count_usage(const AssistantTurn& t) {
    bool estimated = t.prompt_tokens < 0 || t.completion_tokens < 0;
    if (!estimated) {
      context_known = t.prompt_tokens + t.completion_tokens;
      known_upto = messages.size();
      prompt_total += t.prompt_tokens;
      completion_total += t.completion_tokens;
    } else {
      any_estimated = true;
      completion_total += t.token_ids.is_array()
                              ? static_cast<int64_t>(t.token_ids.size())
                              : estimate_tokens(t.content) +
                                    (static_cast<int64_t>(messages.back().contains("tool_calls")
                                                              ? dumped_size(messages.back()["tool_calls"])
                                                              : 4) + 3) / 4;
    }
    return estimated;
  }

  // The turn's tool calls, each answered (a call after the deadline: "not run"), in order.
  void call_tools(const AssistantTurn& t, Json& rec, int turn) {
    for (const auto& call : t.tool_calls) {
      ++tool_calls;
      ++per_tool[call.name];
      if (past_deadline()) {
        // Not run: every call still gets its answer, so the conversation stays well-formed.
        stop_reason = "timeout";
        const std::string text = "error: not run: the episode's time ran out (--episode-timeout)";
        add_message({{"role", "tool"}, {"tool_call_id", call.id}, {"name", call.name}, {"content", text}});
        rec["tool_results"].push_back({{"tool_call_id", call.id}, {"name", call.name}, {"content", text},
                                       {"ok", false}, {"malformed", false}, {"elapsed_ms", 0.0}, {"not_run", true}});
        ++tool_errors;
        continue;
      }
      ToolOutcome o = tools.call(call);
      if (!o.ok) ++tool_errors;
      if (o.malformed) ++malformed;
      add_message({{"role", "tool"}, {"tool_call_id", call.id}, {"name", call.name}, {"content", o.text}});
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
  }
};

// What the episode submits: the final workspace's bundle, or (--submit best) the best verified one.
struct Submission {
  BundleRead read;
  std::string notes;
  Json bundle, submitted, seen;  // seen: the results with their candidate ids, without their bundles
};

Submission submission(Workspace& ws, const Json& results, const RunSettings& settings) {
  Submission sub;
  BundleRead& read = sub.read;
  try {
    read = ws.read_bundle();
  } catch (const std::exception& e) {
    read.bundle = Json{{"kernels", Json::object()}, {"plan", ""}};
    read.notes = std::string("the bundle could not be read: ") + e.what() + "\n";
  }
  sub.notes = read.notes;
  sub.bundle = read.bundle;
  sub.submitted = {{"mode", settings.submit}, {"from", "final"}};
  if (settings.submit == "best") {
    Json best = best_result(results);
    if (!best.is_null()) {
      sub.bundle = with_valid_utf8(best["bundle"]);
      sub.submitted = {{"mode", "best"}, {"from", "turn"}, {"turn", best["turn"]}, {"candidate_id", best["candidate_id"]}};
    } else {
      sub.submitted["note"] = "no verified bundle seen; the final workspace is submitted";
    }
  }
  // Results keep their candidate ids; their bundles are dropped (the submitted one is `bundle`).
  sub.seen = Json::array();
  for (auto r : results) {
    r.erase("bundle");
    sub.seen.push_back(r);
  }
  return sub;
}

// The record's `episode` section.
Json episode_json(EpisodeRunner& e, const Submission& sub, const Json& policy_description) {
  const EpisodeInput& in = e.in;
  const RunSettings& settings = e.settings;
  Json counts = {{"turns", static_cast<int64_t>(e.turns.size())},
                 {"tool_calls", e.tool_calls},
                 {"tool_errors", e.tool_errors},
                 {"malformed_calls", e.malformed},
                 {"calls_by_tool", e.per_tool},
                 {"prompt_tokens", e.prompt_total},
                 {"completion_tokens", e.completion_total},
                 {"context_tokens", e.context_now()},
                 {"tokens_estimated", e.any_estimated}};
  Json episode = {{"policy", policy_description},
                  {"settings", settings.to_json()},
                  {"episode_index", in.index},
                  {"seed", in.seed},
                  {"prompt", {{"system", e.messages[0]["content"]}, {"user", e.messages[1]["content"]}}},
                  {"tools", e.schemas},
                  {"turns", std::move(e.turns)},
                  {"results", sub.seen},
                  {"stop_reason", e.stop_reason},
                  {"submitted", sub.submitted},
                  {"counts", counts},
                  {"elapsed_s", e.elapsed_s()}};
  if (!e.error.empty()) episode["error"] = valid_text(e.error);
  if (!sub.notes.empty()) episode["bundle_notes"] = valid_text(sub.notes);
  if (!sub.read.refused.empty()) episode["bundle_refused"] = sub.read.refused;
  return episode;
}

// The candidate record, under the readers' line limit whatever the server or the tools produced.
Json candidate_record(const EpisodeInput& in, const Json& bundle, Json episode) {
  Json out;
  out["schema"] = "cuda-agent/candidate/v1";
  out["task_id"] = in.task_id;
  out["candidate_id"] = candidate_id_for(in.task_id, bundle);
  out["bundle"] = bundle;
  out["task"] = in.task;
  out["episode"] = with_valid_utf8(std::move(episode));
  const int64_t cuts = fit_record(out, kMaxRecordBytes - 256);  // room for record_cut and the newline
  if (cuts > 0) {
    out["episode"]["record_cut"] = Json{{"values", cuts}, {"limit_bytes", kMaxRecordBytes}};
    log::warn("task ", in.task_id, " episode ", in.index, ": ", cuts, " value(s) of the trajectory were cut to keep the "
              "record under ", kMaxRecordBytes >> 20, " MiB (marked \"truncated\")");
  } else if (cuts < 0) {
    // The task or the bundle alone is too large to write with it: the record says so, without them.
    const std::string why = "the record would be " + std::to_string(dumped_size(out)) + " bytes nested " +
                            std::to_string(json_depth(out)) + " deep even with the trajectory cut, over " +
                            std::to_string(kMaxRecordBytes) + " bytes or " + std::to_string(kMaxJsonDepth - 1) +
                            " levels (the task or the bundle is too large)";
    Json small;
    small["schema"] = "cuda-agent/candidate/v1";
    small["task_id"] = in.task_id;
    small["episode"] = Json{{"episode_index", in.index}, {"seed", in.seed}, {"turns", Json::array()},
                            {"stop_reason", "error"}, {"error", why}};
    small["error"] = Json{{"tool", "agent-run"}, {"field", "episode"}, {"reason", why}};
    return small;
  }
  return out;
}

}  // namespace

Json run_episode(const EpisodeInput& in, Policy& policy, const Json& policy_description, const RunSettings& settings,
                   const std::string& skill_text) {
  auto start = std::chrono::steady_clock::now();
  Workspace ws(skill_text, in.task.value("code", std::string()), settings.sandbox.workspace_mib << 20);
  Toolbox tools(settings, ws, in.task, in.task_id, in.sandbox_uid);
  // --episode-timeout holds inside a turn too: the server's answer, every command and locked tool
  // get only the time left, and the calls of a turn after it are not run.
  const auto deadline = start + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                    std::chrono::duration<double>(settings.episode_timeout_s));
  tools.set_deadline(deadline);
  EpisodeRunner e(in, settings, tools, start, deadline);
  e.converse(policy);
  const Submission sub = submission(ws, e.results, settings);
  return candidate_record(in, sub.bundle, episode_json(e, sub, policy_description));
}

}  // namespace ca::agent_run

namespace ca::agent_run {

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

}  // namespace ca::agent_run
