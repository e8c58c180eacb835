// The per-GPU runner child and its client.
#include "tools/kernel-check/runner.hpp"

#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <iostream>
#include <optional>
#include <sstream>

#include "libcommon/bundle/candidate.hpp"
#include "libcommon/bundle/executor.hpp"
#include "libcommon/cuda/driver.hpp"
#include "libcommon/errors.hpp"
#include "libcommon/log.hpp"
#include "libcommon/paths.hpp"
#include "libcommon/safetensors.hpp"

namespace ca::kernel_check {

std::vector<int> parse_gpu_list(const std::string& text, int count) {
  std::vector<int> gpus;
  if (text.empty()) {
    for (int i = 0; i < count; ++i) gpus.push_back(i);
    return gpus;
  }
  std::stringstream ss(text);
  std::string part;
  while (std::getline(ss, part, ',')) {
    try {
      size_t used = 0;
      int g = std::stoi(part, &used);
      if (used != part.size() || g < 0 || g >= count) throw std::out_of_range("gpu");
      gpus.push_back(g);
    } catch (const std::exception&) {
      throw ca::UsageError("--gpus: '" + part + "' is not a GPU index below " + std::to_string(count));
    }
  }
  if (gpus.empty()) throw ca::UsageError("--gpus: no GPU given");
  return gpus;
}

namespace {

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

ca::Json error_answer(const std::string& error, const std::string& detail, bool sticky) {
  return ca::Json{{"ok", false}, {"error", error}, {"detail", detail}, {"sticky", sticky}};
}

}  // namespace

namespace {

// The runner's one candidate: its executor, init's scratch as run_init left it (forward may not
// change it), and the captured forward graph.
struct RunnerState {
  std::unique_ptr<ca::bundle::Executor> ex;
  std::map<std::string, std::string> init_state;
  CUgraphExec graph = nullptr;
  bool candidate_code_ran = false;  // this load has run the candidate's code (load_failure_error)
  void drop() {
    if (graph) ca::cuda::Driver::get().cuGraphExecDestroy(graph);
    graph = nullptr;
    ex.reset();  // its stack growth set back too (Executor::free_resources)
  }
};

// `load`: the candidate bound to the task's tensors, its params uploaded, init run; the answer
// carries its outputs for the parent to compare.
ca::Json runner_load(RunnerState& state, const ca::Json& req, int gpu) {
  state.drop();
  state.candidate_code_ran = false;
  auto& ex = state.ex;
  auto& init_state = state.init_state;
  auto& graph = state.graph;
  auto t0 = std::chrono::steady_clock::now();
  ca::bundle::CompileResult cr;
  cr.ok = true;
  cr.cubin = ca::read_file(req.at("cubin"));
  cr.ptx = ca::read_file(req.at("ptx"));
  for (auto& [k, v] : req.at("lowered").items()) cr.lowered[k] = v.get<std::string>();
  // The candidate path's binding (libcommon/bundle/candidate.hpp), without the rules: the parent's
  // stages applied them to this very plan and these tensors.
  const ca::bundle::Candidate c = ca::bundle::compiled_candidate(ca::Json(req.at("plan")), std::move(cr));
  const ca::bundle::Binding binding = ca::bundle::bind_candidate(
      c, ca::bundle::IoSpec::from_json(req.at("io")), ca::bundle::LaunchLimits::for_arch(ca::cuda::Driver::get().device_info(gpu).arch()),
      nullptr);
  if (binding.refused) return error_answer(binding.refused->status, binding.refused->reason, false);
  ex = std::make_unique<ca::bundle::Executor>(*binding.bound, c.compiled->cubin);
  // Params: the worker's device tensors (mapped, copied and unmapped before any candidate
  // code runs), or a safetensors file.
  if (req.contains("params_ipc")) ex->upload_shared(req["params_ipc"]);
  else if (req.contains("params") && req["params"].is_string()) ex->upload_tensors(ca::read_safetensors(req["params"]).tensors);
  state.candidate_code_ran = true;  // from here, memory it cannot have is the candidate's failure
  ex->run_init();
  init_state = ex->init_scratch_hashes();
  // Capture is a one-time cost: paid here, outside the watchdog of the calls.
  if (req.value("graph", false)) graph = ex->capture_forward();
  // The outputs, for the parent to compare where they are (the reference never comes here).
  return {{"ok", true}, {"init_ms", ms_since(t0)}, {"module_global_bytes", ex->module_global_bytes()},
        {"outputs_ipc", ex->export_outputs()}};
}

// `run`: one call on fresh inputs, from the same state every time; the answer says what it changed
// that it may not (inputs, params, init's scratch, the guard zones).
ca::Json runner_run(RunnerState& state, const ca::Json& req) {
  auto& ex = state.ex;
  auto& init_state = state.init_state;
  auto& graph = state.graph;
  if (!ex) return error_answer("bad_request", "run before load", false);
  uint32_t seed = req.value("guard_seed", 12345u);
  if (req.contains("inputs_ipc")) ex->upload_shared(req["inputs_ipc"]);
  else ex->upload_tensors(ca::read_safetensors(req.at("inputs")).tensors);
  std::vector<std::pair<std::string, std::string>> before;
  for (auto& b : ex->plan().buffers)
    if (b.space == ca::bundle::Space::input || b.space == ca::bundle::Space::param) before.emplace_back(b.ref, ex->hash(b.ref));
  // Every call starts from the same state: forward's scratch poisoned, module globals as loaded.
  ex->reset_call_state(ex->stream());
  ex->poison_outputs(ex->stream());
  ex->fill_guards(seed);
  ex->synchronize();
  auto t0 = std::chrono::steady_clock::now();
  if (req.value("graph", false)) {
    // As kernel-prof times it: the forward captured once per load, replayed per call.
    if (!graph) graph = ex->capture_forward();
    auto& d = ca::cuda::Driver::get();
    d.check(d.cuGraphLaunch(graph, ex->stream()), "cuGraphLaunch");
  } else {
    ex->forward(ex->stream());
  }
  ex->synchronize();
  double forward_ms = ms_since(t0);
  ca::Json changed = ca::Json::array(), guards = ca::Json::array();
  for (auto& [ref, h] : before)
    if (ex->hash(ref) != h) changed.push_back(ref);
  for (auto& g : ex->check_guards(seed)) guards.push_back(g.text());
  ca::Json init_changed = ex->changed_init_scratch(init_state);
  if (req.contains("out")) ca::write_safetensors(req.at("out"), ex->download_outputs());
  return {{"ok", true}, {"forward_ms", forward_ms}, {"inputs_changed", changed}, {"guards", guards},
        {"init_scratch_changed", init_changed}};
}

}  // namespace

std::string load_failure_error(bool candidate_code_ran, int result) {
  return result == CUDA_ERROR_OUT_OF_MEMORY && !candidate_code_ran ? "out_of_memory" : "runtime_error";
}

int runner_main(int gpu) {
  // The protocol gets a private copy of stdout; fd 1 goes to stderr so nothing a kernel or a library
  // prints can corrupt it.
  int proto_fd = dup(1);
  dup2(2, 1);
  FILE* proto = fdopen(proto_fd, "w");
  auto send = [&](const ca::Json& j) {
    std::string line = j.dump() + "\n";
    fwrite(line.data(), 1, line.size(), proto);
    fflush(proto);
  };
  ca::log::set_tool("kernel-check runner " + std::to_string(gpu));
  try {
    auto& d = ca::cuda::Driver::get();
    auto info = d.device_info(gpu);
    d.primary_context(gpu);
    // The kernels every call runs beside a candidate, compiled, checked and run once now: a GPU this
    // judge cannot scrub stops the runner here, before any candidate (a failure at a load or in a call
    // would be that candidate's).
    ca::bundle::start_call_scrubs();
    send({{"ok", true}, {"op", "hello"}, {"gpu", gpu}, {"name", info.name}, {"arch", info.arch()}, {"pid", getpid()}});
  } catch (const std::exception& e) {
    send(error_answer("no_device", e.what(), true));
    return ca::kExitEnvironment;
  }
  RunnerState state;
  std::string line;
  while (std::getline(std::cin, line)) {
    if (line.empty()) continue;
    ca::Json req;
    try {
      req = ca::parse_json(line, "runner request");
    } catch (const std::exception& e) {
      send(error_answer("bad_request", e.what(), false));
      continue;
    }
    std::string op = req.value("op", "");
    try {
      if (op == "load") {
        send(runner_load(state, req, gpu));
      } else if (op == "run") {
        send(runner_run(state, req));
      } else if (op == "unload") {
        state.drop();
        send({{"ok", true}});
      } else if (op == "ping") {
        send({{"ok", true}});
      } else {
        send(error_answer("bad_request", "unknown op '" + op + "'", false));
      }
    } catch (const ca::cuda::CudaError& e) {
      if (e.sticky()) {
        send(error_answer("runtime_error", e.what(), true));
        state.ex.release();  // the context is dead: freeing would fail; the process exits
        return 0;
      }
      // The load's buffers (the scratch within the cap) did not fit beside what the worker holds:
      // the node's capacity, not the candidate's doing. Out of memory once its code ran (a launch's
      // local memory) is its own (load_failure_error); a run's is always its own.
      const std::string error = op == "load" ? load_failure_error(state.candidate_code_ran, e.result) : "runtime_error";
      const bool own_memory = op == "load" && error == "runtime_error" && e.result == CUDA_ERROR_OUT_OF_MEMORY;
      if (op == "load") state.drop();  // a load that failed half-way keeps nothing (its buffers)
      send(error_answer(error, own_memory ? std::string("the candidate's code asked for memory the GPU could not give "
                                                        "(a launch holds its kernel's local memory for every thread the GPU "
                                                        "can run): ") + e.what()
                                          : std::string(e.what()),
                        false));
    } catch (const ca::bundle::PlanError& e) {
      if (op == "load") state.drop();  // a load that failed half-way keeps nothing (its buffers)
      send(error_answer("plan_error", e.what(), false));
    } catch (const ca::bundle::InitChangedParams& e) {  // the candidate's init broke a rule: its verdict
      state.drop();
      send(error_answer("incorrect", e.what(), false));
    } catch (const std::exception& e) {
      if (op == "load") state.drop();
      send(error_answer("runtime_error", e.what(), false));
    }
  }
  return 0;
}

RunnerClient::RunnerClient(int gpu) : gpu_(gpu) {}

void RunnerClient::start() {
  ca::SpawnOptions so;
  // /proc/self/exe, not the path it names: the runner is this very file even when a rebuild or an
  // upgrade replaced the path under a running service (never another version, never "(deleted)").
  so.argv = {"/proc/self/exe", "--runner", "--gpu", std::to_string(gpu_), "--no-store"};
  child_ = std::make_unique<ca::ChildProcess>(so);
  ++restarts_;
  auto hello = child_->read_line(std::chrono::seconds(60));
  if (!hello) {
    child_->kill();
    child_.reset();
    throw ca::EnvironmentError("kernel-check runner for GPU " + std::to_string(gpu_) + " did not start");
  }
  ca::Json h = ca::parse_json(*hello, "runner hello");
  if (!h.value("ok", false)) {
    child_->kill();
    child_.reset();
    throw ca::EnvironmentError("kernel-check runner for GPU " + std::to_string(gpu_) + ": " + h.value("detail", "failed"));
  }
}

void RunnerClient::kill() {
  if (child_) child_->kill();
  child_.reset();
}

ca::Json RunnerClient::request(const ca::Json& req, std::chrono::milliseconds timeout) {
  if (!child_ || !child_->running()) start();
  if (!child_->write(req.dump() + "\n")) {
    kill();
    return error_answer("crashed", "runner gone before the request", true);
  }
  auto line = child_->read_line(timeout);
  if (!line) {
    bool eof = child_->eof();
    // A runner that died on its own is reaped before anything of ours could kill it, so its wait
    // status says what ended it: a SIGKILL then came from outside (the host's OOM killer, an
    // operator). Read from the status itself (WTERMSIG), never from the number 137, which an
    // exit(137) gives as well.
    const std::optional<int> rc = eof ? child_->wait(std::chrono::milliseconds(2000)) : std::nullopt;
    const bool killed_from_outside = rc && child_->term_signal() == SIGKILL;
    child_->kill();
    std::string status = child_->status_text();
    child_.reset();
    if (eof) {
      ca::Json ans = error_answer("crashed", "runner died: " + status, true);
      ans["killed_from_outside"] = killed_from_outside;
      return ans;
    }
    return error_answer("timeout", "no answer within " + std::to_string(timeout.count()) + " ms: killed", true);
  }
  ca::Json ans = ca::parse_json(*line, "runner answer");
  if (!ans.value("ok", false) && ans.value("sticky", false)) {
    child_->wait(std::chrono::seconds(5));
    kill();
  }
  return ans;
}

}  // namespace ca::kernel_check
