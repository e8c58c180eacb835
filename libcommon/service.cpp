// The judge service around a tool's record handling (see service.hpp).
#include "libcommon/service.hpp"

#include <CLI/CLI.hpp>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>

#include "libcommon/errors.hpp"
#include "libcommon/http_server.hpp"
#include "libcommon/log.hpp"
#include "libcommon/paths.hpp"
#include "libcommon/signals.hpp"
#include "ca/version.hpp"

namespace ca {

namespace {
constexpr std::size_t kMinSecretChars = 16;
}

std::string read_judge_secret(const std::string& secret_file, const std::string& option) {
  std::string secret, from;
  if (!secret_file.empty()) {
    struct stat st{};
    if (::stat(secret_file.c_str(), &st) != 0) throw UsageError(option + " " + secret_file + ": cannot read it");
    if (st.st_mode & (S_IRWXG | S_IRWXO)) {
      char mode[8];
      std::snprintf(mode, sizeof mode, "%03o", static_cast<unsigned>(st.st_mode & 0777));
      throw UsageError(option + " " + secret_file + ": open to group or others (mode " + mode + "): chmod 600 " + secret_file);
    }
    std::ifstream f(secret_file, std::ios::binary);
    if (!f) throw UsageError(option + " " + secret_file + ": cannot read it");
    std::getline(f, secret);
    from = option + " " + secret_file;
  } else if (const char* v = std::getenv(kJudgeSecretEnv)) {
    secret = v;
    from = kJudgeSecretEnv;
  } else {
    return "";
  }
  while (!secret.empty() && (secret.back() == '\r' || secret.back() == ' ' || secret.back() == '\t')) secret.pop_back();
  if (secret.size() < kMinSecretChars)
    throw UsageError(from + ": the shared secret is shorter than " + std::to_string(kMinSecretChars) +
                     " characters (make one with: openssl rand -hex 32)");
  for (unsigned char c : secret)
    if (c < 0x21 || c > 0x7e)
      throw UsageError(from + ": the shared secret must be printable ASCII without spaces (it travels in an HTTP header)");
  return secret;
}

int64_t count_json_values(const std::string& text, int64_t limit) {
  // Every value but the first of a container follows a ',' and every container opens with '[' or
  // '{': counting those (outside strings) bounds the values, whatever their shape.
  int64_t n = 0;
  bool in_string = false, escaped = false;
  for (char c : text) {
    if (in_string) {
      if (escaped) escaped = false;
      else if (c == '\\') escaped = true;
      else if (c == '"') in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{' || c == ',') {
      if (++n > limit) break;
    }
  }
  return n;
}

void ServiceOptions::register_with(CLI::App& app) {
  app.add_option("--serve", address,
                 "Run as a long-lived service on 127.0.0.1:PORT (:PORT and PORT mean the same; port 0 picks one; the "
                 "address is the first line on stdout as {\"listening\":...}); another address needs --public; see "
                 "SERVICE.md")
      ->group("Service");
  app.add_flag("--public", make_public,
               "With --serve: allow an address other machines reach (0.0.0.0, a LAN address); needs a shared secret")
      ->group("Service");
  app.add_option("--secret-file", secret_file,
                 "With --serve: the shared secret every request must carry (Authorization: Bearer ...), the file's "
                 "first line (chmod 600); default $CA_JUDGE_SECRET")
      ->group("Service");
  app.add_flag("--accept-tasks", accept_tasks,
               "With --serve: run task code that clients send in a record's `task` (checked against its task_id); "
               "without it tasks come only from --tasks and the store")
      ->group("Service");
  app.add_option("--max-queue", max_queue, "With --serve: requests waiting for their turn before more get 503")
      ->group("Service")
      ->check(CLI::Range(0, 100000));
  app.add_option("--port-file", port_file, "With --serve: write the bound HOST:PORT into this file once listening")
      ->group("Service");
  app.add_option("--read-timeout-s", read_timeout_s, "With --serve: drop a client that sends nothing for this long")
      ->group("Service")
      ->check(CLI::PositiveNumber);
}

void ServiceOptions::validate(const CommonOptions& common) {
  if (!enabled()) {
    if (!port_file.empty()) throw UsageError("--port-file needs --serve");
    for (auto [set, flag] : {std::pair{make_public, "--public"}, std::pair{!secret_file.empty(), "--secret-file"},
                             std::pair{accept_tasks, "--accept-tasks"}})
      if (set) throw UsageError(std::string(flag) + " needs --serve");
    return;
  }
  if ((common.input != "-" && !common.input.empty()) || (common.output != "-" && !common.output.empty()))
    throw UsageError("--serve reads its records from requests: -i/-o have no meaning there");
  if (!common.shard_text.empty() && !Shard::parse(common.shard_text).is_whole())
    throw UsageError("--serve judges every record it is sent: --shard has no meaning there");
  secret = read_judge_secret(secret_file);
  if (make_public && secret.empty())
    throw UsageError("--public needs a shared secret: --secret-file FILE or " + std::string(kJudgeSecretEnv) +
                     " (every request must carry it)");
}

int run_service(const ServiceOptions& options, const ServiceSpec& spec) {
  http::ServerOptions so;
  so.address = options.address;
  so.allow_public = options.make_public;
  so.secret = options.secret;
  so.read_timeout_s = options.read_timeout_s;
  so.max_running = spec.max_running;
  so.max_waiting = options.max_queue;
  http::Server server(so);
  const std::string address = server.bound_address();
  const auto started = std::chrono::steady_clock::now();

  server.route("POST", spec.endpoint, [&](const http::Request& request) {
    // The parse's memory: the body is bounded in bytes by the server, its values here (250 MB of
    // "{}," would otherwise be 80 million objects, gigabytes).
    if (count_json_values(request.body, kMaxRequestValues) > kMaxRequestValues)
      throw InputError("request body holds more than " + std::to_string(kMaxRequestValues) +
                       " JSON values: send fewer records per request");
    std::vector<Line> lines = parse_lines(request.body);  // a bad line: InputError, 400, nothing judged
    http::Response response;
    response.body = dump_lines(spec.judge(lines, [&] { return request.is_cancelled(); }));
    return response;
  });
  server.route(
      "GET", "/v1/health",
      [&](const http::Request& request) {
        http::Response response;
        response.content_type = "application/json";
        const std::string why = spec.unavailable ? spec.unavailable() : std::string();
        if (!why.empty()) response.status = 503;
        Json health;
        if (!request.authenticated) {
          // Open, so a load balancer may ask; without the secret it tells nothing but up or down.
          health = {{"ok", why.empty()}, {"auth", "required"}};
        } else {
          health = {{"ok", why.empty()},
                    {"tool", spec.tool},
                    {"version", std::string(kVersion) + " (" + kGitRevision + ")"},
                    {"endpoint", spec.endpoint},
                    {"gpus", spec.gpus},
                    {"accepts_tasks", options.accept_tasks},
                    {"queue", server.queued()},
                    {"served", server.served()},
                    {"uptime_s", std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count()},
                    {"pid", static_cast<int64_t>(::getpid())}};
          if (!why.empty()) health["error"] = why;
        }
        response.body = health.dump() + "\n";
        return response;
      },
      false, true);

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
  log::info("serving ", spec.endpoint, " and /v1/health on ", address, spec.gpus.empty() ? "" : " (GPUs " + spec.gpus.dump() + ")",
            options.secret.empty() ? "; no shared secret (loopback only)" : "; requests need the shared secret",
            options.accept_tasks ? "; runs task code clients send (--accept-tasks)" : "; tasks from --tasks and the store only");
  server.serve();
  const int sig = stopped_by.load();
  log::info("stopped after ", server.served(), " request", server.served() == 1 ? "" : "s");
  return sig ? 128 + sig : kExitOk;
}

}  // namespace ca
