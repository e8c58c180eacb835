// Units of agent-run's mechanisms: workspace confinement and edits, the bundle read without following
// symlinks, the disk cap and tree removal, lossy UTF-8, tool-call validation, the best result, the
// replay script format.
#include <doctest/doctest.h>

#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "libcommon/errors.hpp"
#include "libcommon/nn/model.hpp"
#include "libcommon/tokenizer/tokenizer.hpp"
#include "libcommon/tokenizer/unicode.hpp"

#include "tools/agent-run/episode.hpp"
#include "tools/agent-run/policy.hpp"
#include "tools/agent-run/text.hpp"
#include "tools/agent-run/toolbox.hpp"
#include "tools/agent-run/workspace.hpp"

namespace fs = std::filesystem;
using namespace ca::agent_run;

constexpr int64_t kCap = 64 << 20;

TEST_CASE("workspace: fresh files, confinement, edits") {
  Workspace ws("skill text", "class Model: pass\n", kCap);
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
  BundleRead r = ws.read_bundle();
  ca::Json& b = r.bundle;
  CHECK(b["kernels"].size() == 1);  // the symlink is refused
  REQUIRE(r.refused.size() == 1);
  CHECK(r.refused[0].rfind("kernels/out: a symlink, refused", 0) == 0);
  CHECK(b["kernels"]["a.cu"].get<std::string>().find("void h") != std::string::npos);
  CHECK(b["plan"] == "");
}

TEST_CASE("workspace: kernels/ or plan.yaml as symlinks, FIFOs and big files are refused by name, unread") {
  Workspace ws("s", "m", kCap);
  const std::string k = ws.root() + "/kernels";
  fs::remove_all(k);
  fs::create_symlink("/etc", k);
  BundleRead r = ws.read_bundle();
  REQUIRE(r.refused.size() == 1);
  CHECK(r.refused[0].rfind("kernels: a symlink, refused", 0) == 0);
  CHECK(r.bundle["kernels"].empty());
  fs::remove(k);
  fs::create_directory(k);
  fs::remove(ws.root() + "/plan.yaml");
  fs::create_symlink("/etc/shadow", ws.root() + "/plan.yaml");
  REQUIRE(mkfifo((k + "/pipe.cu").c_str(), 0644) == 0);  // opened without O_NONBLOCK this would hang
  { std::ofstream(k + "/big.cu") << std::string(kMaxFileBytes + 1, 'x'); }
  { std::ofstream(k + "/ok.cu") << "__global__ void f() {}\n"; }
  r = ws.read_bundle();
  CHECK(r.bundle["kernels"].size() == 1);
  CHECK(r.bundle["kernels"].contains("ok.cu"));
  CHECK(r.bundle["plan"] == "");
  REQUIRE(r.refused.size() == 3);
  CHECK(r.refused[0].rfind("kernels/big.cu: over 1024 KiB", 0) == 0);
  CHECK(r.refused[1].rfind("kernels/pipe.cu: a FIFO", 0) == 0);
  CHECK(r.refused[2].rfind("plan.yaml: a symlink", 0) == 0);
  CHECK(r.notes.find("root:") == std::string::npos);
}

TEST_CASE("workspace: a write never goes through a symlink the agent prepared") {
  Workspace ws("s", "m", kCap);
  const std::string outside = fs::temp_directory_path().string() + "/agent-run-unit-outside-" + std::to_string(getpid());
  { std::ofstream(outside) << "host"; }
  // To a host file: refused (it resolves outside); to a host path that does not exist yet: the link
  // is replaced by the file, the host path is not created.
  fs::create_symlink(outside, ws.root() + "/kernels/k.cu");
  CHECK(!ws.write_file("kernels/k.cu", "mine").ok);
  fs::create_symlink(outside + ".new", ws.root() + "/kernels/k2.cu");
  CHECK(ws.write_file("kernels/k2.cu", "mine").ok);
  CHECK(fs::is_regular_file(fs::symlink_status(ws.root() + "/kernels/k2.cu")));
  CHECK(!fs::exists(outside + ".new"));
  // The temporary name of a write cannot be prepared either (O_EXCL|O_NOFOLLOW on a random name).
  CHECK(ws.write_file("plan.yaml", "forward: []\n").ok);
  CHECK(ws.read_file("plan.yaml", 100).text == "forward: []\n");
  std::ifstream in(outside);
  std::string host((std::istreambuf_iterator<char>(in)), {});
  CHECK(host == "host");
  fs::remove(outside);
}

