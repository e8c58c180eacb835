// N reference-worker clients, one per lane of the record path (ops-synth filter -j N, import -j N).
#pragma once
#include <functional>
#include <memory>
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

// The per-lane setup of a record path with `jobs` lanes (record_path.hpp): one WorkerClient per
// lane on its device, made from `worker` (its timeout, memory share and folders), all started at
// once before any record is read, so a missing torch or GPU is reported once, before any work.
std::vector<std::unique_ptr<ca::worker::WorkerClient>> start_workers(int jobs, const std::vector<std::string>& devices,
                                                                     const ca::worker::WorkerOptions& worker);

// A task record's `reference` section (worker::request::reference_section, or {"mode"} alone without a
// worker) merged into the one it has (its other keys kept), and the top-level `stochastic` that
// older readers of v1 records take: the same measurement, written from the same value.
void set_reference(ca::Json& rec, const ca::Json& reference);

}  // namespace ca::ops_synth
