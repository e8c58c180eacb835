// worker-ping: a tiny driver of ca::worker::WorkerClient for tests and debugging: JSON request lines on
// stdin, one answer line each on stdout (ids added by the client). Exit 3 when no torch/device.
#include <cstdio>
#include <cstring>
#include <iostream>
#include <string>

#include "libcommon/errors.hpp"
#include "libcommon/jsonl.hpp"
#include "libcommon/child_main.hpp"
#include "libcommon/log.hpp"
#include "libcommon/paths.hpp"
#include "libcommon/worker/worker_client.hpp"

static const char* kUsage =
    "usage: worker-ping [--device cpu|cuda:N] [--timeout-ms N] [--cpu-seconds S] [--memory-mb M]\n"
    "                   [--read-dir DIR]... [--write-dir DIR]... [--output-cap BYTES] [--unconfined]\n"
    "                   [--one-task-per-process] < requests.jsonl\n"
    "Sends each JSON request line to the reference worker (python3 -m cuda_agent_worker) and prints\n"
    "each answer line. Example:\n"
    "  echo '{\"op\":\"ping\"}' | worker-ping --device cpu\n"
    "A request {\"op\":\"load\",\"task_id\":\"t\",\"code_file\":\"model.py\"} reads its code from the file.\n"
    "Task code is confined: --read-dir and --write-dir open more folders to it (requests' \"out\" files\n"
    "outside the client's own folder need --write-dir). \"hello\" as the op prints the worker's hello\n"
    "with the client's temp_dir and spawns (worker processes started so far).\n";

int main(int argc, char** argv) {
  // The worker's sandbox launcher is this program again (libcommon/worker/namespace_sandbox.hpp).
  if (ca::ChildMain child = ca::child_main_for(argc, argv)) return child();
  ca::log::set_tool("worker-ping");
  ca::worker::WorkerOptions opt;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "worker-ping: %s needs a value\n%s", a.c_str(), kUsage);
        std::exit(1);
      }
      return argv[++i];
    };
    if (a == "--help" || a == "-h") {
      std::fputs(kUsage, stdout);
      return 0;
    } else if (a == "--device") {
      opt.device = value();
    } else if (a == "--timeout-ms") {
      opt.request_timeout = std::chrono::milliseconds(std::stoll(value()));
    } else if (a == "--cpu-seconds") {
      opt.cpu_seconds_limit = std::stod(value());
    } else if (a == "--memory-mb") {
      opt.memory_limit_mb = std::stoull(value());
    } else if (a == "--read-dir") {
      opt.read_dirs.push_back(value());
    } else if (a == "--write-dir") {
      opt.write_dirs.push_back(value());
    } else if (a == "--output-cap") {
      opt.output_cap_bytes = std::stoull(value());
    } else if (a == "--unconfined") {
      opt.confine = false;
    } else if (a == "--one-task-per-process") {
      opt.one_task_per_process = true;
    } else if (a == "-v") {
      ca::log::set_level(ca::log::kVerbose);
    } else {
      std::fprintf(stderr, "worker-ping: unknown option '%s'\n%s", a.c_str(), kUsage);
      return 1;
    }
  }
  try {
    ca::worker::WorkerClient client(opt);
    std::string line;
    int64_t n = 0;
    while (std::getline(std::cin, line)) {
      ++n;
      if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
      ca::Json req;
      try {
        req = ca::Json::parse(line);
      } catch (const std::exception& e) {
        throw ca::InputError("line " + std::to_string(n) + ": not JSON: " + e.what());
      }
      if (req.value("op", "") == "hello") {
        ca::Json h = client.hello();
        h["temp_dir"] = client.temp_dir();
        h["spawns"] = client.spawns();
        h["log_tail"] = client.log_tail(4000);
        std::cout << h.dump() << std::endl;
        continue;
      }
      if (req.contains("code_file")) {
        req["code"] = ca::read_file(req["code_file"].get<std::string>());
        req.erase("code_file");
      }
      std::cout << client.request(req).dump() << std::endl;
    }
    return 0;
  } catch (const ca::Error& e) {
    std::fprintf(stderr, "worker-ping: %s\n", e.what());
    return e.exit_code;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "worker-ping: internal error: %s\n", e.what());
    return 4;
  }
}