TEST_CASE("workspace: invalid UTF-8 in a kernel file is made valid and noted") {
  Workspace ws("s", "m", kCap);
  { std::ofstream(ws.root() + "/kernels/k.cu", std::ios::binary) << "ok \xff\xfe end"; }
  BundleRead r = ws.read_bundle();
  CHECK(r.refused.empty());
  CHECK(r.bundle["kernels"]["k.cu"] == "ok \xEF\xBF\xBD\xEF\xBF\xBD end");
  CHECK(r.notes.find("kernels/k.cu: 2 byte sequences that are not valid UTF-8") != std::string::npos);
  CHECK_NOTHROW((void)r.bundle.dump());
  CHECK(ws.read_file("kernels/k.cu", 1000).text.find("U+FFFD") != std::string::npos);
}

TEST_CASE("text: lossy UTF-8, counted; cuts end on a character") {
  int64_t n = -1;
  CHECK(valid_text("plain", &n) == "plain");
  CHECK(n == 0);
  CHECK(valid_text("\xEF\xBF\xBD is a real U+FFFD", &n) == "\xEF\xBF\xBD is a real U+FFFD");
  CHECK(n == 0);
  CHECK(valid_text("a\xC3(\xED\xA0\x80", &n).find('\xED') == std::string::npos);  // bad lead, surrogate
  CHECK(n >= 2);
  CHECK(marked_text("x\x80", "the output").find("1 byte sequence of the output") != std::string::npos);
  CHECK(cut_utf8("ab\xC3\xA9", 3) == "ab");  // not half of the é
  CHECK(cut_utf8("ab\xC3\xA9", 4) == "ab\xC3\xA9");
  CHECK(cut_utf8("abc", 2) == "ab");
}

TEST_CASE("workspace: disk use is measured, the cap trims the largest entries, kernels/ stays") {
  Workspace ws("s", "m", 8 << 20);
  CHECK(ws.over_cap(ws.usage()).empty());
  { std::ofstream(ws.root() + "/big.bin") << std::string(12 << 20, 'x'); }
  { std::ofstream(ws.root() + "/kernels/k.cu") << "__global__ void f() {}\n"; }
  CHECK(!ws.over_cap(ws.usage()).empty());
  CHECK(!ws.write_file("more.txt", "x").ok);  // refused while over the cap
  std::string trimmed = ws.enforce_cap();
  CHECK(trimmed.find("removed: big.bin") != std::string::npos);
  CHECK(ws.over_cap(ws.usage()).empty());
  CHECK(fs::exists(ws.root() + "/kernels/k.cu"));
  CHECK(ws.enforce_cap().empty());
}

// A workspace is stale when the process that made it is gone. Its owner need not be a program
// named agent-run (this unit binary owns workspaces too, and an agent-run running beside it once
// removed them mid-test); a pid reused by another process is told apart by its start time.
TEST_CASE("stale workspaces: a live owner's stays whatever its program; a dead or reused pid's goes") {
  const std::string old_base = workspace_base();
  const std::string base = fs::temp_directory_path().string() + "/agent-run-unit-stale-" + std::to_string(getpid());
  fs::create_directories(base);
  set_workspace_base(base);
  int ready[2];
  REQUIRE(pipe(ready) == 0);
  pid_t child = fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    Workspace ws("s", "m", kCap);
    if (write(ready[1], "x", 1) != 1) _exit(1);
    pause();  // killed while it holds its workspace
    _exit(0);
  }
  char c = 0;
  REQUIRE(read(ready[0], &c, 1) == 1);
  const std::string tag = "." + std::to_string(child) + ".";
  auto folders_of_child = [&] {
    std::vector<std::string> names;
    for (const auto& e : fs::directory_iterator(base))
      if (e.path().filename().string().find(tag) != std::string::npos) names.push_back(e.path().filename().string());
    return names;
  };
  REQUIRE(folders_of_child().size() == 1);
  const std::string real = folders_of_child()[0];
  CHECK(clean_stale_workspaces() == 0);  // alive, though its program is agent_run_unit
  CHECK(fs::exists(base + "/" + real));
  // The same pid with another start time: that process is gone, the pid now another's.
  const std::string fake = real.substr(0, real.find(tag) + tag.size()) + "1.reused";
  fs::create_directory(base + "/" + fake);
  CHECK(clean_stale_workspaces() == 1);
  CHECK(!fs::exists(base + "/" + fake));
  CHECK(fs::exists(base + "/" + real));
  // An older agent-run's name (PID.random, no start time): kept while the pid lives.
  const std::string legacy = real.substr(0, real.find(tag) + tag.size()) + "Ab12Cd";
  fs::create_directory(base + "/" + legacy);
  CHECK(clean_stale_workspaces() == 0);
  CHECK(fs::exists(base + "/" + legacy));
  kill(child, SIGKILL);
  int status = 0;
  waitpid(child, &status, 0);
  CHECK(clean_stale_workspaces() == 2);  // killed: its destructor never ran; and the older name of its pid
  CHECK(folders_of_child().empty());
  close(ready[0]);
  close(ready[1]);
  set_workspace_base(old_base);
  fs::remove_all(base);
}

