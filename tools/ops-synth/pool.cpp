// The reference workers, one per lane of the record path (see pool.hpp).
#include "tools/ops-synth/pool.hpp"

#include <algorithm>
#include <cstdlib>
#include <exception>
#include <memory>
#include <sstream>
#include <thread>

#include "libcommon/errors.hpp"
#include "libcommon/log.hpp"

namespace ca::ops_synth {

std::vector<std::string> resolve_devices(const std::string& spec, int jobs, double timeout_s) {
  std::vector<std::string> list;
  if (spec == "auto") {
    try {
      ca::worker::WorkerOptions o;
      o.device = "cuda:0";
      o.start_timeout = std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000));
      ca::worker::WorkerClient probe(o);
      list.push_back("cuda:0");
    } catch (const ca::EnvironmentError& e) {
      ca::log::verbose("no GPU worker (", e.what(), "): filtering on the CPU");
      list.push_back("cpu");
    }
  } else {
    std::string item;
    std::stringstream ss(spec == "cuda" ? std::string("cuda:0") : spec);
    while (std::getline(ss, item, ','))
      if (!item.empty()) list.push_back(item);
  }
  if (list.empty()) throw ca::UsageError("--device: empty list");
  std::vector<std::string> out;
  for (int i = 0; i < jobs; ++i) out.push_back(list[static_cast<std::size_t>(i) % list.size()]);
  return out;
}

std::size_t worker_memory_mb(std::size_t total_mb, int jobs) { return ca::worker::worker_memory_share_mb(total_mb, jobs); }

std::vector<std::unique_ptr<ca::worker::WorkerClient>> start_workers(int jobs, const std::vector<std::string>& devices,
                                                                     const ca::worker::WorkerOptions& worker) {
  if (jobs < 1) throw ca::UsageError("-j must be at least 1");
  // The workers are the parallelism: each gets one share of the cores for torch's CPU threads (input
  // draws run on the CPU), and one inductor compile thread instead of a pool of processes per core
  // (jobs x cores processes on a node). Values already in the environment win.
  if (jobs > 1) {
    setenv("TORCHINDUCTOR_COMPILE_THREADS", "1", 0);
    const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
    setenv("OMP_NUM_THREADS", std::to_string(std::max(1u, cores / unsigned(jobs))).c_str(), 0);
  }
  // All at once, because each takes seconds (Python imports torch and opens the GPU): one after the
  // other, 32 workers spent two minutes starting.
  std::vector<std::unique_ptr<ca::worker::WorkerClient>> clients(static_cast<std::size_t>(jobs));
  std::vector<std::exception_ptr> start_errors(static_cast<std::size_t>(jobs));
  std::vector<std::thread> starters;
  for (int i = 0; i < jobs; ++i)
    starters.emplace_back([&, i] {
      try {
        ca::worker::WorkerOptions o = worker;
        o.device = devices[static_cast<std::size_t>(i)];
        clients[static_cast<std::size_t>(i)] = std::make_unique<ca::worker::WorkerClient>(o);
      } catch (...) {
        start_errors[static_cast<std::size_t>(i)] = std::current_exception();
      }
    });
  for (auto& t : starters) t.join();
  for (auto& e : start_errors)
    if (e) std::rethrow_exception(e);
  ca::log::verbose(jobs, " worker(s), torch ", clients[0]->hello().value("torch_version", "?"), " on ", devices[0]);
  return clients;
}

void set_reference(ca::Json& rec, const ca::Json& reference) {
  ca::Json section = rec.contains("reference") && rec["reference"].is_object() ? ca::Json(rec["reference"]) : ca::Json::object();
  for (auto& [k, v] : reference.items()) section[k] = v;
  if (section.contains("stochastic")) rec["stochastic"] = ca::Json(section["stochastic"]);
  rec["reference"] = std::move(section);
}

}  // namespace ca::ops_synth
