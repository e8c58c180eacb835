// A small HTTP/1.1 server (Boost.Beast, header-only) for the judge services: routes map to a
// handler(body) -> status + body; each request runs its handler on a thread of its own, so a long
// judge never blocks other clients' reads, health checks or a stop. The only Beast translation unit.
// What it guarantees under attack (SERVICE.md, "Security model"): loopback unless told otherwise,
// a shared secret checked in constant time before a body is read, bodies bounded one by one and in
// total, work admitted by one bound (the rest waits in a bounded queue, or 503), a waiting request
// whose client left never runs, `Expect: 100-continue` answered, accept() paused (not spun) when out
// of file descriptors.
#pragma once
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

namespace ca::http {

struct Request {
  std::string method;  // "GET", "POST"
  std::string target;  // "/v1/check" (the query, if any, is kept)
  std::string body;
  // The request carried the server's secret (always true when the server has none). Only an open
  // route (health) ever sees false.
  bool authenticated = true;
  // Set once the client has gone (its connection closed while the request waited or ran): a handler
  // that works record by record stops reading more.
  std::shared_ptr<const std::atomic<bool>> cancelled = std::make_shared<std::atomic<bool>>(false);
  bool is_cancelled() const { return cancelled && cancelled->load(); }
};

struct Response {
  int status = 200;
  std::string content_type = "application/x-ndjson";
  std::string body;
};

// A handler's answer for a ca::Error is made by the server: 400 for bad input or usage, 503 for an
// environment error (no GPU, no torch, a compiler killed from outside), 500 otherwise; the body is
// {"error": message, "exit_code": N} with the exit code the tool would have given.
using Handler = std::function<Response(const Request&)>;

struct ServerOptions {
  std::string address = "127.0.0.1:0";   // HOST:PORT, :PORT or PORT (both 127.0.0.1); port 0 picks a free one
  // A non-loopback address (0.0.0.0, a LAN address, a name that resolves to one) is refused
  // (UsageError) unless allow_public, and allow_public is refused without a secret.
  bool allow_public = false;
  // Non-empty: every request but those of open routes must carry `Authorization: Bearer <secret>`
  // (compared in constant time), else 401 before its body is read.
  std::string secret;
  std::size_t max_body_bytes = 256u << 20;
  std::size_t max_buffered_bytes = 1u << 30;  // request bodies held at once, all clients together (else 503)
  int max_running = 0;                        // work handlers at once; 0: no bound
  int max_waiting = 64;                       // work requests waiting for admission (beyond: 503)
  int max_connections = 512;                  // accepting pauses here until one closes
  double read_timeout_s = 60;             // a request's head and body, and an idle keep-alive
  double write_timeout_s = 600;           // a client that stops reading its answer is dropped
};

class Server {
 public:
  // Binds and listens; throws UsageError for an address that is not host:port or is public without
  // allow_public and a secret, EnvironmentError when it cannot bind.
  explicit Server(const ServerOptions& options);
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // "127.0.0.1:40123": the address really bound (the port picked for port 0).
  std::string bound_address() const;
  // `work`: counted in queued() and served(), and admitted under max_running; a health check is not
  // work. `open`: answered without the secret (the handler sees authenticated = false).
  void route(const std::string& method, const std::string& path, Handler handler, bool work = true, bool open = false);

  // Serves until stop(); then finishes the requests running (answered with Connection: close),
  // answers those still waiting for admission 503 (not run), closes idle connections and returns
  // once every handler has finished.
  void serve();
  // Stops accepting; safe from any thread (the signal thread too), more than once.
  void stop();

  int64_t queued() const;  // work requests read and not yet answered (running or waiting)
  int64_t served() const;  // work requests answered

  struct Impl;  // http_server.cpp's (its connections reach it)

 private:
  std::unique_ptr<Impl> impl_;
};

// Whether `authorization` (the header's value) is "Bearer <secret>": sha256 of both sides compared
// with CRYPTO_memcmp, so the time taken says nothing about the secret, its length included.
bool bearer_matches(const std::string& authorization, const std::string& secret);

}  // namespace ca::http
