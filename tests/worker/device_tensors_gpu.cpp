// GPU test (label gpu): tensors kept by the reference worker and shared by CUDA IPC are the bytes the
// file path gives; the device comparison agrees with the host one on fresh random perturbations of
// every float dtype; a request that ran out of GPU memory beside another client's waits and passes.
#include <doctest/doctest.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <random>
#include <thread>

#include "libcommon/bundle/compare.hpp"
#include "libcommon/cuda/driver.hpp"
#include "libcommon/cuda/ipc.hpp"
#include "libcommon/paths.hpp"
#include "libcommon/safetensors.hpp"
#include "libcommon/worker/worker_client.hpp"

using namespace ca;
using namespace ca::worker;
using namespace std::chrono;

namespace {

std::string fixture(const std::string& name) {
  const char* src = std::getenv("CA_SRC");
  return read_file(std::string(src ? src : ".") + "/tests/worker/fixtures/" + name + ".py");
}

WorkerClient& gpu_worker() {
  static WorkerClient client([] {
    WorkerOptions o;
    o.device = "cuda:0";
    o.request_timeout = seconds(300);
    return o;
  }());
  return client;
}

std::vector<uint8_t> download(CUdeviceptr p, size_t n) {
  auto& d = cuda::Driver::get();
  std::vector<uint8_t> v(n);
  if (n) d.check(d.cuMemcpyDtoH(v.data(), p, n), "download");
  return v;
}

// A device copy of a host tensor, freed with the object.
struct DeviceCopy {
  CUdeviceptr p = 0;
  explicit DeviceCopy(const Tensor& t) {
    auto& d = cuda::Driver::get();
    d.check(d.cuMemAlloc(&p, std::max<size_t>(t.data.size(), 1)), "alloc");
    if (!t.data.empty()) d.check(d.cuMemcpyHtoD(p, t.data.data(), t.data.size()), "upload");
  }
  ~DeviceCopy() { cuda::Driver::get().cuMemFree(p); }
};

// Random values of a float dtype as raw bytes (via float32 -> dtype rounding of the host side).
Tensor random_tensor(const std::string& dtype, size_t n, std::mt19937& rng) {
  std::normal_distribution<float> nd(0, 1);
  Tensor t;
  t.dtype = dtype;
  t.shape = {int64_t(n)};
  t.data.resize(n * Tensor::dtype_size(dtype));
  for (size_t i = 0; i < n; ++i) {
    float f = nd(rng);
    uint32_t u;
    std::memcpy(&u, &f, 4);
    if (dtype == "F32") std::memcpy(&t.data[i * 4], &f, 4);
    else if (dtype == "BF16") {
      uint16_t h = uint16_t(u >> 16);
      std::memcpy(&t.data[i * 2], &h, 2);
    } else if (dtype == "F16") {
      // normal range only: |f| < 65504 and > 2^-14 or zero
      uint32_t s = (u >> 16) & 0x8000, e = (u >> 23) & 0xff, m = (u >> 13) & 0x3ff;
      uint16_t h = e < 113 ? uint16_t(s) : uint16_t(s | ((e - 112) << 10) | m);
      std::memcpy(&t.data[i * 2], &h, 2);
    } else if (dtype == "F64") {
      double v = f;
      std::memcpy(&t.data[i * 8], &v, 8);
    }
  }
  return t;
}

}  // namespace

