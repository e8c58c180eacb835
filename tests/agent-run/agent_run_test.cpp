// Units of agent-run's mechanisms: workspace confinement and edits, tool-call validation, the best
// result, the replay script format.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>

#include "tools/agent-run/episode.hpp"
#include "tools/agent-run/policy.hpp"
#include "tools/agent-run/toolbox.hpp"
#include "tools/agent-run/workspace.hpp"

namespace fs = std::filesystem;
using namespace ca::agent;

TEST_CASE("workspace: fresh files, confinement, edits") {
  Workspace ws("skill text", "class Model: pass\n");
  CHECK(ws.read_file("SKILL.md", 1000).text == "skill text");
  CHECK(ws.read_file("/workspace/model.py", 1000).text == "class Model: pass\n");
  CHECK(fs::is_directory(ws.root() + "/kernels"));
  std::string why;
  CHECK(ws.resolve("../x", &why).empty());
  CHECK(ws.resolve("/etc/passwd", &why).empty());
  CHECK(ws.resolve("kernels/../../x", &why).empty());
  CHECK(!ws.resolve("kernels/a.cu", &why).empty());
  fs::create_symlink("/etc", ws.root() + "/kernels/out");
  CHECK(ws.resolve("kernels/out/passwd", &why).empty());
  CHECK(!ws.write_file("kernels/out/x", "y").ok);
  CHECK(ws.write_file("kernels/a.cu", "__global__ void f() {}\n__global__ void g() {}\n").ok);
  CHECK(!ws.edit_file("kernels/a.cu", "__global__", "x").ok);  // two occurrences
  CHECK(ws.edit_file("kernels/a.cu", "void g", "void h").ok);
  CHECK(ws.read_file("kernels/a.cu", 1000).text == "__global__ void f() {}\n__global__ void h() {}\n");
  CHECK(ws.read_file("kernels/a.cu", 5).text.rfind("__glo\n[... cut at 5", 0) == 0);
  ca::Record b = ws.bundle();
  CHECK(b["kernels"].size() == 1);  // the symlink is left out
  CHECK(b["kernels"]["a.cu"].get<std::string>().find("void h") != std::string::npos);
  CHECK(b["plan"] == "");
}

TEST_CASE("toolbox: malformed calls are tool errors") {
  Workspace ws("s", "m");
  RunSettings settings;
  settings.kernel_check = "/nonexistent/kernel-check";
  ca::Record task = {{"task_id", "t"}, {"code", "m"}};
  Toolbox tb(settings, ws, task, "t", 65534);
  CHECK(tool_schemas().size() == 9);
  auto o = tb.call({"1", "write_file", "{\"path\": \"a\""});
  CHECK((!o.ok && o.malformed && o.text.find("not valid JSON") != std::string::npos));
  o = tb.call({"2", "frobnicate", "{}"});
  CHECK((!o.ok && o.malformed));
  o = tb.call({"3", "write_file", "{\"path\": \"a\"}"});
  CHECK((o.malformed && o.text.find("missing argument 'content'") != std::string::npos));
  o = tb.call({"4", "read_file", "{\"path\": 3}"});
  CHECK((o.malformed && o.text.find("must be a string") != std::string::npos));
  o = tb.call({"5", "list_files", ""});
  CHECK(o.ok);
  o = tb.call({"6", "compile", "{}"});
  CHECK((!o.ok && o.text.find("kernels/ is empty and plan.yaml is empty") != std::string::npos));
  tb.call({"7", "write_file", "{\"path\": \"kernels/k.cu\", \"content\": \"x\"}"});
  o = tb.call({"8", "verify", "{}"});
  CHECK((!o.ok && o.text.find("/nonexistent/kernel-check is not an executable") != std::string::npos));
}

TEST_CASE("best result: verified beats failed, profiled beats verified, faster beats slower") {
  ca::Json results = ca::Json::array();
  results.push_back({{"turn", 0}, {"check", {{"correct", false}}}});
  results.push_back({{"turn", 1}, {"check", {{"correct", true}}}});
  CHECK(best_result(results)["turn"] == 1);
  results.push_back({{"turn", 2}, {"check", {{"correct", true}}}, {"prof", {{"speedup_vs_compile", 0.5}}}});
  results.push_back({{"turn", 3}, {"check", {{"correct", true}}}, {"prof", {{"speedup_vs_compile", 1.7}}}});
  results.push_back({{"turn", 4}, {"check", {{"correct", nullptr}}}});
  CHECK(best_result(results)["turn"] == 3);
  CHECK(best_result(ca::Json::array({{{"check", {{"correct", false}}}}})).is_null());
}

TEST_CASE("replay: flat and per-task scripts; the end of a script is 'done'") {
  std::string path = fs::temp_directory_path().string() + "/agent-run-replay-test.jsonl";
  {
    std::ofstream f(path);
    f << R"({"content": "a", "tool_calls": [{"name": "bash", "arguments": {"command": "ls"}}]})" << "\n";
    f << R"({"task_id": "t2", "turns": [{"content": "only t2", "tool_calls": [{"name": "compile", "arguments": "{bad"}]}]})" << "\n";
  }
  auto p = make_replay_policy(path);
  auto s1 = p->start("t1", 0);
  AssistantTurn t = s1->next(ca::Json::array(), tool_schemas(), {});
  CHECK(t.tool_calls.size() == 1);
  CHECK(t.tool_calls[0].arguments == "{\"command\":\"ls\"}");
  CHECK(t.finish_reason == "tool_calls");
  CHECK(s1->next(ca::Json::array(), tool_schemas(), {}).tool_calls.empty());
  auto s2 = p->start("t2", 0);
  CHECK(s2->next(ca::Json::array(), tool_schemas(), {}).tool_calls[0].arguments == "{bad");
  fs::remove(path);
  CHECK_THROWS(make_policy("native:ckpt", {}));
  CHECK_THROWS(make_policy("bogus", {}));
}

TEST_CASE("token estimate") {
  CHECK(estimate_tokens("") == 0);
  CHECK(estimate_tokens(std::string(400, 'x')) == 100);
}
