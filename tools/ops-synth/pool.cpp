// The ordered worker pool: a bounded queue in, a reorder buffer out.
#include "tools/ops-synth/pool.hpp"

#include <algorithm>
#include <condition_variable>
#include <cstdlib>
#include <deque>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <thread>

#include "libcommon/errors.hpp"
#include "libcommon/log.hpp"

namespace ca::ops_synth {

std::vector<std::string> resolve_devices(const std::string& spec, int jobs, double timeout_s) {
  std::vector<std::string> list;
  if (spec == "auto") {
    try {
      ca::WorkerOptions o;
      o.device = "cuda:0";
      o.start_timeout = std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000));
      ca::WorkerClient probe(o);
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

void run_pool(int jobs, const std::vector<std::string>& devices, double timeout_s,
              const std::function<bool(PoolItem&)>& next, const std::function<void(ca::WorkerClient&, PoolItem&)>& work,
              const std::function<void(PoolItem&)>& emit) {
  if (jobs < 1) throw ca::UsageError("-j must be at least 1");
  std::mutex mutex;
  std::condition_variable queue_cv, done_cv;
  std::deque<PoolItem> queue;
  std::map<int64_t, PoolItem> done;
  bool input_finished = false, stop = false;
  std::exception_ptr failure;
  const std::size_t max_queue = static_cast<std::size_t>(jobs) * 2;

  // The workers are the parallelism: each gets one share of the cores for torch's CPU threads (input
  // draws run on the CPU), and one inductor compile thread instead of a pool of processes per core
  // (jobs x cores processes on a node). Values already in the environment win.
  if (jobs > 1) {
    setenv("TORCHINDUCTOR_COMPILE_THREADS", "1", 0);
    const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
    setenv("OMP_NUM_THREADS", std::to_string(std::max(1u, cores / unsigned(jobs))).c_str(), 0);
  }
  // Start every client first, so a missing torch or GPU is reported once, before any work; all at
  // once, because each takes seconds (Python imports torch and opens the GPU): one after the other,
  // 32 workers spent two minutes starting.
  std::vector<std::unique_ptr<ca::WorkerClient>> clients(static_cast<std::size_t>(jobs));
  {
    std::vector<std::exception_ptr> start_errors(static_cast<std::size_t>(jobs));
    std::vector<std::thread> starters;
    for (int i = 0; i < jobs; ++i)
      starters.emplace_back([&, i] {
        try {
          ca::WorkerOptions o;
          o.device = devices[static_cast<std::size_t>(i)];
          o.request_timeout = std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000));
          clients[static_cast<std::size_t>(i)] = std::make_unique<ca::WorkerClient>(o);
        } catch (...) {
          start_errors[static_cast<std::size_t>(i)] = std::current_exception();
        }
      });
    for (auto& t : starters) t.join();
    for (auto& e : start_errors)
      if (e) std::rethrow_exception(e);
  }
  if (!clients.empty())
    ca::log::verbose(jobs, " worker(s), torch ", clients[0]->hello().value("torch_version", "?"), " on ",
                     devices[0]);

  std::vector<std::thread> threads;
  for (int t = 0; t < jobs; ++t) {
    threads.emplace_back([&, t] {
      for (;;) {
        PoolItem item;
        {
          std::unique_lock<std::mutex> lock(mutex);
          queue_cv.wait(lock, [&] { return stop || !queue.empty() || input_finished; });
          if (stop || (queue.empty() && input_finished)) return;
          item = std::move(queue.front());
          queue.pop_front();
        }
        queue_cv.notify_all();
        done_cv.notify_all();  // the reader waits on queue room as well
        try {
          work(*clients[static_cast<std::size_t>(t)], item);
        } catch (...) {
          std::lock_guard<std::mutex> lock(mutex);
          if (!failure) failure = std::current_exception();
          stop = true;
          queue_cv.notify_all();
          done_cv.notify_all();
          return;
        }
        {
          std::lock_guard<std::mutex> lock(mutex);
          done.emplace(item.index, std::move(item));
        }
        done_cv.notify_all();
      }
    });
  }

  int64_t next_emit = 0, read = 0;
  // From `next` (a fatal input line): the items read before it are still judged and emitted, then
  // it is rethrown. From `work` or `emit` (`failure`): everything stops at once.
  std::exception_ptr input_failure;
  auto drain = [&](bool wait_all) {
    for (;;) {
      PoolItem item;
      {
        std::unique_lock<std::mutex> lock(mutex);
        if (wait_all)
          done_cv.wait(lock, [&] { return stop || done.count(next_emit) || next_emit >= read; });
        if (stop || next_emit >= read || !done.count(next_emit)) return;
        auto it = done.find(next_emit);
        item = std::move(it->second);
        done.erase(it);
      }
      ++next_emit;
      emit(item);
    }
  };
  try {
    for (;;) {
      PoolItem item;
      item.index = read;
      try {
        if (!next(item)) break;
      } catch (...) {
        input_failure = std::current_exception();
        break;
      }
      // Backpressure: at most 2 items per job queued and a bounded reorder buffer; emit what is
      // ready while waiting for room.
      for (;;) {
        drain(false);
        std::unique_lock<std::mutex> lock(mutex);
        auto room = [&] { return stop || (queue.size() < max_queue && done.size() < max_queue * 8); };
        if (room()) break;
        done_cv.wait(lock, [&] { return room() || done.count(next_emit); });
      }
      {
        std::lock_guard<std::mutex> lock(mutex);
        if (stop) break;
        queue.push_back(std::move(item));
        ++read;
      }
      queue_cv.notify_all();
      drain(false);
    }
  } catch (...) {
    std::lock_guard<std::mutex> lock(mutex);
    if (!failure) failure = std::current_exception();
    stop = true;
  }
  {
    std::lock_guard<std::mutex> lock(mutex);
    input_finished = true;
  }
  queue_cv.notify_all();
  while (true) {
    {
      std::lock_guard<std::mutex> lock(mutex);
      if (stop || next_emit >= read) break;
    }
    drain(true);
  }
  {
    std::lock_guard<std::mutex> lock(mutex);
    stop = true;
  }
  queue_cv.notify_all();
  for (auto& th : threads) th.join();
  if (failure) std::rethrow_exception(failure);
  if (input_failure) std::rethrow_exception(input_failure);
}

}  // namespace ca::ops_synth
