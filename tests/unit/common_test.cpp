// Units of libcommon: records, ids, fields, shards, safetensors, processes.
#include <doctest/doctest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <thread>

#include <filesystem>
#include <fstream>

#include "libcommon/cli.hpp"
#include "libcommon/errors.hpp"
#include "libcommon/fields.hpp"
#include "libcommon/ids.hpp"
#include "libcommon/jsonl.hpp"
#include "libcommon/paths.hpp"
#include "libcommon/process.hpp"
#include "libcommon/record_loop.hpp"
#include "libcommon/safetensors.hpp"

using namespace ca;

static std::string write_temp(const std::string& dir, const std::string& name, const std::string& text) {
  std::string path = dir + "/" + name;
  std::ofstream(path) << text;
  return path;
}

TEST_CASE("jsonl reader keeps key order and names the bad line") {
  PrivateTempDir dir("unit");
  auto path = write_temp(dir.path(), "a.jsonl", "{\"z\":1,\"a\":2}\n\n{\"b\":[1,2]}\n{oops\n");
  RecordReader reader(path);
  Json r;
  REQUIRE(reader.next(r));
  CHECK(r.dump() == "{\"z\":1,\"a\":2}");
  REQUIRE(reader.next(r));
  CHECK(reader.line_number() == 3);
  try {
    reader.next(r);
    FAIL("expected an InputError");
  } catch (const InputError& e) {
    CHECK(std::string(e.what()).find("line 4") != std::string::npos);
    CHECK(e.exit_code == kExitBadInput);
  }
}

TEST_CASE("a non-object line is bad input") {
  CHECK_THROWS_AS(parse_record_line("[1,2]", "line 1"), InputError);
  CHECK_NOTHROW(parse_record_line("{\"a\": 1}", "line 1"));
}