TEST_CASE("remove_tree: any depth, folders without permissions, never through a symlink") {
  const std::string keep = fs::temp_directory_path().string() + "/agent-run-unit-keep-" + std::to_string(getpid());
  fs::create_directories(keep);
  { std::ofstream(keep + "/precious") << "x"; }
  std::string dir;
  {
    Workspace ws("s", "m", kCap);
    fs::path p = ws.root();
    for (int i = 0; i < 300; ++i) p /= "d";  // deeper than the measure goes
    fs::create_directories(p);
    fs::create_symlink(keep, ws.root() + "/link");
    fs::create_directories(ws.root() + "/locked/inner");
    { std::ofstream(ws.root() + "/locked/inner/f") << "x"; }
    chmod((ws.root() + "/locked").c_str(), 0);
    CHECK(!ws.usage().measurable());
    dir = fs::path(ws.root()).parent_path().string();
  }
  CHECK(!fs::exists(dir));
  CHECK(fs::exists(keep + "/precious"));
  fs::remove_all(keep);
}

TEST_CASE("toolbox: malformed calls are tool errors") {
  Workspace ws("s", "m", kCap);
  RunSettings settings;
  settings.kernel_check = "/nonexistent/kernel-check";
  ca::Json task = {{"task_id", "t"}, {"code", "m"}};
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

// ---- native:DIR ----

TEST_CASE("native policy: Qwen2.5 tool calls are parsed from a completion") {
  std::string content;
  auto calls = parse_tool_calls(
      "I will look.\n<tool_call>\n{\"name\": \"read_file\", \"arguments\": {\"path\": \"SKILL.md\"}}\n</tool_call>\n"
      "<tool_call>\n{\"name\": \"compile\", \"arguments\": {}}\n</tool_call>",
      content, 3);
  REQUIRE(calls.size() == 2);
  CHECK(content == "I will look.");
  CHECK(calls[0].id == "call_3_0");
  CHECK(calls[0].name == "read_file");
  CHECK(ca::Json::parse(calls[0].arguments) == ca::Json{{"path", "SKILL.md"}});
  CHECK(calls[1].name == "compile");
  CHECK(calls[1].arguments == "{}");
  // Not JSON, or not {name, arguments}: a call with no name and the model's own text.
  calls = parse_tool_calls("<tool_call>\n{\"name\": \"bash\", \"arguments\": {\"cmd\": \n</tool_call>", content, 0);
  REQUIRE(calls.size() == 1);
  CHECK(calls[0].name.empty());
  CHECK(calls[0].arguments == "{\"name\": \"bash\", \"arguments\": {\"cmd\":");
  // An unclosed block runs to the end; plain text has no calls.
  calls = parse_tool_calls("x <tool_call>{\"name\": \"verify\", \"arguments\": \"{}\"}", content, 1);
  REQUIRE(calls.size() == 1);
  CHECK(calls[0].name == "verify");
  CHECK(calls[0].arguments == "{}");
  CHECK(content == "x");
  CHECK(parse_tool_calls("just text", content, 0).empty());
  CHECK(content == "just text");
}

namespace {
// A small random native checkpoint with the fixture tokenizer, in a temporary folder.
fs::path native_checkpoint(const std::string& name) {
  const char* src = std::getenv("CA_SRC");
  REQUIRE(src != nullptr);
  fs::path dir = fs::temp_directory_path() / (name + "-" + std::to_string(::getpid()));
  ca::nn::Config c;
  c.vocab_size = 320;
  c.hidden_size = 32;
  c.intermediate_size = 64;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.head_dim = 8;
  c.max_position_embeddings = 16384;
  ca::nn::Model<float> m(c);
  m.init_random(5, 0.02);
  ca::nn::save_model(m, dir.string());
  fs::copy_file(fs::path(src) / "tests/nn_cuda/fixtures/tokenizer.json", dir / "tokenizer.json",
                fs::copy_options::overwrite_existing);
  return dir;
}

}  // namespace

TEST_CASE("native policy: the tools block lists every schema; turns extend one token context") {
  ca::Json tools = ca::Json::array({{{"type", "function"}, {"function", {{"name", "read_file"}, {"parameters", ca::Json::object()}}}},
                                    {{"type", "function"}, {"function", {{"name", "compile"}, {"parameters", ca::Json::object()}}}}});
  std::string block = tools_system_block(tools);
  CHECK(block.find("<tools>\n" + tools[0].dump() + "\n" + tools[1].dump() + "\n</tools>") != std::string::npos);
  CHECK(block.find("<tool_call>") != std::string::npos);

  // A small random checkpoint with the fixture tokenizer (303 tokens; the model pads to 320).
  fs::path dir = native_checkpoint("native-policy");
  PolicyOptions o;
  o.max_tokens = 12;
  auto policy = make_native_policy(dir.string(), o);
  CHECK(policy->describe()["kind"] == "native");
  auto session = policy->start("t", 7);
  ca::Json messages = ca::Json::array({{{"role", "system"}, {"content", "You write CUDA."}},
                                       {{"role", "user"}, {"content", "Make it fast."}}});
  AssistantTurn t1 = session->next(messages, tools, TurnBudget{1000, 60});
  REQUIRE(t1.token_ids.is_array());
  CHECK(t1.token_ids.size() == t1.logprobs.size());
  CHECK(t1.token_ids.size() <= 12);
  const auto p1 = t1.prompt_token_ids.get<std::vector<int>>();
  const auto c1 = t1.token_ids.get<std::vector<int>>();
  // The next turn after a tool result: its prompt is the first prompt, the completion as sampled, and more.
  messages.push_back({{"role", "assistant"}, {"content", t1.content}});
  messages.push_back({{"role", "tool"}, {"tool_call_id", "call_0_0"}, {"content", "SKILL.md\nmodel.py"}});
  AssistantTurn t2 = session->next(messages, tools, TurnBudget{1000, 60});
  const auto p2 = t2.prompt_token_ids.get<std::vector<int>>();
  REQUIRE(p2.size() > p1.size() + c1.size());
  CHECK(std::equal(p1.begin(), p1.end(), p2.begin()));
  CHECK(std::equal(c1.begin(), c1.end(), p2.begin() + long(p1.size())));
  auto tok = ca::tokenizer::Tokenizer::from_file((dir / "tokenizer.json").string());
  std::vector<int> added(p2.begin() + long(p1.size() + c1.size()), p2.end());
  std::string tail = tok.decode(added);
  CHECK(tail.find("<|im_start|>user\n<tool_response>\nSKILL.md\nmodel.py\n</tool_response><|im_end|>\n<|im_start|>assistant\n") !=
        std::string::npos);
  std::string first = tok.decode(p1);
  CHECK(first.rfind("<|im_start|>system\nYou write CUDA.\n\n# Tools", 0) == 0);
  CHECK(first.find("<|im_start|>user\nMake it fast.<|im_end|>\n<|im_start|>assistant\n") != std::string::npos);
  fs::remove_all(dir);
}

namespace {
// Runs of equal mask values: [begin, end) and the value.
struct Run {
  std::size_t begin, end;
  bool model;
};
std::vector<Run> mask_runs(const std::vector<double>& mask) {
  std::vector<Run> runs;
  for (std::size_t i = 0; i < mask.size(); ++i)
    if (runs.empty() || runs.back().model != (mask[i] > 0)) runs.push_back({i, i + 1, mask[i] > 0});
    else runs.back().end = i + 1;
  return runs;
}
}  // namespace

TEST_CASE("recorded turns without token ids: rendered as the native policy is fed them and would sample them") {
  const fs::path dir = native_checkpoint("render-episode");
  auto tok = ca::tokenizer::Tokenizer::from_file((dir / "tokenizer.json").string());
  const ca::Json& tools = tool_schemas();
  // A scripted episode as agent-run records it (the replay policy: no token ids anywhere).
  struct Scripted {
    std::string content;
    std::vector<std::pair<std::string, std::string>> calls;  // name, arguments text
    std::vector<std::string> results;
  };
  const std::vector<Scripted> script = {
      {"Writing the kernel.", {{"write_file", R"({"path": "kernels/a.cu", "content": "__global__ void k() {}\n"})"}},
       {"wrote kernels/a.cu (23 bytes)"}},
      {"", {{"compile", "{}"}, {"verify", "{}"}}, {"compiled: 1 kernel", "verify: correct (5 trials)"}},
      {"Done: the workspace is my submission.", {}, {}}};
  const std::string system = system_prompt(), user = "Task t: write a CUDA bundle.\n\nmodel.py:\n```python\nx\n```";
  ca::Json turns = ca::Json::array();
  for (std::size_t i = 0; i < script.size(); ++i) {
    ca::Json calls = ca::Json::array(), results = ca::Json::array();
    for (std::size_t k = 0; k < script[i].calls.size(); ++k) {
      const std::string id = "call_" + std::to_string(i) + "_" + std::to_string(k);
      calls.push_back({{"id", id}, {"name", script[i].calls[k].first}, {"arguments", script[i].calls[k].second}});
      results.push_back({{"tool_call_id", id}, {"name", script[i].calls[k].first}, {"content", script[i].results[k]},
                         {"ok", true}, {"malformed", false}});
    }
    turns.push_back({{"index", i},
                     {"assistant", {{"content", script[i].content}, {"tool_calls", calls},
                                    {"finish_reason", calls.empty() ? "stop" : "tool_calls"}}},
                     {"tool_results", results}});
  }
  const ca::Json episode = {{"prompt", {{"system", system}, {"user", user}}}, {"tools", tools}, {"turns", turns}};
  const auto r = ca::tokenizer::render_episode(tok, episode);
  REQUIRE(r.tokens.size() == r.mask.size());

  // 1. The text, written out by hand from Qwen2.5's template (not by the code under test).
  std::string expected = "<|im_start|>system\n" + system + tools_system_block(tools) + "<|im_end|>\n<|im_start|>user\n" +
                         user + "<|im_end|>\n<|im_start|>assistant\n";
  expected += "Writing the kernel.\n<tool_call>\n{\"name\": \"write_file\", \"arguments\": " + script[0].calls[0].second +
              "}\n</tool_call><|im_end|>\n<|im_start|>user\n<tool_response>\nwrote kernels/a.cu (23 bytes)\n"
              "</tool_response><|im_end|>\n<|im_start|>assistant\n";
  expected += "<tool_call>\n{\"name\": \"compile\", \"arguments\": {}}\n</tool_call>\n<tool_call>\n{\"name\": \"verify\", "
              "\"arguments\": {}}\n</tool_call><|im_end|>\n<|im_start|>user\n<tool_response>\ncompiled: 1 kernel\n"
              "</tool_response>\n<tool_response>\nverify: correct (5 trials)\n</tool_response><|im_end|>\n"
              "<|im_start|>assistant\n";
  expected += "Done: the workspace is my submission.<|im_end|>";
  CHECK(tok.decode(r.tokens) == expected);

  // 2. The model's tokens are exactly the three completions, each ending with <|im_end|>; the native
  //    policy's parser reads each back to the recorded content and calls.
  const auto runs = mask_runs(r.mask);
  REQUIRE(runs.size() == 6);  // prompt, completion, tool results, completion, tool results, completion
  CHECK(r.response_start == int(runs[1].begin));
  for (std::size_t i = 0; i < script.size(); ++i) {
    const Run& run = runs[2 * i + 1];
    REQUIRE(run.model);
    std::vector<int> ids(r.tokens.begin() + long(run.begin), r.tokens.begin() + long(run.end));
    REQUIRE(ids.back() == tok.token_id("<|im_end|>"));
    ids.pop_back();
    std::string content;
    auto calls = parse_tool_calls(tok.decode(ids), content, int(i));
    CHECK(content == script[i].content);
    REQUIRE(calls.size() == script[i].calls.size());
    for (std::size_t k = 0; k < calls.size(); ++k) {
      CHECK(calls[k].name == script[i].calls[k].first);
      CHECK(ca::Json::parse(calls[k].arguments) == ca::Json::parse(script[i].calls[k].second));
    }
  }

  // 3. What the native policy is fed for the same messages (as agent-run builds them) is, turn by
  //    turn, what the rendering feeds: the first prompt, then the tool results after each completion
  //    (the policy samples its own completions here, so the comparison is of the fed parts).
  PolicyOptions o;
  o.max_tokens = 8;
  auto policy = make_native_policy(dir.string(), o);
  auto session = policy->start("t", 3);
  ca::Json messages = ca::Json::array({{{"role", "system"}, {"content", system}}, {{"role", "user"}, {"content", user}}});
  std::vector<int> previous;  // the last prompt and completion, as the policy holds them
  const int im_end = tok.token_id("<|im_end|>");
  for (std::size_t i = 0; i < script.size(); ++i) {
    AssistantTurn t = session->next(messages, tools, TurnBudget{16000, 60});
    const auto prompt = t.prompt_token_ids.get<std::vector<int>>();
    REQUIRE(prompt.size() > previous.size());
    REQUIRE(std::equal(previous.begin(), previous.end(), prompt.begin()));
    std::vector<int> fed(prompt.begin() + long(previous.size()), prompt.end());
    const Run& run = runs[2 * i];
    std::vector<int> rendered(r.tokens.begin() + long(run.begin), r.tokens.begin() + long(run.end));
    if (i > 0 && (previous.empty() || previous.back() != im_end)) rendered.insert(rendered.begin(), im_end);
    CHECK_MESSAGE(fed == rendered, "turn ", i, ": the native policy was fed other tokens than ppo-step renders");
    previous = prompt;
    const auto sampled = t.token_ids.get<std::vector<int>>();
    previous.insert(previous.end(), sampled.begin(), sampled.end());
    messages.push_back({{"role", "assistant"}, {"content", script[i].content}});
    for (std::size_t k = 0; k < script[i].results.size(); ++k)
      messages.push_back({{"role", "tool"}, {"tool_call_id", "call_" + std::to_string(i) + "_" + std::to_string(k)},
                          {"name", script[i].calls[k].first}, {"content", script[i].results[k]}});
  }

  // 4. A turn that stopped for length has no <|im_end|> of its own; a turn after one without tool
  //    results, or a turn without an assistant part, is a field error.
  ca::Json cut = episode;
  cut["turns"] = ca::Json::array({turns[0]});
  cut["turns"][0]["assistant"]["finish_reason"] = "length";
  auto rc = ca::tokenizer::render_episode(tok, cut);
  CHECK(rc.tokens.back() != im_end);
  ca::Json broken = episode;
  broken["turns"][0]["tool_results"] = ca::Json::array();
  CHECK_THROWS_AS(ca::tokenizer::render_episode(tok, broken), ca::FieldError);
  broken = episode;
  broken["turns"][1].erase("assistant");
  CHECK_THROWS_AS(ca::tokenizer::render_episode(tok, broken), ca::FieldError);
  fs::remove_all(dir);
}

// ---------------------------------------------------------------------------------------------
// Every input channel bounded (issue 32): the one JSON parser (libcommon/jsonl) and what uses it.

namespace {
std::string nested(int n, const std::string& inner = "") { return std::string(n, '[') + inner + std::string(n, ']'); }
std::string parse_error(const std::string& text, const ca::JsonSelection& sel = {}) {
  try {
    (void)ca::parse_json(text, "here", sel);
    return "";
  } catch (const ca::InputError& e) {
    return e.what();
  }
}
}  // namespace

TEST_CASE("parse_json: the depth limit holds by construction, anywhere in the text") {
  CHECK(parse_error(nested(ca::kMaxJsonDepth)).empty());
  CHECK(parse_error(nested(ca::kMaxJsonDepth + 1)) == "here: nested deeper than 512 levels");
  CHECK(parse_error(nested(100000)) == "here: nested deeper than 512 levels");
  // Objects count as arrays do; brackets inside strings do not count; escapes do not end a string.
  std::string objs;
  for (int i = 0; i < 600; ++i) objs += "{\"a\":";
  objs += "1" + std::string(600, '}');
  CHECK(parse_error(objs).find("nested deeper") != std::string::npos);
  CHECK(parse_error("[\"" + std::string(100000, '[') + "\\\"\"]").empty());
  // Deep where a selection skips it is refused all the same: a skipped value is still parsed.
  ca::JsonSelection sel;
  sel.keep = {{"choices"}};
  CHECK(parse_error("{\"extra\": " + nested(100000) + ", \"choices\": []}", sel).find("nested deeper") !=
        std::string::npos);
  // Not JSON, ill-formed UTF-8, a number a double cannot hold: InputError naming the place.
  CHECK(parse_error("{").rfind("here: not JSON: parse error", 0) == 0);
  CHECK(parse_error("[1] x").rfind("here: not JSON", 0) == 0);
  CHECK(parse_error("\"\xff\"").rfind("here: not JSON", 0) == 0);
  CHECK(parse_error("[1e999]").find("number overflow") != std::string::npos);
  // The value is what nlohmann's parse gives.
  const std::string text = R"({"b": [1, -2, 3.5, "x\u00e9", null, true, {"z": {}}], "a": {"k": [[]]}, "b2": 18446744073709551615})";
  CHECK(ca::parse_json(text, "x") == ca::Json::parse(text));
  CHECK(ca::parse_json(text, "x").dump() == ca::Json::parse(text).dump());  // key order kept
  CHECK(ca::parse_json("{\"a\": 1, \"a\": 2}", "x")["a"] == 2);               // the last duplicate wins
  CHECK(ca::json_depth(ca::parse_json(nested(ca::kMaxJsonDepth), "x")) == ca::kMaxJsonDepth);
  CHECK(ca::json_depth(ca::Json(3)) == 0);
}

TEST_CASE("parse_json: a selection builds only what it keeps; arrays built are bounded") {
  ca::JsonSelection sel;
  sel.keep = {{"choices", "0", "message", "content"}, {"items", "*", "id"}, {"usage"}};
  const std::string text = R"({"junk": [{"a": 1}, [2, 3]], "choices": [{"message": {"content": "hi", "other": [1]}, "x": 1},
                               {"message": {"content": "second"}}],
                               "items": [{"id": 1, "big": "zzz"}, {"id": 2}], "usage": {"p": {"q": [1]}}})";
  const ca::Json j = ca::parse_json(text, "x", sel);
  CHECK(j == ca::Json::parse(R"({"choices": [{"message": {"content": "hi"}}], "items": [{"id": 1}, {"id": 2}],
                                 "usage": {"p": {"q": [1]}}})"));
  sel.max_array_items = 2;
  CHECK(parse_error(R"({"usage": [1, 2, 3]})", sel) == "here: more than 2 items in the array at /usage");
  CHECK(parse_error(R"({"items": [{"id": 1}, {"id": 2}, {"id": 3}]})", sel) ==
        "here: more than 2 items in the array at /items");
  // What is skipped is neither built nor counted: junk, and choices past [0].
  CHECK(parse_error(R"({"junk": [1, 2, 3, 4], "choices": [{}, {}, {}, {}]})", sel).empty());
  CHECK(ca::parse_json(R"({"choices": [{}, {}, {}, {}]})", "x", sel) == ca::Json::parse(R"({"choices": [{}]})"));
}