TEST_CASE("device tensors: kept inputs, references and params are the bytes of the file path") {
  auto& w = gpu_worker();
  auto& d = cuda::Driver::get();
  d.primary_context(0);
  REQUIRE(w.request({{"op", "load"}, {"task_id", "lr"}, {"code", fixture("linear_relu")}}).value("ok", false));
  std::string in_file = w.temp_path("in"), ref_file = w.temp_path("ref"), par_file = w.temp_path("par");
  Json a = w.request({{"op", "inputs"}, {"task_id", "lr"}, {"seed", 17}, {"out", in_file}, {"keep", "t-in"}});
  REQUIRE_MESSAGE(a.value("ok", false), a.dump());
  Json b = w.request({{"op", "reference"}, {"task_id", "lr"}, {"inputs_key", "t-in"}, {"keep", "t-ref"}, {"out", ref_file},
                      {"params_keep", "t-par"}, {"params_out", par_file}});
  REQUIRE_MESSAGE(b.value("ok", false), b.dump());
  auto files_in = read_safetensors(in_file).tensors, files_ref = read_safetensors(ref_file).tensors,
       files_par = read_safetensors(par_file).tensors;
  for (auto [desc, files] : {std::pair{a["tensors"], &files_in}, std::pair{b["tensors"], &files_ref}, std::pair{b["params"], &files_par}}) {
    auto shared = cuda::shared_tensors(desc);
    REQUIRE(shared.size() == files->size());
    cuda::IpcMaps maps;
    for (auto& [name, t] : shared) {
      REQUIRE(files->count(name));
      const Tensor& f = files->at(name);
      CHECK(t.dtype == f.dtype);
      CHECK(t.shape == f.shape);
      REQUIRE(t.bytes == f.data.size());
      CHECK_MESSAGE(download(maps.map(t), t.bytes) == f.data, name);
    }
  }
  // The device comparison of the reference against itself: exact.
  {
    cuda::IpcMaps maps;
    bundle::DeviceOutputs want, got;
    std::vector<std::unique_ptr<DeviceCopy>> copies;
    for (auto& [name, t] : cuda::shared_tensors(b["tensors"])) {
      want[name] = {t.dtype, t.shape, maps.map(t)};
      copies.push_back(std::make_unique<DeviceCopy>(files_ref.at(name)));
      got[name] = {t.dtype, t.shape, copies.back()->p};
    }
    auto r = bundle::compare_outputs_device(got, want, "default", -1, -1, nullptr);
    CHECK(r.ok);
    CHECK(r.max_abs_err == 0);
  }
  Json rel = w.request({{"op", "release"}, {"keys", {"t-in", "t-ref", "t-par"}}});
  CHECK(rel.value("released", 0) == 3);
  CHECK(rel.value("kept_bytes", -1) == 0);
  // A released key is an error the caller can read, not a crash.
  Json gone = w.request({{"op", "reference"}, {"task_id", "lr"}, {"inputs_key", "t-in"}, {"keep", "x"}});
  CHECK_FALSE(gone.value("ok", true));
  CHECK(gone.value("error", std::string()) == "bad_request");
}

