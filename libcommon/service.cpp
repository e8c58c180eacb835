// The judge service around a tool's record handling (see service.hpp).
#include "libcommon/service.hpp"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <iostream>

#include "libcommon/errors.hpp"
#include "libcommon/http_server.hpp"
#include "libcommon/log.hpp"
#include "libcommon/paths.hpp"
#include "libcommon/signals.hpp"
#include "ca/version.hpp"

namespace ca {

void ServiceOptions::register_with(CLI::App& app) {
  app.add_option("--serve", address,
                 "Run as a long-lived service on HOST:PORT (port 0 picks one; the address is the first line on "
                 "stdout as {\"listening\":...}); see SERVICE.md")
      ->group("Service");
  app.add_option("--port-file", port_file, "With --serve: write the bound HOST:PORT into this file once listening")
      ->group("Service");
  app.add_option("--read-timeout-s", read_timeout_s, "With --serve: drop a client that sends nothing for this long")
      ->group("Service")
      ->check(CLI::PositiveNumber);
}

void ServiceOptions::validate(const CommonOptions& common) const {
  if (!enabled()) {
    if (!port_file.empty()) throw UsageError("--port-file needs --serve");
    return;
  }
  if ((common.input != "-" && !common.input.empty()) || (common.output != "-" && !common.output.empty()))
    throw UsageError("--serve reads its records from requests: -i/-o have no meaning there");
  if (!common.shard_text.empty() && !Shard::parse(common.shard_text).is_whole())
    throw UsageError("--serve judges every record it is sent: --shard has no meaning there");
}

int run_service(const ServiceOptions& options, const ServiceSpec& spec) {
  http::ServerOptions so;
  so.address = options.address;
  so.read_timeout_s = options.read_timeout_s;
  http::Server server(so);
  const std::string address = server.bound_address();
  const auto started = std::chrono::steady_clock::now();

  server.route("POST", spec.endpoint, [&](const http::Request& request) {
    std::vector<Line> lines = parse_lines(request.body);  // a bad line: InputError, 400, nothing judged
    http::Response response;
    response.body = dump_lines(spec.judge(lines));
    return response;
  });
  server.route(
      "GET", "/v1/health",
      [&](const http::Request&) {
        http::Response response;
        response.content_type = "application/json";
        Json health = {{"ok", true},
                       {"tool", spec.tool},
                       {"version", std::string(kVersion) + " (" + kGitRevision + ")"},
                       {"endpoint", spec.endpoint},
                       {"gpus", spec.gpus},
                       {"queue", server.queued()},
                       {"served", server.served()},
                       {"uptime_s", std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count()},
                       {"pid", static_cast<int64_t>(::getpid())}};
        response.body = health.dump() + "\n";
        return response;
      },
      false);

  std::atomic<int> stopped_by{0};
  signals::set_graceful_handler([&](int sig) {
    stopped_by = sig;
    log::info("stopping: no new requests; answering the ", server.queued(), " in flight");
    server.stop();
  });
  struct Unset {
    ~Unset() { signals::set_graceful_handler(nullptr); }
  } unset;

  if (!options.port_file.empty()) write_file_atomic(options.port_file, address + "\n");
  RecordWriter out("-");
  out.write(Json{{"listening", address}});
  log::info("serving ", spec.endpoint, " and /v1/health on ", address, spec.gpus.empty() ? "" : " (GPUs " + spec.gpus.dump() + ")");
  server.serve();
  const int sig = stopped_by.load();
  log::info("stopped after ", server.served(), " request", server.served() == 1 ? "" : "s");
  return sig ? 128 + sig : kExitOk;
}

}  // namespace ca