TEST_CASE("parse_json_sorted and the tokenizer file: nesting limited, bad input named") {
  CHECK_THROWS_WITH_AS(ca::parse_json_sorted(nested(100000), "'tok.json'"), "'tok.json': nested deeper than 512 levels",
                       ca::InputError);
  const std::string path = (fs::temp_directory_path() / ("deep-tokenizer-" + std::to_string(getpid()) + ".json")).string();
  { std::ofstream(path) << "{\"model\": " << nested(100000) << "}"; }
  CHECK_THROWS_WITH_AS(ca::tokenizer::Tokenizer::from_file(path), doctest::Contains("nested deeper than 512 levels"),
                       ca::InputError);
  fs::remove(path);
}

TEST_CASE("dumped_size is the length of the line written, without making it") {
  ca::Json j = ca::parse_json(R"({"a": "x\u0001\"y", "b": [1.5, null, {"c": "\u00e9"}]})", "x");
  j["bad"] = std::string("\xff\xfe");  // written as U+FFFD
  CHECK(ca::dumped_size(j) == ca::dump_record(j).size());
}

TEST_CASE("RecordReader: a line past 64 MiB is refused without holding it; the lines before are read") {
  const std::string path = (fs::temp_directory_path() / ("long-line-" + std::to_string(getpid()) + ".jsonl")).string();
  {
    std::ofstream f(path, std::ios::binary);
    f << "{\"a\": 1}\n{\"b\": \"";
    const std::string block(1 << 20, 'x');
    for (int i = 0; i < 65; ++i) f << block;
    f << "\"}\n{\"c\": 3}";
  }
  ca::RecordReader r(path);
  ca::Json rec;
  REQUIRE(r.next(rec));
  CHECK(rec["a"] == 1);
  CHECK_THROWS_WITH_AS(r.next(rec), doctest::Contains("line 2: line longer than 64 MiB"), ca::InputError);
  fs::remove(path);
  // A last line without a newline, and \r\n lines, read as before.
  {
    std::ofstream f(path, std::ios::binary);
    f << "{\"a\": 1}\r\n\n{\"b\": 2}";
  }
  ca::RecordReader r2(path);
  REQUIRE(r2.next(rec));
  CHECK(rec["a"] == 1);
  REQUIRE(r2.next(rec));
  CHECK(rec["b"] == 2);
  CHECK(r2.line_number() == 3);
  CHECK_FALSE(r2.next(rec));
  fs::remove(path);
}