TEST_CASE("device comparison with a calibrated slack and allowance agrees with the host one (fresh random values)") {
  // Outputs of ~1e3 with elements near zero, perturbed by up to `off`: under the slack (8 x the
  // reference's largest error against float64) the misses of atol = 1e-2 within it are counted apart
  // from those past it, on the device as on the host (compare.hpp's kMaxSoftMissFraction).
  auto& d = cuda::Driver::get();
  d.primary_context(0);
  std::random_device rd;
  std::mt19937 rng(rd());
  std::normal_distribution<float> g(0.0f, 1.0f);
  for (int round = 0; round < 6; ++round) {
    const size_t n = 50000 + rng() % 200000;
    std::vector<float> want(n), got(n);
    for (size_t i = 0; i < n; ++i) want[i] = (i % 97 == 0 ? 0.2f : 1000.0f) * g(rng);  // ~1% near zero
    const float off = round < 2 ? 0.02f : round < 4 ? 0.06f : 0.5f;
    for (size_t i = 0; i < n; ++i) got[i] = want[i] + off * g(rng);
    Json cal = {{"outputs.0", {{"precision", "fp32"}, {"ref_err_rel_l2", 1e-4}, {"fp32_err_rel_l2", 1e-4},
                               {"fp32_err_max_abs", 5e-3}, {"fp32_elementwise_misses", round % 2 ? 3 : 0}}}};
    const auto tols = bundle::Tolerances::calibrated("fp32", cal);
    Tensor tw, tg;
    tw.dtype = tg.dtype = "F32";
    tw.shape = tg.shape = {static_cast<int64_t>(n)};
    tw.data.resize(n * 4);
    tg.data.resize(n * 4);
    std::memcpy(tw.data.data(), want.data(), n * 4);
    std::memcpy(tg.data.data(), got.data(), n * 4);
    auto host = bundle::compare_outputs(TensorMap{{"outputs.0", tg}}, TensorMap{{"outputs.0", tw}}, tols);
    DeviceCopy dg(tg), dw(tw);
    bundle::DeviceOutputs gd{{"outputs.0", {"F32", tg.shape, dg.p}}}, wd{{"outputs.0", {"F32", tw.shape, dw.p}}};
    auto dev = bundle::compare_outputs_device(gd, wd, tols, nullptr);
    INFO("round ", round, " n ", n, " off ", off, ": host ", host.reason, " | device ", dev.reason);
    CHECK(host.ok == dev.ok);
    CHECK(host.reason == dev.reason);
    CHECK(host.mismatch_fraction == dev.mismatch_fraction);
    // The same record but for the norm's last digits (the device sums its squares in another order).
    Json th = host.to_json()["tolerance"], td = dev.to_json()["tolerance"];
    CHECK(th["measured_rel_l2"].get<double>() == doctest::Approx(td["measured_rel_l2"].get<double>()).epsilon(1e-9));
    th.erase("measured_rel_l2");
    td.erase("measured_rel_l2");
    CHECK(th == td);
    CHECK(host.to_json()["tolerance"]["elementwise_slack"]["outputs.0"]["slack"].get<double>() == doctest::Approx(0.04));
    // 0.02 off: near-zero elements miss atol within the slack, on ~1% or less (passes or fails by the
    // count of those); 0.5 off: past the slack on many elements, fails.
    if (off > 0.4f) CHECK_FALSE(dev.ok);
  }
}

TEST_CASE("device comparison agrees with the host one (fresh random perturbations, every float dtype)") {
  auto& d = cuda::Driver::get();
  d.primary_context(0);
  std::random_device rd;
  std::mt19937 rng(rd());
  for (const std::string dtype : {"F32", "F16", "BF16", "F64"}) {
    for (int round = 0; round < 6; ++round) {
      const size_t n = 1000 + rng() % 300000;
      Tensor want = random_tensor(dtype, n, rng), got = random_tensor(dtype, n, rng);
      // round 0: identical; 1: a few far elements; 2: NaN at a random place; 3: zeros (norm bound);
      // 4: small noise everywhere (passes); 5: -inf where the reference is finite.
      const size_t es = Tensor::dtype_size(dtype);
      if (round != 3) got.data = want.data;
      if (round == 1)
        for (int k = 0; k < 5; ++k) {
          size_t i = rng() % n;
          std::memcpy(&got.data[i * es], &got.data[((i + 1) % n) * es], es);
        }
      if (round == 2 || round == 5) {
        size_t i = rng() % n;
        if (round == 2) std::memset(&got.data[i * es], 0xFF, es);
        else {
          double v = -INFINITY;
          if (dtype == "F32") { float f = float(v); std::memcpy(&got.data[i * es], &f, 4); }
          else if (dtype == "F64") std::memcpy(&got.data[i * es], &v, 8);
          else { uint16_t h = dtype == "F16" ? 0xFC00 : 0xFF80; std::memcpy(&got.data[i * es], &h, 2); }
        }
      }
      if (round == 3) std::fill(got.data.begin(), got.data.end(), 0);
      if (round == 4) {
        Tensor noise = random_tensor("F32", n, rng);
        std::vector<double> w(n);
        to_doubles(want, 0, n, w.data());
        for (size_t i = 0; i < n; ++i) {
          float nf;
          std::memcpy(&nf, &noise.data[i * 4], 4);
          float v = float(w[i] + 1e-3 * nf);
          uint32_t u;
          std::memcpy(&u, &v, 4);
          if (dtype == "F32") std::memcpy(&got.data[i * 4], &v, 4);
          else if (dtype == "F64") { double dv = v; std::memcpy(&got.data[i * 8], &dv, 8); }
          else if (dtype == "BF16") { uint16_t h = uint16_t(u >> 16); std::memcpy(&got.data[i * 2], &h, 2); }
          else std::memcpy(&got.data[i * 2], &want.data[i * 2], 2);  // F16: exact (no rounding helper here)
        }
      }
      TensorMap hg{{"outputs.0", got}}, hw{{"outputs.0", want}};
      auto host = bundle::compare_outputs(hg, hw, "default", -1, -1);
      DeviceCopy dg(got), dw(want);
      bundle::DeviceOutputs g{{"outputs.0", {dtype, got.shape, dg.p}}}, wv{{"outputs.0", {dtype, want.shape, dw.p}}};
      auto dev = bundle::compare_outputs_device(g, wv, "default", -1, -1, nullptr);
      INFO(dtype, " round ", round, " n ", n, ": host ", host.reason, " | device ", dev.reason);
      CHECK(host.ok == dev.ok);
      CHECK(host.reason == dev.reason);
      CHECK(host.mismatch_fraction == dev.mismatch_fraction);
      CHECK(host.max_abs_err == doctest::Approx(dev.max_abs_err).epsilon(1e-12));
      CHECK(host.max_rel_err == doctest::Approx(dev.max_rel_err).epsilon(1e-12));
      CHECK(host.rel_l2_err == doctest::Approx(dev.rel_l2_err).epsilon(1e-9));
      if (round == 0 || round == 4) CHECK(dev.ok);
      else CHECK_FALSE(dev.ok);
    }
  }
}

