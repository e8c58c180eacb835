// --judge URL[,URL...]: the locked verify and profile calls POST to long-lived kernel-check and
// kernel-prof services (tools/kernel-check/SERVICE.md) instead of starting a process per call.
#pragma once
#include <chrono>
#include <mutex>
#include <string>
#include <vector>

#include "libcommon/jsonl.hpp"

namespace ca::agent_run {

class JudgePool {
 public:
  // URLs as given ("http://host:port" or "host:port"); UsageError for an empty or malformed one.
  // `secret`: the services' shared secret (Authorization: Bearer), empty for none.
  explicit JudgePool(const std::vector<std::string>& urls, std::string secret = "");

  struct Answer {
    Json record;      // the service's output record for the one input record
    std::string url;    // the service that answered
    std::string error;  // non-empty: no service gave a result; names each one tried and why
  };
  // POSTs one record to a service of `tool` ("kernel-check" or "kernel-prof"): the least busy of
  // those whose health check says ok (a service without a GPU answers 503 there and is skipped),
  // round-robin among equals, then the others if it fails (no answer, 5xx, or a kernel-check answer
  // that is no verdict: no_device). A 4xx is the record's fault: its message is the error,
  // no other is tried. The record's `task` goes only to a service that says it accepts tasks; others
  // judge the task_id from their own --tasks. Never waits longer than timeout_s for an answer nor 5 s
  // for a connection or a health check.
  Answer call(const std::string& tool, const Json& input, double timeout_s);

  const std::vector<std::string>& urls() const { return urls_; }

 private:
  struct Candidate;  // a service of the tool that is up, with its queue
  std::vector<std::string> with_auth(std::vector<std::string> headers) const;
  void mark_down(std::size_t i);
  bool ask_health(const std::string& tool, std::size_t start, const std::vector<std::chrono::steady_clock::time_point>& down,
                  std::vector<Candidate>& candidates, std::vector<std::string>& notes);
  std::vector<std::string> urls_;
  std::vector<std::string> auth_headers_;  // "Authorization: Bearer ..." when a secret is given
  std::mutex mu_;
  std::size_t next_ = 0;                                        // round-robin start
  std::vector<std::chrono::steady_clock::time_point> down_until_;  // skipped after a failure, for a while
};

}  // namespace ca::agent_run
