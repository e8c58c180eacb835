// agent-run's one HTTP client (libcurl): the openai:URL policy and the --judge services use it.
#pragma once
#include <cstddef>
#include <string>
#include <vector>

namespace ca::agent_run {

struct HttpResponse {
  long status = 0;
  std::string body;
  double retry_after_s = -1;
  std::string transport_error;  // non-empty when no HTTP answer came
  bool connected = false;       // the connection was made (a timeout after it: the answer was slow)
  bool timed_out = false;
  bool too_large = false;       // the body (as decompressed) passed max_body_bytes: the transfer was ended
};

// What an answer may be, decompressed, unless the caller says otherwise (agent-run --max-answer-mib).
inline constexpr std::size_t kDefaultMaxBodyBytes = std::size_t{64} << 20;

// One request; GET unless method is "POST". An interrupt of agent-run (g_interrupted) aborts it
// (a transport error). `headers` are whole lines ("Content-Type: application/json"). The body is
// held only up to max_body_bytes as it arrives, after decompression (a 10 MB gzip body that inflates
// to 10 GiB, an endless chunked answer, a 500 MB Content-Length): past it the transfer ends at once,
// too_large is set and transport_error says so. `timeout_s` bounds the whole request.
HttpResponse http_request(const std::string& method, const std::string& url, const std::string& body,
                          const std::vector<std::string>& headers, double timeout_s, double connect_timeout_s,
                          std::size_t max_body_bytes = kDefaultMaxBodyBytes);

}  // namespace ca::agent_run
