// kernel-prof's two ways of taking records: a stream (stdin to stdout, the pipe's stage) and a
// service (--serve, SERVICE.md). Both time each record with the same Profiler::profile.
#pragma once
#include "libcommon/cli.hpp"
#include "libcommon/service.hpp"
#include "libcommon/store.hpp"
#include "tools/kernel-prof/profiler.hpp"

namespace ca::kernel_prof {

// Records from common.input to common.output through the record path (record_path.hpp); in a pipe whose first record
// is not there yet, the GPU and the worker's one-time costs are paid while it is on the way.
int stream(Profiler& profiler, const CommonOptions& common, Store* store);

// The service: warmed up before it listens, one timing job at a time (one GPU), each request's
// records through one record path; the run row closed with every request's counts.
int serve(Profiler& profiler, const ServiceOptions& service, const CommonOptions& common, Store* store);

}  // namespace ca::kernel_prof