TEST_CASE("content ids are canonical: key order and spacing do not matter") {
  Json a = Json::parse("{\"b\":1,\"a\":{\"y\":2,\"x\":[1,2]}}");
  Json b = Json::parse("{\"a\": {\"x\": [1, 2], \"y\": 2}, \"b\": 1}");
  CHECK(content_id(a) == content_id(b));
  CHECK(content_id(a).size() == 16);
  CHECK(canonical_json(a) == "{\"a\":{\"x\":[1,2],\"y\":2},\"b\":1}");
  CHECK(sha256_hex("abc") == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  Json c = Json::parse("{\"b\":2,\"a\":{\"y\":2,\"x\":[1,2]}}");
  CHECK(content_id(a) != content_id(c));
}

TEST_CASE("one JSON type: objects keep their order, equality is by order, ids are not") {
  Json a = Json::parse(R"({"z":1,"a":2})"), b = Json::parse(R"({"a":2,"z":1})");
  CHECK(a.dump() == R"({"z":1,"a":2})");
  CHECK(a.begin().key() == "z");
  CHECK(content_id(a) == content_id(b));  // the id of a task or bundle never depends on key order
  CHECK(canonical_json(b) == R"({"a":2,"z":1})");
}

TEST_CASE("with_valid_utf8: broken bytes in strings and keys become U+FFFD; the rest is kept") {
  Json j = {{"ok", "caf\xc3\xa9"}, {"bad\xff", Json::array({"x\xc3", 1, nullptr})}, {"n", {{"deep", "\xe2\x82"}}}};
  CHECK_THROWS(j.dump());  // the strict dump refuses it: this is why the function exists
  Json v = with_valid_utf8(j);
  CHECK_NOTHROW(v.dump());
  CHECK(v["ok"] == "caf\xc3\xa9");
  CHECK(v.contains("bad\xef\xbf\xbd"));
  CHECK(v["bad\xef\xbf\xbd"][0] == "x\xef\xbf\xbd");
  CHECK(v["bad\xef\xbf\xbd"][1] == 1);
  CHECK(v["n"]["deep"].get<std::string>().rfind("\xef\xbf\xbd", 0) == 0);
  std::vector<std::string> keys;
  for (auto& [k, x] : v.items()) keys.push_back(k);
  CHECK(keys == std::vector<std::string>{"ok", "bad\xef\xbf\xbd", "n"});  // order kept
}

TEST_CASE("typed fields name what is wrong") {
  Json r = Json::parse(R"({"check":{"correct":true,"n":"x"},"prof":{"time_us":-1}})");
  CHECK(get_required<bool>(r, "/check/correct") == true);
  CHECK_FALSE(get_optional<double>(r, "/prof/missing").has_value());
  try {
    get_required<double>(r, "/check/n");
    FAIL("expected FieldError");
  } catch (const FieldError& e) {
    CHECK(e.field == "check.n");
    CHECK(e.reason.find("expected a number") != std::string::npos);
  }
  CHECK_THROWS_AS(get_required<bool>(r, "/check/absent"), FieldError);
  CHECK_THROWS_AS(get_positive(r, "/prof/time_us"), FieldError);
}

TEST_CASE("bad records get an error section, or are fatal under --strict") {
  Json r = Json::parse(R"({"task_id":"t1"})");
  mark_bad_record(r, FieldError("prof.time_us", "missing"), "reward-calc", "line 3", false);
  CHECK(r["error"]["field"] == "prof.time_us");
  CHECK(r["error"]["tool"] == "reward-calc");
  CHECK(r["task_id"] == "t1");
  Json s = Json::parse(R"({"task_id":"t1"})");
  CHECK_THROWS_AS(mark_bad_record(s, FieldError("x", "missing"), "t", "line 3", true), InputError);
}

TEST_CASE("shards partition keys deterministically") {
  Shard a = Shard::parse("0/3"), b = Shard::parse("1/3"), c = Shard::parse("2/3");
  int total = 0;
  for (int i = 0; i < 300; ++i) {
    std::string key = "task" + std::to_string(i);
    int n = a.contains(key) + b.contains(key) + c.contains(key);
    CHECK(n == 1);
    total += a.contains(key);
  }
  CHECK(total > 60);
  CHECK(total < 140);
  CHECK_THROWS_AS(Shard::parse("3/3"), UsageError);
  CHECK_THROWS_AS(Shard::parse("x"), UsageError);
  CHECK_THROWS_AS(Shard::parse("1/2x"), UsageError);
}

TEST_CASE("safetensors round trip, and half-precision conversions") {
  PrivateTempDir dir("unit");
  TensorMap tensors;
  Tensor f = Tensor::zeros("F32", {2, 3});
  for (int i = 0; i < 6; ++i) f.as<float>()[i] = 0.5f * i - 1;
  tensors["w"] = f;
  Tensor h = Tensor::zeros("BF16", {4});
  for (int i = 0; i < 4; ++i) h.as<uint16_t>()[i] = float_to_bf16(1.5f * i);
  tensors["b"] = h;
  std::string path = dir.path() + "/t.safetensors";
  write_safetensors(path, tensors, {{"format", "pt"}});
  auto back = read_safetensors(path);
  CHECK(back.metadata["format"] == "pt");
  REQUIRE(back.tensors.count("w"));
  CHECK(back.tensors["w"].shape == std::vector<int64_t>{2, 3});
  CHECK(back.tensors["w"].data == f.data);
  auto d = to_doubles(back.tensors["b"]);
  CHECK(d[3] == doctest::Approx(4.5));
  CHECK(fp16_to_float(float_to_fp16(0.333333f)) == doctest::Approx(0.333333f).epsilon(1e-3));
  CHECK(fp16_to_float(float_to_fp16(65504.0f)) == 65504.0f);
  CHECK(fp16_to_float(float_to_fp16(1e-6f)) == doctest::Approx(1e-6f).epsilon(0.05));
  CHECK(bf16_to_float(float_to_bf16(1.0f + 1.0f / 512)) == 1.0f);  // ties round to even
}

TEST_CASE("child processes: lines, timeouts and kill") {
  SpawnOptions opts;
  opts.argv = {"sh", "-c", "read x; echo got:$x; sleep 30"};
  ChildProcess child(opts);
  child.write("hello\n");
  auto line = child.read_line(std::chrono::milliseconds(5000));
  REQUIRE(line.has_value());
  CHECK(*line == "got:hello");
  CHECK_FALSE(child.read_line(std::chrono::milliseconds(100)).has_value());
  child.kill();
  CHECK(child.status_text().find("signal 9") != std::string::npos);

  auto r = run_command({{"sh", "-c", "cat; echo err >&2; exit 3"}}, "in\n", std::chrono::milliseconds(5000));
  CHECK(r.exit_status == 3);
  CHECK(r.out == "in\n");
  CHECK(r.err == "err\n");
  auto t = run_command({{"sleep", "10"}}, "", std::chrono::milliseconds(200));
  CHECK(t.timed_out);
  CHECK_THROWS_AS(ChildProcess(SpawnOptions{{"/nonexistent/binary"}}), EnvironmentError);
}

// How a child ended is read from its wait status, never from the number: an exit(137) and a SIGKILL
// both give 137, and only the signal is "killed" (kernel-check's killed_from_outside, a compiler
// killed from outside: environment failures, never verdicts).
TEST_CASE("child processes: an exit(137) is not a SIGKILL") {
  ChildProcess exited(SpawnOptions{{"sh", "-c", "exit 137"}});
  auto rc = exited.wait(std::chrono::milliseconds(5000));
  REQUIRE(rc.has_value());
  CHECK(*rc == 137);
  CHECK_FALSE(exited.term_signal().has_value());
  CHECK(exited.status_text() == "exit 137");
  ChildProcess killed(SpawnOptions{{"sh", "-c", "kill -9 $$"}});
  rc = killed.wait(std::chrono::milliseconds(5000));
  REQUIRE(rc.has_value());
  CHECK(*rc == 137);
  REQUIRE(killed.term_signal().has_value());
  CHECK(*killed.term_signal() == SIGKILL);
  // Moved, the status goes with it.
  ChildProcess moved = std::move(killed);
  CHECK(moved.term_signal() == std::optional<int>(SIGKILL));
  // Ours: kill() ends it with SIGKILL, and the status says so.
  ChildProcess ours(SpawnOptions{{"sleep", "30"}});
  ours.kill();
  CHECK(ours.term_signal() == std::optional<int>(SIGKILL));

  auto a = run_command({{"sh", "-c", "exit 137"}}, "", std::chrono::milliseconds(5000));
  CHECK(a.exit_status == 137);
  CHECK(a.term_signal == 0);
  auto b = run_command({{"sh", "-c", "kill -9 $$"}}, "", std::chrono::milliseconds(5000));
  CHECK(b.exit_status == 137);
  CHECK(b.term_signal == SIGKILL);
}

// A stop or a timeout ends what the child started even when it left the process group (setsid, as
// bwrap's --new-session does), and run_command returns only once those are gone: a sandbox's
// workspace is measured and trimmed right after (agent-run's workspace cap).
TEST_CASE("run_command: a stop and a timeout end the processes that left the group, before returning") {
  char tmpl[] = "/tmp/ca-kill-XXXXXX";
  REQUIRE(mkdtemp(tmpl) != nullptr);
  const std::string dir = tmpl;
  const std::string script = "setsid sh -c 'echo started > " + dir + "/started; sleep 0.6; touch " + dir +
                             "/late' & sleep 30";
  for (int mode = 0; mode < 2; ++mode) {
    std::remove((dir + "/started").c_str());
    std::remove((dir + "/late").c_str());
    auto begun = std::chrono::steady_clock::now();
    StopCheck stop = [&] {
      return mode == 0 && access((dir + "/started").c_str(), F_OK) == 0 &&
             std::chrono::steady_clock::now() - begun > std::chrono::milliseconds(150);
    };
    auto r = run_command({{"sh", "-c", script}}, "", std::chrono::milliseconds(mode == 0 ? 20000 : 400), 1 << 16,
                         stop, std::chrono::milliseconds(0));
    CHECK((mode == 0 ? r.stopped : r.timed_out));
    CHECK(access((dir + "/started").c_str(), F_OK) == 0);
    std::this_thread::sleep_for(std::chrono::milliseconds(900));
    INFO("mode " << mode << ": the setsid'ed grandchild outlived the stop");
    CHECK(access((dir + "/late").c_str(), F_OK) != 0);
  }
  std::remove((dir + "/started").c_str());
  std::remove((dir + "/late").c_str());
  rmdir(dir.c_str());
}

// A service's request body is read as stdin is: blank lines skipped, lines numbered as on stdin,
// the first bad line named (libcommon/record_loop.hpp parse_lines).
TEST_CASE("parse_lines: records and their lines; the first bad line is named; dump_lines writes them back") {
  auto lines = ca::parse_lines("{\"a\": 1}\n\n  \n{\"b\": [2]}\r\n{\"c\": 3}");
  REQUIRE(lines.size() == 3);
  CHECK(lines[0].where == "line 1");
  CHECK(lines[1].where == "line 4");
  CHECK(lines[2].where == "line 5");
  CHECK(lines[1].record["b"][0] == 2);
  CHECK(ca::parse_lines("").empty());
  CHECK(ca::dump_lines({lines[0].record, lines[2].record}) == "{\"a\":1}\n{\"c\":3}\n");
  try {
    ca::parse_lines("{\"a\": 1}\n{not json\n{\"b\": 2}\n");
    FAIL("no error");
  } catch (const ca::InputError& e) {
    CHECK(std::string(e.what()).rfind("line 2: not JSON", 0) == 0);
  }
  CHECK_THROWS_AS(ca::parse_lines("[1, 2]\n"), ca::InputError);
}
