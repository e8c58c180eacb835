// Units of the reference worker through ca::worker::WorkerClient on CPU torch: specs, seeded inputs,
// references checked against a C++ recomputation, filters on every fixture, and the failure paths
// (raise, hang, kill, exit, CPU and memory limits, no torch).
#include <doctest/doctest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "libcommon/errors.hpp"
#include "libcommon/paths.hpp"
#include "libcommon/confine.hpp"
#include "libcommon/safetensors.hpp"
#include "libcommon/worker/requests.hpp"
#include "libcommon/worker/worker_client.hpp"

using namespace ca;
using namespace ca::worker;
using namespace std::chrono;

namespace {

std::string fixtures() {
  const char* f = std::getenv("CA_WORKER_FIXTURES");
  if (f && *f) return f;
  const char* src = std::getenv("CA_SRC");
  return std::string(src ? src : ".") + "/tests/worker/fixtures";
}

std::string fixture(const std::string& name) { return read_file(fixtures() + "/" + name + ".py"); }

// One worker shared by the cases that do not break it (a start costs an `import torch`).
WorkerClient& shared() {
  static WorkerClient client([] {
    WorkerOptions o;
    o.request_timeout = seconds(120);
    o.read_dirs = {fixtures()};  // the similarity cases read them
    return o;
  }());
  return client;
}

Json load(WorkerClient& c, const std::string& name, const std::string& task_id = "") {
  return c.request({{"op", "load"}, {"task_id", task_id.empty() ? name : task_id}, {"code", fixture(name)}});
}

std::string bytes_of(const std::string& path) { return read_file(path); }

std::string str(const Json& a) { return a.dump().substr(0, 800); }

}  // namespace

