// N reference-worker clients in threads over a record stream, results emitted in input order
// (ops-synth filter -j N, import -j N).
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "libcommon/jsonl.hpp"
#include "libcommon/worker/worker_client.hpp"

namespace ca::ops_synth {

// "auto" -> cuda:0 when a worker can start there, else cpu; "cpu"; "cuda" or "cuda:0,cuda:1".
// Returns one device per job (round robin over the list).
std::vector<std::string> resolve_devices(const std::string& spec, int jobs, double timeout_s);

// Each of `jobs` workers' memory limit from --worker-memory (MiB for all of them together; 0: three
// quarters of the host's memory, at most 16 GiB each): libcommon's worker_memory_share_mb.
std::size_t worker_memory_mb(std::size_t total_mb, int jobs);

struct PoolItem {
  ca::Json record;
  std::string where;   // "line N" for messages
  std::string result;  // what the work function decided (its caller's convention)
  bool bad = false;    // a FieldError made it a bad record
  bool resumed = false;  // decided by an earlier run (--resume): no worker call
};

// libcommon's ordered loop (ordered_loop.hpp) with a WorkerClient per lane: `next` on the reader
// thread until it returns false, `work` on `jobs` threads (each with its own WorkerClient on its
// device, made from `worker`: its timeout, memory share and folders), `emit` on the calling thread
// for every item in input order. An exception from `work` other than FieldError stops everything
// and is rethrown.
void run_pool(int jobs, const std::vector<std::string>& devices, const ca::WorkerOptions& worker,
              const std::function<bool(PoolItem&)>& next,
              const std::function<void(ca::WorkerClient&, PoolItem&)>& work,
              const std::function<void(PoolItem&)>& emit);

}  // namespace ca::ops_synth
