// Tool schemas and dispatch.
#include "tools/agent-run/toolbox.hpp"

#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <sstream>

#include "libcommon/ids.hpp"
#include "libcommon/log.hpp"
#include "libcommon/paths.hpp"
#include "libcommon/process.hpp"
#include "tools/agent-run/judge.hpp"
#include "tools/agent-run/text.hpp"

namespace ca::agent_run {
namespace {

Json function(const std::string& name, const std::string& description, Json properties,
              std::vector<std::string> required) {
  return {{"type", "function"},
          {"function",
           {{"name", name},
            {"description", description},
            {"parameters", {{"type", "object"}, {"properties", properties}, {"required", required}}}}}};
}

Json str(const std::string& description) { return {{"type", "string"}, {"description", description}}; }

// Cut for the model and made valid UTF-8 (marked when it was not): whatever a command printed, a
// record can hold it.
std::string cut(const std::string& text, int64_t max_chars) {
  if (static_cast<int64_t>(text.size()) <= max_chars) return marked_text(text, "the output");
  return marked_text(cut_utf8(text, static_cast<std::size_t>(max_chars)), "the output") + "\n[... cut at " +
         std::to_string(max_chars) + " characters]";
}

// A required string argument, or the reason it is not there.
bool arg(const Json& args, const char* name, std::string& out, std::string& why) {
  if (!args.contains(name)) {
    why = std::string("missing argument '") + name + "'";
    return false;
  }
  if (!args[name].is_string()) {
    why = std::string("argument '") + name + "' must be a string, got " + args[name].type_name();
    return false;
  }
  out = args[name].get<std::string>();
  return true;
}

}  // namespace

const Json& tool_schemas() {
  static const Json tools = Json::array({
      function("read_file", "Read a text file of the workspace.", {{"path", str("Path relative to the workspace")}},
               {"path"}),
      function("write_file", "Create or overwrite a file of the workspace (parent folders are created).",
               {{"path", str("Path relative to the workspace")}, {"content", str("The whole new content")}},
               {"path", "content"}),
      function("edit_file",
               "Replace one exact, unique occurrence of `old` by `new` in a file (whitespace must match; "
               "include enough context to make `old` unique).",
               {{"path", str("Path relative to the workspace")},
                {"old", str("Exact text to replace; must occur exactly once")},
                {"new", str("Replacement text")}},
               {"path", "old", "new"}),
      function("list_files", "List files under a folder of the workspace (recursive, with sizes).",
               {{"path", str("Folder relative to the workspace; default '.'")}}, {}),
      function("grep", "Search files for an extended regular expression (grep -rnE).",
               {{"pattern", str("Extended regular expression")},
                {"path", str("File or folder relative to the workspace; default '.'")}},
               {"pattern"}),
      function("bash",
               "Run a bash command in /workspace, in a sandbox: no network, nothing outside the workspace is "
               "writable, limits on time, memory and processes. No GPU: use compile, verify and profile for that.",
               {{"command", str("The command line")}}, {"command"}),
      function("compile", "Compile kernels/*.cu and check plan.yaml against the kernels, without running them.",
               Json::object(), {}),
      function("verify",
               "Compile and run the bundle (kernels/*.cu + plan.yaml) on the GPU against model.py's reference on "
               "fresh random inputs; reports correctness and the first mismatch.",
               Json::object(), {}),
      function("profile",
               "Verify, then time the bundle against PyTorch eager and torch.compile; reports times, speedups "
               "and a per-kernel breakdown.",
               Json::object(), {}),
  });
  return tools;
}

std::string default_locked_binary(const std::string& name, const char* env_var) {
  if (const char* e = std::getenv(env_var); e && *e) return e;
  return executable_dir() + "/" + name;
}

Toolbox::Toolbox(const RunSettings& settings, Workspace& workspace, const Json& task, const std::string& task_id,
                 int uid)
    : settings_(settings), workspace_(workspace), task_(task), task_id_(task_id),
      sandbox_(workspace.root(), workspace.tmp(), settings.sandbox, uid) {}

std::string Toolbox::past_deadline() const {
  return std::chrono::steady_clock::now() >= deadline_ ? "the episode's time ran out (--episode-timeout)" : "";
}

namespace {

using Clock = std::chrono::steady_clock;

// A tool's outcome as the model reads it: its time taken, its text cut to --tool-output-chars.
ToolOutcome finished(ToolOutcome o, Clock::time_point start, int64_t max_chars) {
  o.elapsed_ms = std::chrono::duration<double, std::milli>(Clock::now() - start).count();
  o.text = cut(o.text, max_chars);
  return o;
}

// A call the model wrote wrong (unknown tool, arguments not an object, a field missing).
ToolOutcome malformed_call(const std::string& why, Clock::time_point start, int64_t max_chars) {
  ToolOutcome o;
  o.ok = false;
  o.malformed = true;
  o.text = "error: " + why;
  return finished(o, start, max_chars);
}

ToolOutcome answered(const ToolAnswer& ans, Clock::time_point start, int64_t max_chars) {
  ToolOutcome o;
  o.text = ans.text;
  o.ok = ans.ok;
  return finished(o, start, max_chars);
}

}  // namespace

ToolOutcome Toolbox::call(const ToolCall& call) {
  auto start = std::chrono::steady_clock::now();
  auto malformed = [&](const std::string& why) { return malformed_call(why, start, settings_.tool_output_chars); };
  static const std::vector<std::string> names = {"read_file", "write_file", "edit_file", "list_files", "grep",
                                                 "bash",      "compile",    "verify",    "profile"};
  if (std::find(names.begin(), names.end(), call.name) == names.end())
    return malformed("unknown tool '" + call.name + "'; the tools are read_file, write_file, edit_file, list_files, "
                     "grep, bash, compile, verify, profile");
  Json args;
  std::string text = call.arguments;
  if (text.find_first_not_of(" \t\r\n") == std::string::npos) text = "{}";
  try {
    args = parse_json(text, "arguments");
  } catch (const std::exception& e) {
    return malformed("the arguments of " + call.name + " are not valid JSON (" + std::string(e.what()) +
                     "); send a JSON object, for example {\"path\": \"kernels/k.cu\"}");
  }
  if (!args.is_object()) return malformed("the arguments of " + call.name + " must be a JSON object");

  // A file call the system refuses (a path too long or too deep to resolve) is the model's error, told
  // to it; it must not end the episode. Only the head of the system's message: it may quote the path.
  try {
    return dispatch(call.name, args, start);
  } catch (const std::filesystem::filesystem_error& e) {
    return answered(ToolAnswer::error(std::string(e.what()).substr(0, 300)), start, settings_.tool_output_chars);
  }
}

ToolOutcome Toolbox::dispatch(const std::string& n, const Json& args, std::chrono::steady_clock::time_point start) {
  auto finish = [&](ToolOutcome o) { return finished(std::move(o), start, settings_.tool_output_chars); };
  auto malformed = [&](const std::string& why) { return malformed_call(why, start, settings_.tool_output_chars); };
  std::string why, path, a, b;
  auto to_outcome = [&](const ToolAnswer& ans) { return answered(ans, start, settings_.tool_output_chars); };
  if (n == "read_file") {
    if (!arg(args, "path", path, why)) return malformed(why);
    return to_outcome(workspace_.read_file(path, settings_.tool_output_chars));
  }
  if (n == "write_file") {
    if (!arg(args, "path", path, why) || !arg(args, "content", a, why)) return malformed(why);
    return to_outcome(workspace_.write_file(path, a));
  }
  if (n == "edit_file") {
    if (!arg(args, "path", path, why) || !arg(args, "old", a, why) || !arg(args, "new", b, why)) return malformed(why);
    return to_outcome(workspace_.edit_file(path, a, b));
  }
  if (n == "list_files") {
    path = ".";
    if (args.contains("path") && !arg(args, "path", path, why)) return malformed(why);
    return to_outcome(workspace_.list_files(path));
  }
  if (n == "grep" || n == "bash") return sandboxed(n, args, start);
  return finish(locked(n));
}

// grep and bash: run in the sandbox, on the workspace, with the workspace's cap watched.
ToolOutcome Toolbox::sandboxed(const std::string& n, const Json& args, std::chrono::steady_clock::time_point start) {
  auto finish = [&](ToolOutcome o) { return finished(std::move(o), start, settings_.tool_output_chars); };
  auto malformed = [&](const std::string& why) { return malformed_call(why, start, settings_.tool_output_chars); };
  auto to_outcome = [&](const ToolAnswer& ans) { return answered(ans, start, settings_.tool_output_chars); };
  std::string why, path, a;
  if (std::string unavailable = Sandbox::availability(); !unavailable.empty()) {
    ToolOutcome o;
    o.ok = false;
    o.text = "error: " + n + " is unavailable: " + unavailable;
    return finish(o);
  }
  SandboxResult r;
  if (n == "grep") {
    if (!arg(args, "pattern", a, why)) return malformed(why);
    path = ".";
    if (args.contains("path") && !arg(args, "path", path, why)) return malformed(why);
    std::string host = workspace_.resolve(path, &why);
    if (host.empty()) return to_outcome(ToolAnswer::error(why));
    r = sandbox_.run_argv({"grep", "-rnIE", "--", a, workspace_.sandbox_path(host)},
                          [&] { return g_interrupted ? std::string("agent-run was interrupted") : past_deadline(); });
    workspace_.clear_tmp();
    ToolOutcome o;
    if (r.exit_status == 1 && !r.timed_out) o.text = "(no matches)";
    else if (r.exit_status == 0) o.text = r.output + (r.output_truncated ? "\n" + r.report(sandbox_.limits()) : "");
    else {
      o.ok = false;
      o.text = "error: " + r.output + "\n" + r.report(sandbox_.limits());
    }
    return finish(o);
  }
  if (!arg(args, "command", a, why)) return malformed(why);
  // The workspace's disk use is watched while the command runs (RLIMIT_FSIZE bounds one file, not
  // how many), and the command is ended once it is over the cap; an interrupt ends it too.
  auto last = std::chrono::steady_clock::now();
  SandboxWatch watch = [&]() -> std::string {
    if (g_interrupted) return "agent-run was interrupted";
    if (std::string late = past_deadline(); !late.empty()) return late;
    auto now = std::chrono::steady_clock::now();
    if (now - last < std::chrono::milliseconds(100)) return "";
    last = now;
    return workspace_.over_cap(workspace_.usage());
  };
  r = sandbox_.run_shell(a, watch);
  ToolOutcome o;
  o.ok = !r.sandbox_failed && r.stopped.empty() && r.refused.empty();
  // Only the head of the output: the rest is the model's to cut, but a note must survive it.
  o.text = cut(r.output, settings_.tool_output_chars);
  if (!o.text.empty() && o.text.back() != '\n') o.text += "\n";
  o.text += r.report(sandbox_.limits());
  std::string trimmed = workspace_.enforce_cap();
  workspace_.clear_tmp();
  if (!trimmed.empty()) {
    o.ok = false;
    o.text += "\nerror: workspace cap (--workspace-mib): " + trimmed;
  }
  o.text = valid_text(o.text);
  o.elapsed_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  return o;
}

namespace {

// `o` failed with `text`, which is also its result's error.
ToolOutcome failed(ToolOutcome o, const std::string& text) {
  o.ok = false;
  o.text = text;
  o.result["error"] = o.text;
  return o;
}

// The last line of a tool's stdout that is a JSON object: its answer.
std::string last_json_line(const std::string& out) {
  std::istringstream s(out);
  std::string line, last;
  while (std::getline(s, line))
    if (!line.empty() && line[0] == '{') last = line;
  return last;
}

std::string stderr_tail(const std::string& err) { return err.size() > 2000 ? err.substr(err.size() - 2000) : err; }

// The timing seeds stay in the record (and the store), never in what the model reads: a kernel
// written for the timing inputs must not be possible (issue 16).
void hide_seeds(Json& sp) {
  if (!sp.is_object()) return;
  if (sp.contains("method") && sp["method"].is_object()) sp["method"].erase("seed");
  if (sp.contains("outputs_check") && sp["outputs_check"].is_array())
    for (auto& o_set : sp["outputs_check"])
      if (o_set.is_object()) o_set.erase("seed");
  if (sp.contains("baselines") && sp["baselines"].is_object())
    for (auto& [mode, b] : sp["baselines"].items())
      if (b.is_object() && b.contains("method") && b["method"].is_object()) b["method"].erase("seed");
}

}  // namespace

// One locked step on one record: kernel-check or kernel-prof as a child process, or a POST to a
// judge service. `error` (after "failed: ") when no record with `section` came back.
struct Toolbox::LockedStep {
  Json record;
  std::string error;
  bool stopped = false;
};

// Why `which` cannot run on this bundle, as the model reads it ("" when it can): files refused by
// name, nothing to judge, or a tool binary missing.
std::string Toolbox::locked_refusal(const std::string& which, BundleRead& read) const {
  Json& bundle = read.bundle;
  // What cannot be read without following a symlink (or is no plain file) is refused by name: the
  // locked tools run outside the sandbox and must never see a host file through the workspace.
  if (!read.refused.empty()) {
    std::string text = "error: " + which + " refused, nothing was run: ";
    for (std::size_t i = 0; i < read.refused.size(); ++i) text += (i ? "; " : "") + read.refused[i];
    return text + ". Replace these by regular files (or remove them).";
  }
  // A plan of library steps only (gemm, conv) needs no kernel file; an empty workspace is an error.
  if (bundle["kernels"].empty() && bundle["plan"].get<std::string>().find_first_not_of(" \t\r\n") == std::string::npos)
    return "error: nothing to " + which + ": kernels/ is empty and plan.yaml is empty";
  const std::string check_bin = settings_.kernel_check, prof_bin = settings_.kernel_prof;
  // With --judge, verify and profile go to the services: only compile needs a binary here.
  const bool remote = settings_.judge && which != "compile";
  std::vector<std::string> needed;
  if (!remote) needed.push_back(check_bin);
  if (!remote && which == "profile") needed.push_back(prof_bin);
  for (const auto& bin : needed)
    if (access(bin.c_str(), X_OK) != 0)
      return "error: " + which + " is unavailable: " + bin + " is not an executable (install it next to agent-run, "
             "or set CA_KERNEL_CHECK / CA_KERNEL_PROF)";
  return "";
}

Toolbox::LockedStep Toolbox::locked_step(const std::string& which, const std::string& tool, const Json& in,
                                         const char* section) {
  const std::string check_bin = settings_.kernel_check, prof_bin = settings_.kernel_prof;
  const bool remote = settings_.judge && which != "compile";
  auto store_args = [&](std::vector<std::string>& argv) {
    if (settings_.store_path.empty()) argv.push_back("--no-store");
    else argv.insert(argv.end(), {"--store", settings_.store_path});
    // The one record is the call's own: inside a Slurm array task the children would otherwise
    // take SLURM_ARRAY_TASK_ID as their shard and drop it (DESIGN.md §8).
    argv.insert(argv.end(), {"--shard", "0/1"});
  };
  // Each call gets --locked-timeout, never past the episode's end.
  auto call_seconds = [&] {
    const double left_s = std::chrono::duration<double>(deadline_ - std::chrono::steady_clock::now()).count();
    return std::max(0.001, std::min(settings_.locked_timeout_s, left_s));
  };
  // An interrupt stops kernel-check/kernel-prof: SIGTERM to their group (they stop their workers),
  // SIGKILL two seconds later.
  const StopCheck interrupted = [] { return g_interrupted.load(); };
  LockedStep st;
  const double call_s = call_seconds();
  const auto timeout = std::chrono::milliseconds(static_cast<int64_t>(call_s * 1000));
  if (remote) {
    JudgePool::Answer a = settings_.judge->call(tool, in, call_s);
    if (g_interrupted) {
      st.stopped = true;
    } else if (!a.error.empty()) {
      st.error = "judge: " + a.error;
    } else if (!a.record.is_object() || !a.record.contains(section)) {
      st.error = "judge: " + a.url + ": an answer without a `" + section + "` section" +
                 (a.record.is_object() && a.record.contains("error") ? ": " + a.record["error"].dump() : "");
    } else {
      st.record = a.record;
    }
    return st;
  }
  SpawnOptions so;
  so.die_with_parent = true;  // a kill -9 of agent-run takes kernel-check/kernel-prof with it
  so.argv = {tool == "kernel-check" ? check_bin : prof_bin};
  if (which == "compile") so.argv.push_back("--compile-only");
  store_args(so.argv);
  const auto& extra = tool == "kernel-check" ? settings_.check_args : settings_.prof_args;
  so.argv.insert(so.argv.end(), extra.begin(), extra.end());
  CommandResult cr = run_command(so, in.dump(-1, ' ', false, Json::error_handler_t::replace) + "\n", timeout, 64 << 20,
                                 interrupted);
  if (cr.stopped) {
    st.stopped = true;
    return st;
  }
  std::string line = last_json_line(cr.out);
  try {
    if (!line.empty()) st.record = parse_json(line, tool + "'s answer");
  } catch (const std::exception&) {
  }
  if (cr.timed_out || !st.record.is_object() || !st.record.contains(section)) {
    st.error = tool + " " +
               (cr.timed_out ? (tool == "kernel-check" ? "timed out after " + std::to_string(timeout.count() / 1000) + " s"
                                                       : std::string("timed out"))
                             : "exit " + std::to_string(cr.exit_status) + " without a result") +
               (cr.err.empty() ? "" : "\n" + stderr_tail(cr.err));
    st.record = nullptr;
  }
  return st;
}

// compile/verify/profile: the bundle is read once from the workspace into memory and fed on stdin,
// so nothing the agent does afterwards (or in the sandbox) can change what is judged.
ToolOutcome Toolbox::locked(const std::string& which) {
  ToolOutcome o;
  BundleRead read = workspace_.read_bundle();
  const std::string& notes = read.notes;
  Json& bundle = read.bundle;
  std::string candidate_id = candidate_id_for(task_id_, bundle);
  Json input = {{"task_id", task_id_}, {"candidate_id", candidate_id}, {"bundle", bundle}, {"task", task_}};
  o.result = {{"tool", which}, {"candidate_id", candidate_id}, {"bundle", bundle}};
  if (std::string refusal = locked_refusal(which, read); !refusal.empty()) return failed(std::move(o), refusal);
  LockedStep checked_step = locked_step(which, "kernel-check", input, "check");
  if (checked_step.stopped) return failed(std::move(o), "error: " + which + " interrupted: agent-run is stopping");
  if (!checked_step.error.empty()) return failed(std::move(o), "error: " + which + " failed: " + checked_step.error);
  const Json& checked = checked_step.record;
  o.result["check"] = checked["check"];
  Json shown = {{"check", with_valid_utf8(checked["check"])}};
  const Json& ck = checked["check"];
  const bool correct = ck.is_object() && ck.contains("correct") && ck["correct"].is_boolean() && ck["correct"].get<bool>();
  if (which == "profile" && correct) {
    LockedStep prof_step = locked_step(which, "kernel-prof", checked, "prof");
    if (prof_step.stopped) return failed(std::move(o), "error: profile interrupted: agent-run is stopping");
    if (!prof_step.error.empty())
      return failed(std::move(o), "error: profile failed: " + prof_step.error + "\ncheck: " + shown["check"].dump(1));
    const Json& profiled = prof_step.record;
    o.result["prof"] = profiled["prof"];
    shown["prof"] = with_valid_utf8(profiled["prof"]);
    hide_seeds(shown["prof"]);
  } else if (which == "profile") {
    shown["note"] = "not profiled: the bundle did not pass verification";
  }
  if (!notes.empty()) shown["bundle_notes"] = notes;
  o.text = shown.dump(1, ' ', false, Json::error_handler_t::replace);
  return o;
}

}  // namespace ca::agent_run