TEST_CASE("worker: finds a python with torch and says hello") {
  auto py = WorkerClient::find_python();
  CHECK(!py.empty());
  auto& c = shared();
  CHECK(c.hello().value("ok", false));
  CHECK(!c.hello().value("torch_version", std::string()).empty());
  CHECK(c.hello().value("device", std::string()) == "cpu");
  auto a = c.request({{"op", "ping"}});
  CHECK(a.value("ok", false));
  CHECK(a["precision"]["matmul_tf32"] == false);
  CHECK(a["precision"]["cudnn_tf32"] == false);
  CHECK(a["precision"]["autocast"].is_null());
  // The private temp dir: 0700, under /dev/shm when there is one.
  struct stat st {};
  REQUIRE(stat(c.temp_dir().c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0700);
  if (access("/dev/shm", W_OK) == 0) CHECK(c.temp_dir().rfind("/dev/shm/", 0) == 0);
}

TEST_CASE("worker: load gives input, param and output specs") {
  auto& c = shared();
  auto a = load(c, "linear_relu");
  REQUIRE_MESSAGE(a.value("ok", false), str(a));
  CHECK(a["torch_version"].is_string());
  REQUIRE(a["inputs"].size() == 1);
  CHECK(a["inputs"][0]["name"] == "x");
  CHECK(a["inputs"][0]["shape"] == Json::array({16, 32}));
  CHECK(a["inputs"][0]["dtype"] == "F32");
  CHECK(a["inputs"][0]["distribution"]["kind"] == "normal");
  CHECK(a["inputs"][0]["distribution"]["std"] == 1.0);
  CHECK(a["init_inputs"] == Json::array({32, 64}));
  REQUIRE(a["params"].size() == 2);
  CHECK(a["params"][0]["name"] == "linear.weight");
  CHECK(a["params"][0]["shape"] == Json::array({64, 32}));
  CHECK(a["params"][1]["name"] == "linear.bias");
  REQUIRE(a["outputs"].size() == 1);
  CHECK(a["outputs"][0]["shape"] == Json::array({16, 64}));

  auto s = load(c, "softmax");
  REQUIRE_MESSAGE(s.value("ok", false), str(s));
  CHECK(s["inputs"][0]["distribution"]["kind"] == "uniform");
  CHECK(s["inputs"][0]["distribution"]["low"] == -2.0);
  CHECK(s["inputs"][0]["distribution"]["high"] == 2.0);
  CHECK(s["params"].empty());

  auto b = load(c, "conv_bn");
  REQUIRE_MESSAGE(b.value("ok", false), str(b));
  std::vector<std::string> names;
  for (auto& p : b["params"]) names.push_back(p["name"]);
  CHECK(std::count(names.begin(), names.end(), "bn.running_mean") == 1);
  CHECK(std::count(names.begin(), names.end(), "bn.num_batches_tracked") == 1);
  CHECK(b["outputs"][0]["shape"] == Json::array({4, 8, 16, 16}));

  auto t = load(c, "two_outputs");
  REQUIRE_MESSAGE(t.value("ok", false), str(t));
  REQUIRE(t["outputs"].size() == 2);
  CHECK(t["outputs"][0]["shape"] == Json::array({6}));
  CHECK(t["outputs"][1]["shape"] == Json::array({6, 3}));
  CHECK(t["inputs"][1]["name"] == "idx");
  CHECK(t["inputs"][1]["dtype"] == "I64");
  CHECK(t["inputs"][1]["distribution"]["kind"] == "randint");
  CHECK(t["inputs"][1]["distribution"]["low"] == 0);
  CHECK(t["inputs"][1]["distribution"]["high"] == 10);
}

TEST_CASE("worker: the same seed gives byte-identical inputs, also from a fresh worker") {
  auto& c = shared();
  REQUIRE(load(c, "two_outputs").value("ok", false));
  auto p1 = c.temp_path("in"), p2 = c.temp_path("in"), p3 = c.temp_path("in");
  for (auto& [path, seed] : std::vector<std::pair<std::string, int>>{{p1, 5}, {p2, 5}, {p3, 6}}) {
    auto a = c.request({{"op", "inputs"}, {"task_id", "two_outputs"}, {"seed", seed}, {"out", path}});
    REQUIRE_MESSAGE(a.value("ok", false), str(a));
  }
  CHECK(bytes_of(p1) == bytes_of(p2));
  CHECK(bytes_of(p1) != bytes_of(p3));
  auto f = read_safetensors(p1);
  REQUIRE(f.tensors.count("inputs.0"));
  REQUIRE(f.tensors.count("inputs.1"));
  CHECK(f.tensors["inputs.0"].dtype == "F32");
  CHECK(f.tensors["inputs.0"].shape == std::vector<int64_t>{6, 10});
  CHECK(f.tensors["inputs.1"].dtype == "I64");
  for (int64_t i = 0; i < f.tensors["inputs.1"].numel(); ++i) {
    auto v = f.tensors["inputs.1"].as<int64_t>()[i];
    CHECK((v >= 0 && v < 10));
  }
  // A second worker process (another interpreter start) writes the same bytes.
  WorkerClient other;
  REQUIRE(load(other, "two_outputs").value("ok", false));
  auto p4 = other.temp_path("in");
  REQUIRE(other.request({{"op", "inputs"}, {"task_id", "two_outputs"}, {"seed", 5}, {"out", p4}}).value("ok", false));
  CHECK(bytes_of(p1) == bytes_of(p4));
}

TEST_CASE("worker: reference of linear+relu matches a C++ recomputation from the exported params") {
  auto& c = shared();
  REQUIRE(load(c, "linear_relu").value("ok", false));
  auto in = c.temp_path("in"), out = c.temp_path("out"), params = c.temp_path("params");
  REQUIRE(c.request({{"op", "inputs"}, {"task_id", "linear_relu"}, {"seed", 11}, {"out", in}}).value("ok", false));
  auto a = c.request({{"op", "reference"}, {"task_id", "linear_relu"}, {"inputs", in}, {"out", out}, {"params_out", params}});
  REQUIRE_MESSAGE(a.value("ok", false), str(a));
  CHECK(a["precision"]["matmul_tf32"] == false);
  auto x = read_safetensors(in).tensors.at("inputs.0");
  auto y = read_safetensors(out).tensors.at("outputs.0");
  auto p = read_safetensors(params).tensors;
  REQUIRE(p.count("params.linear.weight"));
  REQUIRE(p.count("params.linear.bias"));
  auto& w = p["params.linear.weight"];
  auto& b = p["params.linear.bias"];
  REQUIRE(y.shape == std::vector<int64_t>{16, 64});
  double max_err = 0;
  int positives = 0;
  for (int i = 0; i < 16; ++i)
    for (int j = 0; j < 64; ++j) {
      double acc = b.as<float>()[j];
      for (int k = 0; k < 32; ++k) acc += double(x.as<float>()[i * 32 + k]) * w.as<float>()[j * 32 + k];
      double ref = std::max(0.0, acc);
      positives += ref > 0;
      max_err = std::max(max_err, std::abs(ref - y.as<float>()[i * 64 + j]));
    }
  CHECK(max_err < 1e-5);
  CHECK(positives > 100);  // the relu does not zero everything: the check has teeth
}

TEST_CASE("worker: conv+bn reference is repeatable (buffers reset) and the params are the construction's") {
  auto& c = shared();
  REQUIRE(load(c, "conv_bn").value("ok", false));
  auto in = c.temp_path("in"), o1 = c.temp_path("out"), o2 = c.temp_path("out"), pa = c.temp_path("p"),
       pb = c.temp_path("p");
  REQUIRE(c.request({{"op", "inputs"}, {"task_id", "conv_bn"}, {"seed", 1}, {"out", in}}).value("ok", false));
  REQUIRE(c.request({{"op", "reference"}, {"task_id", "conv_bn"}, {"inputs", in}, {"out", o1}, {"params_out", pa}}).value("ok", false));
  REQUIRE(c.request({{"op", "reference"}, {"task_id", "conv_bn"}, {"inputs", in}, {"out", o2}, {"params_out", pb}}).value("ok", false));
  CHECK(bytes_of(o1) == bytes_of(o2));
  CHECK(bytes_of(pa) == bytes_of(pb));
  auto p = read_safetensors(pa).tensors;
  // Running stats as constructed (zeros / ones), not as drifted by the forward calls.
  for (int i = 0; i < 8; ++i) {
    CHECK(p["params.bn.running_mean"].as<float>()[i] == 0.0f);
    CHECK(p["params.bn.running_var"].as<float>()[i] == 1.0f);
  }
  CHECK(p["params.bn.num_batches_tracked"].dtype == "I64");
  // Same init_seed -> same parameters in another load (construction is seeded).
  REQUIRE(load(c, "conv_bn", "conv_bn_again").value("ok", false));
  auto pc = c.temp_path("p"), o3 = c.temp_path("out");
  REQUIRE(c.request({{"op", "reference"}, {"task_id", "conv_bn_again"}, {"inputs", in}, {"out", o3}, {"params_out", pc}}).value("ok", false));
  CHECK(bytes_of(pa) == bytes_of(pc));
  CHECK(bytes_of(o1) == bytes_of(o3));
}

TEST_CASE("worker: task output on stdout does not break the protocol; scalar inputs travel in metadata") {
  auto& c = shared();
  auto a = load(c, "prints");
  REQUIRE_MESSAGE(a.value("ok", false), str(a));
  CHECK(a["inputs"][0]["distribution"]["kind"] == "derived");
  CHECK(a["inputs"][1]["distribution"]["kind"] == "scalar");
  CHECK(a["inputs"][1]["distribution"]["value"] == 5);
  auto in = c.temp_path("in"), out = c.temp_path("out");
  REQUIRE(c.request({{"op", "inputs"}, {"task_id", "prints"}, {"seed", 2}, {"out", in}}).value("ok", false));
  auto f = read_safetensors(in);
  CHECK(f.metadata["inputs.1"] == "5");
  auto r = c.request({{"op", "reference"}, {"task_id", "prints"}, {"inputs", in}, {"out", out}});
  REQUIRE_MESSAGE(r.value("ok", false), str(r));
  auto x = f.tensors.at("inputs.0");
  auto y = read_safetensors(out).tensors.at("outputs.0");
  for (int i = 0; i < 16; ++i) CHECK(y.as<float>()[i] == doctest::Approx(5.0f * x.as<float>()[i]));
}

TEST_CASE("worker: a task that raises gets an error answer and the worker lives on") {
  auto& c = shared();
  pid_t pid = c.worker_pid();
  auto a = load(c, "raises");
  CHECK_FALSE(a.value("ok", true));
  CHECK(a["error"] == "task_error");
  CHECK(a["stage"] == "forward");
  CHECK(a["detail"].get<std::string>().find("always raises") != std::string::npos);
  CHECK(c.request({{"op", "ping"}}).value("ok", false));
  CHECK(c.worker_pid() == pid);
  // Bad requests are answered, not fatal.
  auto b = c.request({{"op", "inputs"}, {"task_id", "linear_relu"}});
  CHECK(b["error"] == "bad_request");
  CHECK(c.request({{"op", "frobnicate"}})["error"] == "bad_request");
  CHECK(c.request({{"op", "inputs"}, {"task_id", "never-loaded"}, {"seed", 0}, {"out", c.temp_path("x")}})["error"] == "unknown_task");
  CHECK(c.request({{"op", "load"}, {"task_id", "syntax"}, {"code", "class Model(:\n"}})["stage"] == "exec");
  CHECK(c.request({{"op", "load"}, {"task_id", "nomodel"}, {"code", "x = 1\n"}})["stage"] == "exec");
  CHECK(c.worker_pid() == pid);
}

TEST_CASE("worker: device tensors need a CUDA worker; inputs and reference need somewhere to put their tensors") {
  auto& c = shared();
  REQUIRE(load(c, "linear_relu").value("ok", false));
  auto a = c.request({{"op", "inputs"}, {"task_id", "linear_relu"}, {"seed", 1}, {"keep", "k"}});
  CHECK_FALSE(a.value("ok", true));
  CHECK(a["error"] == "bad_request");
  CHECK(a["detail"].get<std::string>().find("CUDA worker") != std::string::npos);
  auto b = c.request({{"op", "inputs"}, {"task_id", "linear_relu"}, {"seed", 1}});
  CHECK(b["error"] == "bad_request");
  CHECK(b["detail"].get<std::string>().find("'out'") != std::string::npos);
  auto r = c.request({{"op", "reference"}, {"task_id", "linear_relu"}, {"inputs_key", "k"}, {"keep", "r"}});
  CHECK(r["error"] == "bad_request");
  auto rel = c.request({{"op", "release"}, {"keys", {"k"}}});
  CHECK(rel["error"] == "bad_request");
  // The file path is unchanged beside it.
  auto in = c.temp_path("in");
  CHECK(c.request({{"op", "inputs"}, {"task_id", "linear_relu"}, {"seed", 1}, {"out", in}}).value("ok", false));
}

TEST_CASE("worker: draw_trial names the request that failed and carries the worker's answer") {
  auto& c = shared();
  REQUIRE(load(c, "linear_relu").value("ok", false));
  // A CPU worker keeps no device tensors: the first request of the draw fails, the second is not sent.
  Trial t = draw_trial(c, "linear_relu", 7, {"d-in", "d-ref", std::string("d-par")});
  CHECK_FALSE(t.ok());
  CHECK(t.failed == "inputs");
  CHECK(t.answer.value("error", std::string()) == "bad_request");
  CHECK(t.inputs.is_null());
  CHECK(t.reference.is_null());
  Trial u = draw_trial(c, "no_such_task", 7, {"d-in", "d-ref", std::nullopt});
  CHECK(u.failed == "inputs");
  CHECK_FALSE(u.answer.value("ok", true));
}

TEST_CASE("worker: on CPU, time answers no_device; the method runs with allow_cpu") {
  auto& c = shared();
  REQUIRE(load(c, "linear_relu").value("ok", false));
  auto a = c.request({{"op", "time"}, {"task_id", "linear_relu"}, {"mode", "eager"}});
  CHECK_FALSE(a.value("ok", true));
  CHECK(a["error"] == "no_device");
  auto b = c.request({{"op", "time"}, {"task_id", "linear_relu"}, {"allow_cpu", true}, {"min_runs", 10},
                      {"budget_s", 3}, {"rel_ci", 0.05}});
  REQUIRE_MESSAGE(b.value("ok", false), str(b));
  CHECK(b["time_us"]["median"].get<double>() > 0);
  CHECK(b["time_us"]["n"].get<int>() >= 3);
  CHECK(b["method"]["timer"] == "perf_counter");
  CHECK(b["mode"] == "eager");
  CHECK(b["precision"]["name"] == "fp32");
  // torch.compile on torch 1.x is said to be unsupported, not attempted.
  if (!c.hello().value("compile_available", false)) {
    auto d = c.request({{"op", "time"}, {"task_id", "linear_relu"}, {"mode", "compile"}, {"allow_cpu", true}});
    CHECK(d["error"] == "unsupported");
  }
}

TEST_CASE("worker: each filter verdict on its fixture") {
  auto& c = shared();
  struct Case {
    const char* fixture;
    bool kept;
    const char* reason;
  };
  for (auto k : {Case{"linear_relu", true, ""}, Case{"conv_bn", true, ""}, Case{"softmax", true, ""},
                 Case{"two_outputs", true, ""}, Case{"raises", false, "runs_eager"},
                 Case{"stochastic_dropout", false, "deterministic"}, Case{"stochastic_rand", false, "deterministic"},
                 Case{"nan_output", false, "no_nan_inf"}, Case{"constant", false, "not_constant"},
                 Case{"input_independent", false, "input_dependent"},
                 Case{"insensitive_bias", false, "input_sensitive"}, Case{"ill_conditioned", false, "well_conditioned"},
                 Case{"diluted_block", false, "not_diluted"}}) {
    std::string name = k.fixture;
    CAPTURE(name);
    auto a = c.request({{"op", "filters"}, {"code", fixture(k.fixture)}, {"check_compile", true}});
    REQUIRE_MESSAGE(a.value("ok", false), str(a));
    CHECK(a["kept"] == k.kept);
    if (k.kept) {
      CHECK(a["reason"].is_null());
    } else {
      CHECK(a["reason"] == k.reason);
    }
    auto& v = a["verdicts"];
    // On CPU these two are skipped, and say why. torch.compile runs last, and not at all for a task
    // that another check has already dropped.
    CHECK(v["runs_compile"]["pass"].is_null());
    CHECK(v["eager_time_ms"]["pass"].is_null());
    if (k.kept) {
      CHECK(v["runs_compile"]["detail"].get<std::string>().find("CPU") != std::string::npos);
    } else if (name != "raises") {
      CHECK(v["runs_compile"]["detail"] == "not run: " + std::string(k.reason) + " failed");
    } else {
      CHECK(v["deterministic"]["detail"].get<std::string>().find("runs_eager failed") != std::string::npos);
    }
    if (std::string(k.fixture) == "constant") CHECK(v["input_dependent"]["pass"] == false);
    if (std::string(k.fixture) == "input_independent") CHECK(v["not_constant"]["pass"] == true);
    if (std::string(k.fixture) == "stochastic_rand") CHECK(v["no_nan_inf"]["pass"] == true);
    // The load's measurements: a constant answer would match insensitive_bias (not bit-equal across
    // draws, so input_dependent passes it); ill_conditioned's fp32 reference is far from float64.
    if (std::string(k.fixture) == "insensitive_bias") {
      CHECK(v["input_dependent"]["pass"] == true);
      CHECK(v["input_sensitive"]["detail"].get<std::string>().find("constant answer") != std::string::npos);
      CHECK(v["input_sensitive"]["checks"].size() == 2);
    }
    if (std::string(k.fixture) == "ill_conditioned") {
      CHECK(v["input_sensitive"]["pass"] == true);
      CHECK(v["well_conditioned"]["fp32_err_rel_l2"].get<double>() > 0.05);
    }
    // Most of diluted_block's output is a constant block (varying fraction ~1e-4) and its params are
    // most of the bytes: the bound's floor is a share of the whole output there (R11).
    if (std::string(k.fixture) == "diluted_block") {
      CHECK(v["input_sensitive"]["pass"] == true);
      CHECK(v["not_diluted"]["varying_fraction"].get<double>() < 1e-3);
      CHECK(v["not_diluted"]["param_share"].get<double>() > 0.25);
    }
    if (k.kept) CHECK(v["input_sensitive"]["pass"] == true);
    if (k.kept) CHECK(v["well_conditioned"]["pass"] == true);
    if (k.kept) CHECK(v["not_diluted"]["pass"] == true);
  }
}

TEST_CASE("worker: a verdict lost to GPU memory is judged again once; other errors are not") {
  // The message torch gives when the GPU is full (other workers may hold the memory), raised on the CPU.
  auto with_error = [](const std::string& message) {
    return "import torch\nimport torch.nn as nn\nclass Model(nn.Module):\n    def forward(self, x):\n"
           "        if x.sum() > -1e9:\n            raise RuntimeError('" + message + "')\n        return x\n"
           "def get_inputs():\n    return [torch.randn(8)]\ndef get_init_inputs():\n    return []\n";
  };
  auto& c = shared();
  auto oom = c.request({{"op", "filters"}, {"code", with_error("CUDA out of memory. Tried to allocate 2.00 GiB")}});
  REQUIRE_MESSAGE(oom.value("ok", false), str(oom));
  CHECK(oom["reason"] == "runs_eager");
  CHECK(oom["verdicts"]["runs_eager"]["detail"].get<std::string>().find("out of memory") != std::string::npos);
  CHECK(oom["seconds"].get<double>() >= 0.5);  // the retry waits 0.5-2 s first
  auto other = c.request({{"op", "filters"}, {"code", with_error("shapes do not match")}});
  REQUIRE_MESSAGE(other.value("ok", false), str(other));
  CHECK(other["reason"] == "runs_eager");
  CHECK(other["seconds"].get<double>() < 0.5);
}

TEST_CASE("worker: filters judge an already loaded task when no code is given") {
  auto& c = shared();
  REQUIRE(load(c, "input_independent", "ii").value("ok", false));
  auto a = c.request({{"op", "filters"}, {"task_id", "ii"}});
  REQUIRE_MESSAGE(a.value("ok", false), str(a));
  CHECK(a["reason"] == "input_dependent");
  CHECK(a["load"]["task_id"] == "ii");
  // The task stays loaded (only code-given, id-less filter tasks are dropped).
  CHECK(c.request({{"op", "inputs"}, {"task_id", "ii"}, {"seed", 1}, {"out", c.temp_path("in")}}).value("ok", false));
}

TEST_CASE("worker: confined; a folder not opened to it is unreadable, so similarity fails instead of comparing nothing") {
  auto& c = shared();
  const Json& conf = c.hello()["confinement"];
  REQUIRE_MESSAGE(conf.is_array(), str(c.hello()));
  auto has = [&](const char* n) { return std::find(conf.begin(), conf.end(), Json(n)) != conf.end(); };
  for (const char* n : {"seccomp", "rlimit", "pgroup", "output-cap", "memory-watch"}) CHECK_MESSAGE(has(n), n, " ", str(conf));
  if (landlock_abi() < 1) return;
  CHECK(has("landlock"));
  PrivateTempDir other("cuda-agent-test");
  write_file_atomic(other.path() + "/copy.py", fixture("linear_relu"));
  auto a = c.request({{"op", "similarity"}, {"code", fixture("linear_relu")}, {"dir", other.path()}});
  CHECK_MESSAGE(!a.value("ok", true), str(a));
  CHECK(a.value("detail", std::string()).find("Permission denied") != std::string::npos);
}

TEST_CASE("worker: out_of_memory_alone reads a failed answer that was retried alone for memory, nothing else") {
  const Json oom_alone = {{"ok", false}, {"error", "task_error"}, {"detail", "torch.OutOfMemoryError: CUDA out of memory"},
                          {"memory_admission", "alone"}};
  CHECK(out_of_memory_alone(oom_alone));
  Json other = oom_alone;  // retried alone, then failed for another reason: not the device's memory
  other["detail"] = "the worker had exited";
  CHECK_FALSE(out_of_memory_alone(other));
  Json first = oom_alone;  // out of memory, not yet retried alone
  first.erase("memory_admission");
  CHECK_FALSE(out_of_memory_alone(first));
  Json ok = oom_alone;  // the retry alone succeeded
  ok["ok"] = true;
  CHECK_FALSE(out_of_memory_alone(ok));
  CHECK_FALSE(out_of_memory_alone(Json("alone")));
}

// A worker told it is on cuda:0 runs on the CPU (its --device rewritten), and the starts named in
// `refused` answer the hello a worker gives when its CUDA context finds no memory.
std::string python_on_a_full_gpu(const std::string& dir, const std::string& refused) {
  const std::string path = dir + "/python-on-a-full-gpu";
  std::ofstream f(path);
  f << "#!/bin/bash\n"
    << "if [ \"$3\" = cuda_agent_worker ]; then  # a worker's start (not the client's python -c probes)\n"
    << "  n=$(( $(cat '" << dir << "/starts' 2>/dev/null || echo 0) + 1 )); echo $n > '" << dir << "/starts'\n"
    << "  case ' " << refused << " ' in *\" $n \"*)\n"
    << "    echo '{\"ok\":false,\"op\":\"hello\",\"error\":\"out_of_memory\",\"detail\":\"no memory on cuda:0 for a "
       "CUDA context: CUDA error: out of memory\"}'; exit 3;;\n  esac\nfi\n"
    << "a=(); for x in \"$@\"; do [ \"$x\" = cuda:0 ] && x=cpu; a+=(\"$x\"); done\n"
    << "exec '" << WorkerClient::find_python() << "' \"${a[@]}\"\n";
  f.close();
  std::filesystem::permissions(path, std::filesystem::perms::owner_all);
  return path;
}

int starts_of(const std::string& dir) { return std::stoi(read_file(dir + "/starts")); }

TEST_CASE("worker: a start refused for GPU memory runs again alone; refused alone too, the run stops (exit 3)") {
  PrivateTempDir dir("worker-test");
  WorkerOptions o;
  o.device = "cuda:0";
  o.one_task_per_process = true;  // each task's code in a fresh worker: a start per task
  o.request_timeout = seconds(120);
  {
    o.python = python_on_a_full_gpu(dir.path(), "2");
    WorkerClient c(o);  // start 1
    auto first = load(c, "linear_relu");
    REQUIRE_MESSAGE(first.value("ok", false), str(first));
    CHECK_FALSE(first.contains("memory_admission"));
    auto second = load(c, "conv_bn");  // start 2 refused; start 3 once no request runs
    REQUIRE_MESSAGE(second.value("ok", false), str(second));
    CHECK(second["memory_admission"] == "alone");
    CHECK(starts_of(dir.path()) == 3);
  }
  std::filesystem::remove(dir.path() + "/starts");
  o.python = python_on_a_full_gpu(dir.path(), "2 3 4 5 6");
  WorkerClient c(o);
  REQUIRE(load(c, "linear_relu").value("ok", false));
  try {
    load(c, "conv_bn");
    FAIL("no exception");
  } catch (const EnvironmentError& e) {
    CHECK(std::string(e.what()).find("no GPU memory on cuda:0") != std::string::npos);
    CHECK(std::string(e.what()).find("CUDA error: out of memory") != std::string::npos);
    CHECK(e.exit_code == 3);
  }
  CHECK(starts_of(dir.path()) == 4);  // refused while shared, then once alone (and its release's start)
}

TEST_CASE("worker: memory shares divide a total among the workers") {
  CHECK(worker_memory_share_mb(8000, 4) == 2000);
  CHECK(worker_memory_share_mb(8000, 0) == 8000);
  CHECK(worker_memory_share_mb(1, 16) == 1);
  const auto one = worker_memory_share_mb(0, 1), sixteen = worker_memory_share_mb(0, 16);
  CHECK(one <= 16384);
  CHECK(sixteen <= one);
  CHECK(sixteen * 16 <= std::max<std::size_t>(one, 16384) * 16);
}

TEST_CASE("worker: similarity of Model classes") {
  auto& c = shared();
  auto a = c.request({{"op", "similarity"}, {"code", fixture("linear_relu")}, {"dir", fixtures()}});
  REQUIRE_MESSAGE(a.value("ok", false), str(a));
  CHECK(a["program"] == "linear_relu.py");
  CHECK(a["max"].get<double>() == doctest::Approx(1.0));
  // Renamed identifiers and other sizes are still the same program; another op is not.
  std::string renamed =
      "import torch\nimport torch.nn as nn\nclass Model(nn.Module):\n"
      "    def __init__(self, a, b):\n        super().__init__()\n        self.fc = nn.Linear(a, b)\n"
      "    def forward(self, inp):\n        return torch.relu(self.fc(inp))\n";
  auto b = c.request({{"op", "similarity"}, {"code", renamed},
                      {"programs", {{{"name", "lr"}, {"code", fixture("linear_relu")}},
                                    {{"name", "sm"}, {"code", fixture("softmax")}},
                                    {{"name", "cb"}, {"code", fixture("conv_bn")}}}}});
  REQUIRE_MESSAGE(b.value("ok", false), str(b));
  CHECK(b["program"] == "lr");
  CHECK(b["max"].get<double>() > 0.9);
  auto s = c.request({{"op", "similarity"}, {"code", fixture("softmax")},
                      {"programs", {{{"name", "cb"}, {"code", fixture("conv_bn")}}}}});
  CHECK(s["max"].get<double>() < 0.9);
}

TEST_CASE("worker: a hang is cut off at the timeout and the next request is served") {
  WorkerOptions o;
  o.request_timeout = seconds(60);
  WorkerClient c(o);
  REQUIRE(load(c, "linear_relu").value("ok", false));
  auto t0 = steady_clock::now();
  auto a = c.request({{"op", "load"}, {"task_id", "hangs"}, {"code", fixture("hangs")}}, seconds(3));
  double took = duration<double>(steady_clock::now() - t0).count();
  CHECK_FALSE(a.value("ok", true));
  CHECK(a["error"] == "timeout");
  CHECK(took < 15);
  // The next request is served by a restarted worker, which reloads linear_relu by itself.
  auto in = c.temp_path("in");
  auto b = c.request({{"op", "inputs"}, {"task_id", "linear_relu"}, {"seed", 0}, {"out", in}});
  CHECK_MESSAGE(b.value("ok", false), str(b));
  CHECK(c.restarts() == 1);
}

TEST_CASE("worker: a worker killed or exited by task code is restarted and the caller answered") {
  WorkerClient c;
  REQUIRE(load(c, "softmax").value("ok", false));
  pid_t first = c.worker_pid();
  auto a = load(c, "kills_worker");
  CHECK_FALSE(a.value("ok", true));
  CHECK(a["error"] == "worker_died");
  CHECK(a["detail"].get<std::string>().find("signal 9") != std::string::npos);
  auto b = c.request({{"op", "ping"}});
  CHECK(b.value("ok", false));
  CHECK(c.worker_pid() != first);
  auto e = load(c, "exits_worker");
  CHECK(e["error"] == "worker_died");
  CHECK(e["detail"].get<std::string>().find("exit 7") != std::string::npos);
  // softmax was loaded before both deaths: replayed transparently.
  auto in = c.temp_path("in");
  CHECK(c.request({{"op", "inputs"}, {"task_id", "softmax"}, {"seed", 3}, {"out", in}}).value("ok", false));
  CHECK(c.restarts() == 2);
}

TEST_CASE("worker: the CPU-time limit ends a spinning task") {
  WorkerOptions o;
  o.cpu_seconds_limit = 2;
  o.request_timeout = seconds(60);
  WorkerClient c(o);
  auto t0 = steady_clock::now();
  auto a = load(c, "hangs");
  double took = duration<double>(steady_clock::now() - t0).count();
  CHECK(a["error"] == "worker_died");
  CHECK(a["detail"].get<std::string>().find("signal 24") != std::string::npos);  // SIGXCPU
  CHECK(took < 30);
  CHECK(c.request({{"op", "ping"}}).value("ok", false));
}

TEST_CASE("worker: the memory limit turns a huge allocation into an error answer") {
  WorkerOptions o;
  o.memory_limit_mb = 3072;
  WorkerClient c(o);
  auto a = load(c, "memory_hog");
  CHECK_FALSE(a.value("ok", true));
  std::string err = a.value("error", std::string());
  MESSAGE("memory_hog answer: ", str(a));
  CHECK((err == "task_error" || err == "memory_limit"));
  if (err == "task_error") CHECK(a["detail"].get<std::string>().find("allocate") != std::string::npos);
  CHECK(load(c, "linear_relu").value("ok", false));
}

TEST_CASE("worker: without torch the client throws EnvironmentError and names it") {
  PrivateTempDir dir("worker-test");
  std::string fake = dir.path() + "/python-without-torch";
  {
    std::ofstream f(fake);
    f << "#!/bin/sh\nexec /usr/bin/python3 -S \"$@\"\n";  // -S: no site-packages, so no torch
  }
  std::filesystem::permissions(fake, std::filesystem::perms::owner_all);
  WorkerOptions o;
  o.python = fake;
  try {
    WorkerClient c(o);
    FAIL("no exception");
  } catch (const EnvironmentError& e) {
    CHECK(std::string(e.what()).find("torch") != std::string::npos);
    CHECK(e.exit_code == 3);
  }
  // The temp dir goes with the client.
  std::string tmp;
  {
    WorkerClient c;
    tmp = c.temp_dir();
    CHECK(std::filesystem::exists(tmp));
  }
  CHECK_FALSE(std::filesystem::exists(tmp));
}

// The tools' requests come from libcommon/worker/requests.hpp: each one is what the worker reads
// (a missing or mistyped field would be "needs field" / "wrong type"); on CPU those that keep
// device tensors are refused for the device alone, and `time` answers no_device.
TEST_CASE("worker: every typed request of requests.hpp is well-formed") {
  auto& c = shared();
  namespace wr = ca::worker::request;
  const Json task{{"code", fixture("linear_relu")}, {"seed", 3}};
  auto well_formed = [](const Json& a, const char* what) {
    INFO(what << ": " << str(a));
    const std::string detail = a.value("detail", std::string());
    CHECK(detail.find("needs field") == std::string::npos);
    CHECK(detail.find("wrong type") == std::string::npos);
    const bool fine = a.value("ok", false) || a.value("error", "") == "no_device" ||
                      (a.value("error", "") == "bad_request" && detail.find("CUDA worker") != std::string::npos);
    CHECK(fine);
  };
  auto loaded = c.request(wr::load("typed", task));
  REQUIRE(loaded.value("ok", false));
  well_formed(c.request(wr::warm(false)), "warm");
  well_formed(c.request(wr::inputs("typed", 7, "typed-in")), "inputs");
  well_formed(c.request(wr::reference("typed", "typed-in", "typed-ref", std::string("typed-params"))), "reference");
  well_formed(c.request(wr::release({"typed-in", "typed-ref"})), "release");
  wr::Time t;
  t.task_id = "typed";
  t.mode = "eager";
  t.precision = "fp32";
  t.metric = "wall";
  t.min_runs = 10;
  t.max_runs = 20;
  t.budget_s = 1;
  t.rel_ci = 0.05;
  auto timed = c.request(t.to_json());
  well_formed(timed, "time");
  CHECK(timed["error"] == "no_device");
  wr::Filters f;
  f.task_id = "typed-f";
  f.code = fixture("linear_relu");
  f.min_ms = 0;
  f.max_ms = 1e6;
  f.check_compile = false;
  auto filtered = c.request(f.to_json());
  well_formed(filtered, "filters");
  CHECK(filtered.value("ok", false));
  auto sim = c.request(wr::similarity(fixture("linear_relu"), fixtures()));
  well_formed(sim, "similarity");
  CHECK(sim.value("ok", false));
  auto unloaded = c.request(wr::unload("typed"));
  well_formed(unloaded, "unload");
  CHECK(unloaded.value("ok", false));
}