TEST_CASE("device tensors: draw_trial keeps the inputs, the reference and the params of one seed") {
  auto& w = gpu_worker();
  cuda::Driver::get().primary_context(0);
  REQUIRE(w.request({{"op", "load"}, {"task_id", "lr"}, {"code", fixture("linear_relu")}}).value("ok", false));
  Trial t = draw_trial(w, "lr", 17, {"dt-in", "dt-ref", std::string("dt-par")});
  REQUIRE_MESSAGE(t.ok(), t.answer.dump());
  CHECK(t.forward_ms > 0);
  // The same seed through the file path: the drawn inputs and reference are those bytes.
  std::string in_file = w.temp_path("in"), ref_file = w.temp_path("ref");
  REQUIRE(w.request({{"op", "inputs"}, {"task_id", "lr"}, {"seed", 17}, {"out", in_file}}).value("ok", false));
  REQUIRE(w.request({{"op", "reference"}, {"task_id", "lr"}, {"inputs_key", "dt-in"}, {"out", ref_file}}).value("ok", false));
  auto files_in = read_safetensors(in_file).tensors, files_ref = read_safetensors(ref_file).tensors;
  cuda::IpcMaps maps;
  for (auto [desc, files] : {std::pair{t.inputs, &files_in}, std::pair{t.reference, &files_ref}}) {
    auto shared = cuda::shared_tensors(desc);
    REQUIRE(shared.size() == files->size());
    for (auto& [name, st] : shared) {
      REQUIRE(files->count(name));
      REQUIRE(st.bytes == files->at(name).data.size());
      CHECK_MESSAGE(download(maps.map(st), st.bytes) == files->at(name).data, name);
    }
  }
  CHECK(cuda::shared_tensors(t.params).size() >= 2);  // the Linear's weight and bias
  Json rel = w.request({{"op", "release"}, {"keys", {"dt-in", "dt-ref", "dt-par"}}});
  CHECK(rel.value("released", 0) == 3);
  // An unknown task fails at its first request, and the draw says which.
  Trial bad = draw_trial(w, "no_such_task", 1, {"dt-in", "dt-ref", std::nullopt});
  CHECK(bad.failed == "inputs");
}

