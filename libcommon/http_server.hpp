// A small HTTP/1.1 server (Boost.Beast, header-only) for the judge services: routes map to a
// handler(body) -> status + body; each request runs its handler on a thread of its own, so a long
// judge never blocks other clients' reads, health checks or a stop. The only Beast translation unit.
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
};

struct Response {
  int status = 200;
  std::string content_type = "application/x-ndjson";
  std::string body;
};

// A handler's answer for a ca::Error is made by the server: 400 for bad input or usage, 503 for an
// environment error (no GPU, no torch), 500 otherwise; the body is {"error": message, "exit_code": N}
// with the exit code the tool would have given.
using Handler = std::function<Response(const Request&)>;

struct ServerOptions {
  std::string address = "127.0.0.1:0";   // host:port; port 0 picks a free one
  std::size_t max_body_bytes = 256u << 20;
  double read_timeout_s = 60;             // a request's head and body, and an idle keep-alive
  double write_timeout_s = 600;           // a client that stops reading its answer is dropped
};

class Server {
 public:
  // Binds and listens; throws UsageError for an address that is not host:port, EnvironmentError
  // when it cannot bind.
  explicit Server(const ServerOptions& options);
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // "127.0.0.1:40123": the address really bound (the port picked for port 0).
  std::string bound_address() const;
  // `work`: counted in queued() and served(); a health check is not work.
  void route(const std::string& method, const std::string& path, Handler handler, bool work = true);

  // Serves until stop(); then answers the requests already read (each with Connection: close),
  // closes idle connections and returns once every handler has finished.
  void serve();
  // Stops accepting; safe from any thread (the signal thread too), more than once.
  void stop();

  int64_t queued() const;  // work requests read and not yet answered (running or waiting)
  int64_t served() const;  // work requests answered

  struct Impl;  // http_server.cpp's (its connections reach it)

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace ca::http