TEST_CASE("is_valid_utf8 agrees with the lossy decoder") {
  for (const std::string s : {"", "plain", "\xC3\xA9", "\xE2\x82\xAC", "\xF0\x9F\x98\x80", "\xEF\xBF\xBD"})
    CHECK(is_valid_utf8(s));
  for (const std::string s : {"\x80", "\xC0\x80", "\xC1\xBF", "\xE0\x80\x80", "\xED\xA0\x80", "\xF4\x90\x80\x80",
                              "\xF5\x80\x80\x80", "\xC3", "\xE2\x82", "a\xFF"}) {
    CHECK_FALSE(is_valid_utf8(s));
    CHECK(valid_text(s) != s);
  }
  // Property: valid exactly when the lossy decoder leaves the text as it is (random bytes, biased
  // to lead and continuation bytes so that sequences form).
  uint64_t x = 88172645463325252ull;
  const unsigned char alphabet[] = {'a', 0x80, 0x8F, 0x90, 0xA0, 0xBF, 0xC0, 0xC2, 0xDF, 0xE0, 0xED, 0xEF,
                                    0xF0, 0xF4, 0xF5, 0xFF};
  for (int k = 0; k < 20000; ++k) {
    std::string r;
    for (int i = 0; i < 6; ++i) {
      x ^= x << 13, x ^= x >> 7, x ^= x << 17;
      r += static_cast<char>(alphabet[x % sizeof alphabet]);
    }
    CHECK(is_valid_utf8(r) == (ca::tokenizer::valid_utf8(r) == r));
  }
  std::string t = "ok \xC3(";
  make_valid_text(t);
  CHECK(t == "ok \xEF\xBF\xBD(");
}

TEST_CASE("replay: a script line nested too deep is bad input naming the line") {
  const std::string path = (fs::temp_directory_path() / ("deep-replay-" + std::to_string(getpid()) + ".jsonl")).string();
  { std::ofstream(path) << "{\"content\": \"a\"}\n{\"content\": " << nested(100000) << "}\n"; }
  const std::string want = path + " line 2: nested deeper than 512 levels";
  CHECK_THROWS_WITH_AS(make_replay_policy(path), doctest::Contains(want.c_str()), ca::InputError);
  fs::remove(path);
}