TEST_CASE("device tensors: a 2.5 GiB input and its reference travel without a file") {
  auto& w = gpu_worker();
  cuda::Driver::get().primary_context(0);
  const char* code = R"(
import torch
class Model(torch.nn.Module):
    def forward(self, x):
        return torch.relu(x)
def get_inputs():
    return [torch.randn(671088640)]
def get_init_inputs():
    return []
)";
  REQUIRE(w.request({{"op", "load"}, {"task_id", "big"}, {"code", code}}).value("ok", false));
  auto t0 = steady_clock::now();
  Json a = w.request({{"op", "inputs"}, {"task_id", "big"}, {"seed", 3}, {"keep", "b-in"}});
  REQUIRE_MESSAGE(a.value("ok", false), a.dump().substr(0, 600));
  Json b = w.request({{"op", "reference"}, {"task_id", "big"}, {"inputs_key", "b-in"}, {"keep", "b-ref"}});
  REQUIRE_MESSAGE(b.value("ok", false), b.dump().substr(0, 600));
  double s = duration<double>(steady_clock::now() - t0).count();
  MESSAGE("2.5 GiB inputs + reference kept on the device in ", s, " s");
  auto in = cuda::shared_tensors(a["tensors"]).at("inputs.0");
  auto ref = cuda::shared_tensors(b["tensors"]).at("outputs.0");
  CHECK(in.bytes == size_t(671088640) * 4);
  cuda::IpcMaps maps;
  // relu(x) against x itself: fails exactly where x < 0 (about half), and the first such element is named.
  bundle::DeviceOutputs got{{"outputs.0", {"F32", in.shape, maps.map(in)}}}, want{{"outputs.0", {"F32", ref.shape, maps.map(ref)}}};
  auto r = bundle::compare_outputs_device(got, want, "default", -1, -1, nullptr);
  CHECK_FALSE(r.ok);
  CHECK(r.mismatch_fraction == doctest::Approx(0.5).epsilon(0.01));
  auto same = bundle::compare_outputs_device(want, want, "default", -1, -1, nullptr);
  CHECK(same.ok);
  maps.close();
  CHECK(w.request({{"op", "release"}, {"keys", {"b-in", "b-ref"}}, {"empty_cache", true}}).value("released", 0) == 2);
}

TEST_CASE("GPU memory admission: a load that ran out of memory beside another client's work waits and passes") {
  // Two clients on one GPU, each needing about 60% of its memory for a moment: run together, one of
  // them runs out; the client's admission makes it wait for the device and run alone.
  auto& d = cuda::Driver::get();
  d.primary_context(0);
  size_t free_b = 0, total_b = 0;
  d.check(d.cuMemGetInfo(&free_b, &total_b), "cuMemGetInfo");
  const int64_t elems = int64_t(double(free_b) * 0.6 / 4);
  std::string code = "import torch, time\n"
                     "class Model(torch.nn.Module):\n"
                     "    def forward(self, x):\n"
                     "        y = torch.empty(" + std::to_string(elems) + ", device=x.device)\n"
                     "        torch.cuda.synchronize(); time.sleep(6)\n"
                     "        return x * 2\n"
                     "def get_inputs():\n    return [torch.randn(16)]\n"
                     "def get_init_inputs():\n    return []\n";
  Json answers[2];
  std::vector<std::unique_ptr<WorkerClient>> clients;
  for (int k = 0; k < 2; ++k) {  // both started (import torch) before either asks
    WorkerOptions o;
    o.device = "cuda:0";
    o.request_timeout = seconds(300);
    clients.push_back(std::make_unique<WorkerClient>(o));
  }
  auto run = [&](int k) { answers[k] = clients[k]->request({{"op", "load"}, {"task_id", "hog" + std::to_string(k)}, {"code", code}}); };
  std::thread t0(run, 0), t1(run, 1);
  t0.join();
  t1.join();
  for (auto& a : answers) CHECK_MESSAGE(a.value("ok", false), a.dump().substr(0, 600));
  int alone = int(answers[0].contains("memory_admission")) + int(answers[1].contains("memory_admission"));
  MESSAGE("admission: ", alone, " of 2 loads waited to run alone");
  CHECK(alone == 1);
}
