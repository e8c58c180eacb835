// A streaming tool as a long-lived judge service (kernel-check --serve, kernel-prof --serve): the
// tool's records over HTTP (libcommon/http_server), its state kept between requests. One request
// is a JSON Lines body of input records; the answer is the output records the tool would write on
// stdout for that input. The protocol is in tools/kernel-check/SERVICE.md.
#pragma once
#include <CLI/CLI.hpp>
#include <functional>
#include <string>
#include <vector>

#include "libcommon/cli.hpp"
#include "libcommon/jsonl.hpp"
#include "libcommon/record_loop.hpp"

namespace ca {

struct ServiceOptions {
  std::string address;    // --serve HOST:PORT; empty: the tool streams stdin to stdout as always
  std::string port_file;  // --port-file F: the bound address, written once listening
  double read_timeout_s = 60;
  void register_with(CLI::App& app);
  bool enabled() const { return !address.empty(); }
  // UsageError for options that mean nothing to a service (-i/-o, --shard).
  void validate(const CommonOptions& common) const;
};

struct ServiceSpec {
  std::string tool;      // "kernel-check"
  std::string endpoint;  // "/v1/check"
  Json gpus = Json::array();
  // Judges one request's records, in order, and returns the output records. InputError (a bad
  // record under --strict) becomes a 400; EnvironmentError a 503.
  std::function<std::vector<Json>(std::vector<Line>& lines)> judge;
};

// Binds, writes {"listening":"HOST:PORT"} as the first line on stdout (and the address into
// --port-file), and serves `POST <endpoint>` and `GET /v1/health` until SIGINT, SIGTERM or SIGHUP:
// then it stops accepting, answers the requests already read, and returns 128+signal (a second
// signal ends the process at once, as in every tool). The caller closes its run row with it.
int run_service(const ServiceOptions& options, const ServiceSpec& spec);

}  // namespace ca
