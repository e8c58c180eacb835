// agent-run's one HTTP client (libcurl): the openai:URL policy and the --judge services use it.
#pragma once
#include <string>
#include <vector>

namespace ca::agent {

struct HttpResponse {
  long status = 0;
  std::string body;
  double retry_after_s = -1;
  std::string transport_error;  // non-empty when no HTTP answer came
  bool connected = false;       // the connection was made (a timeout after it: the answer was slow)
  bool timed_out = false;
};

// One request; GET unless method is "POST". An interrupt of agent-run (g_interrupted) aborts it
// (a transport error). `headers` are whole lines ("Content-Type: application/json").
HttpResponse http_request(const std::string& method, const std::string& url, const std::string& body,
                          const std::vector<std::string>& headers, double timeout_s, double connect_timeout_s);

}  // namespace ca::agent
