// The policy factory and the replay policy (scripted assistant turns, for tests and demos).
#include "tools/agent-run/policy.hpp"

#include <map>
#include <mutex>

#include "libcommon/errors.hpp"
#include "libcommon/paths.hpp"

namespace ca::agent_run {

std::atomic<bool> g_interrupted{false};
std::atomic<int> g_signal{0};

namespace {

// A script is a list of turns: {"content": "...", "tool_calls": [{"name": ..., "arguments": {...} or
// "raw text"}], "finish_reason": ...}. The file is JSON Lines: either one turn per line (the same
// script for every task), or lines {"task_id": ..., "turns": [...]} (a script per task; a line
// {"turns": [...]} without task_id is the default).
AssistantTurn parse_turn(const Json& t, std::size_t index, const std::string& where) {
  if (!t.is_object()) throw InputError(where + ": turn " + std::to_string(index) + " is not an object");
  AssistantTurn turn;
  turn.content = t.value("content", "");
  if (t.contains("reasoning_content") && t["reasoning_content"].is_string()) turn.reasoning = t["reasoning_content"];
  if (t.contains("tool_calls")) {
    int i = 0;
    for (const auto& c : t["tool_calls"]) {
      ToolCall call;
      call.id = c.value("id", "replay_" + std::to_string(index) + "_" + std::to_string(i++));
      const Json& fn = c.contains("function") ? c["function"] : c;
      call.name = fn.value("name", "");
      if (fn.contains("arguments")) call.arguments = fn["arguments"].is_string() ? fn["arguments"].get<std::string>()
                                                                                  : fn["arguments"].dump();
      else call.arguments = "{}";
      turn.tool_calls.push_back(call);
    }
  }
  turn.finish_reason = t.value("finish_reason", turn.tool_calls.empty() ? "stop" : "tool_calls");
  return turn;
}

class ReplaySession : public PolicySession {
 public:
  explicit ReplaySession(const std::vector<AssistantTurn>* turns) : turns_(turns) {}
  AssistantTurn next(const Json&, const Json&, const TurnBudget&) override {
    // The end of the script is the assistant saying it is done.
    if (next_ >= turns_->size()) {
      AssistantTurn end;
      end.content = "(end of the replay script)";
      end.finish_reason = "stop";
      return end;
    }
    return (*turns_)[next_++];
  }

 private:
  const std::vector<AssistantTurn>* turns_;
  std::size_t next_ = 0;
};

class ReplayPolicy : public Policy {
 public:
  explicit ReplayPolicy(const std::string& path) : path_(path) {
    // The script is read as every JSON Lines input is (libcommon's reader): lines of at most 64 MiB,
    // nesting limited, a line that is not a JSON object is bad input naming it.
    if (!file_exists(path)) throw InputError("replay: cannot read '" + path + "'");
    RecordReader in(path);
    std::vector<AssistantTurn> flat;
    Json j;
    while (in.next(j)) {
      const std::string where = in.where();
      try {
        if (j.contains("turns")) {
          if (!j["turns"].is_array()) throw InputError(where + ": turns must be an array");
          std::vector<AssistantTurn> turns;
          for (std::size_t i = 0; i < j["turns"].size(); ++i) turns.push_back(parse_turn(j["turns"][i], i, where));
          scripts_[j.value("task_id", "")] = std::move(turns);
        } else {
          flat.push_back(parse_turn(j, flat.size(), where));
        }
      } catch (const nlohmann::json::exception& e) {  // a field of the wrong type: bad input, named
        throw InputError(where + ": " + e.what());
      }
    }
    if (!flat.empty()) scripts_[""] = std::move(flat);
    if (scripts_.empty()) throw InputError("replay: '" + path + "' holds no turns");
  }
  Json describe() const override {
    return {{"kind", "replay"}, {"file", path_}, {"scripts", scripts_.size()}};
  }
  std::unique_ptr<PolicySession> start(const std::string& task_id, uint64_t) override {
    auto it = scripts_.find(task_id);
    if (it == scripts_.end()) it = scripts_.find("");
    if (it == scripts_.end()) throw PolicyError("replay: no script for task " + task_id + " and no default script");
    return std::make_unique<ReplaySession>(&it->second);
  }

 private:
  std::string path_;
  std::map<std::string, std::vector<AssistantTurn>> scripts_;
};

}  // namespace

std::unique_ptr<Policy> make_replay_policy(const std::string& path) { return std::make_unique<ReplayPolicy>(path); }

std::unique_ptr<Policy> make_policy(const std::string& spec, const PolicyOptions& options) {
  auto colon = spec.find(':');
  std::string kind = spec.substr(0, colon), rest = colon == std::string::npos ? "" : spec.substr(colon + 1);
  if (kind == "openai" && !rest.empty()) return make_openai_policy(rest, options);
  if (kind == "replay" && !rest.empty()) return make_replay_policy(rest);
  if (kind == "native" && !rest.empty()) return make_native_policy(rest, options);
  throw UsageError("--policy: expected openai:URL, replay:FILE or native:DIR, got '" + spec + "'");
}

}  // namespace ca::agent_run
