// A streaming tool as a long-lived judge service (kernel-check --serve, kernel-prof --serve): the
// tool's records over HTTP (libcommon/http_server), its state kept between requests. One request
// is a JSON Lines body of input records; the answer is the output records the tool would write on
// stdout for that input. The protocol and the security model are in tools/kernel-check/SERVICE.md.
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "libcommon/cli.hpp"
#include "libcommon/jsonl.hpp"
#include "libcommon/record_loop.hpp"
#include "libcommon/task_lookup.hpp"

namespace ca {

// The environment variable a service and agent-run --judge read the shared secret from when no
// file is given.
inline constexpr const char* kJudgeSecretEnv = "CA_JUDGE_SECRET";

// The shared secret: the file's first line (the file must not be readable by group or others), else
// $CA_JUDGE_SECRET, else empty. UsageError for an unreadable, open or too short one (16 characters
// at least: `openssl rand -hex 32 > FILE`). `option` names the flag in messages.
std::string read_judge_secret(const std::string& secret_file, const std::string& option = "--secret-file");

struct ServiceOptions {
  std::string address;    // --serve HOST:PORT, :PORT or PORT; empty: the tool streams stdin to stdout as always
  std::string port_file;  // --port-file F: the bound address, written once listening
  bool make_public = false;      // --public: a non-loopback address, on purpose (needs a secret)
  std::string secret_file;       // --secret-file F (else $CA_JUDGE_SECRET)
  bool accept_tasks = false;     // --accept-tasks: run task code that clients send (verified by its id)
  int max_queue = 64;            // --max-queue: requests waiting beyond those running (then 503)
  double read_timeout_s = 60;
  std::string secret;            // read by validate()
  void register_with(CLI::App& app);
  bool enabled() const { return !address.empty(); }
  // UsageError for options that mean nothing to a service (-i/-o, --shard), --public without a
  // secret, a bad secret file. Reads the secret.
  void validate(const CommonOptions& common);
  // Where a record's task may come from: the client only with --accept-tasks, and then checked
  // against its task_id; a stream trusts its input.
  ClientTasks client_tasks() const { return !enabled() ? ClientTasks::trusted : accept_tasks ? ClientTasks::verified : ClientTasks::refused; }
};

struct ServiceSpec {
  std::string tool;      // "kernel-check"
  std::string endpoint;  // "/v1/check"
  Json gpus = Json::array();
  // Work requests run at once (the rest wait, up to --max-queue, then 503); 0: no bound.
  int max_running = 0;
  // Non-empty: why the service cannot do its work now (no GPU): health answers 503 with it, so a
  // client's pool skips this service. (Whether a request is refused too is judge's call.)
  std::function<std::string()> unavailable;
  // Judges one request's records, in order, and returns the output records. InputError (a bad
  // record under --strict) becomes a 400; EnvironmentError a 503. `cancelled()` turns true once
  // the client has gone: records not yet started need not be judged.
  std::function<std::vector<Json>(std::vector<Line>& lines, const std::function<bool()>& cancelled)> judge;
};

// Values a request body may hold (every object, array and scalar, counted before parsing): the
// parse's memory is bounded by the body's size and this, whatever its shape.
inline constexpr int64_t kMaxRequestValues = int64_t(1) << 20;
// The values a JSON text would parse into (an upper bound), stopping once past `limit`.
int64_t count_json_values(const std::string& text, int64_t limit);

// Binds, writes {"listening":"HOST:PORT"} as the first line on stdout (and the address into
// --port-file), and serves `POST <endpoint>` and `GET /v1/health` until SIGINT, SIGTERM or SIGHUP:
// then it stops accepting, answers the requests already running, 503 to those waiting, and returns
// 128+signal (a second signal ends the process at once, as in every tool). The caller closes its
// run row with it.
int run_service(const ServiceOptions& options, const ServiceSpec& spec);

}  // namespace ca
