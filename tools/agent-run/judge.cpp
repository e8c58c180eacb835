// The judge services of --judge (see judge.hpp).
#include "tools/agent-run/judge.hpp"

#include <algorithm>
#include <sstream>

#include "libcommon/errors.hpp"
#include "libcommon/log.hpp"
#include "tools/agent-run/agent.hpp"
#include "tools/agent-run/http_client.hpp"

namespace ca::agent_run {
namespace {

constexpr double kConnectTimeoutS = 5;
constexpr auto kDownFor = std::chrono::seconds(30);  // a service that failed is asked last for this long

std::string endpoint_of(const std::string& tool) { return tool == "kernel-prof" ? "/v1/profile" : "/v1/check"; }

// The error message of a service's error answer ({"error": ...}), else the start of the body.
std::string message_of(const std::string& body) {
  try {
    Json j = parse_json(body, "the answer");
    if (j.is_object() && j.contains("error") && j["error"].is_string()) return j["error"].get<std::string>();
  } catch (const std::exception&) {
  }
  return body.substr(0, 300);
}

}  // namespace

JudgePool::JudgePool(const std::vector<std::string>& urls, std::string secret) {
  if (!secret.empty()) auth_headers_.push_back("Authorization: Bearer " + secret);
  for (std::string u : urls) {
    while (!u.empty() && u.back() == '/') u.pop_back();
    if (u.empty()) throw UsageError("--judge: an empty URL");
    if (u.find("://") == std::string::npos) u = "http://" + u;
    if (u.rfind("http://", 0) != 0)
      throw UsageError("--judge: '" + u + "': the services speak plain HTTP (http://HOST:PORT)");
    urls_.push_back(u);
  }
  if (urls_.empty()) throw UsageError("--judge: no URL given");
  down_until_.assign(urls_.size(), std::chrono::steady_clock::time_point{});
}

struct JudgePool::Candidate {
  int64_t queue;
  std::size_t rank, index;
  bool accepts_tasks;
};

std::vector<std::string> JudgePool::with_auth(std::vector<std::string> headers) const {
  headers.insert(headers.end(), auth_headers_.begin(), auth_headers_.end());
  return headers;
}

void JudgePool::mark_down(std::size_t i) {
  std::lock_guard<std::mutex> lock(mu_);
  down_until_[i] = std::chrono::steady_clock::now() + kDownFor;
}

// Health first: which services are up, of this tool, and how busy. Those that failed lately are
// asked only when no other answers. False when agent-run is interrupted.
bool JudgePool::ask_health(const std::string& tool, std::size_t start,
                           const std::vector<std::chrono::steady_clock::time_point>& down,
                           std::vector<Candidate>& candidates, std::vector<std::string>& notes) {
  const std::size_t n = urls_.size();
  const auto now = std::chrono::steady_clock::now();
  for (int pass = 0; pass < 2 && candidates.empty(); ++pass) {
    for (std::size_t k = 0; k < n; ++k) {
      const std::size_t i = (start + k) % n;
      if ((down[i] > now) != (pass == 1)) continue;
      if (g_interrupted) return false;
      HttpResponse h = http_request("GET", urls_[i] + "/v1/health", "", with_auth({"Accept: application/json"}),
                                    kConnectTimeoutS, kConnectTimeoutS);
      Json health;
      try {
        if (h.transport_error.empty()) health = parse_json(h.body, urls_[i] + "/v1/health");
      } catch (const std::exception&) {
      }
      if (!h.transport_error.empty() || h.status != 200) {
        // 503: up but unable to judge (no GPU): never sent work, which it would answer no_device.
        std::string why = h.transport_error.empty() ? "HTTP " + std::to_string(h.status) : h.transport_error;
        if (health.is_object() && health.contains("error") && health["error"].is_string())
          why += ": " + health["error"].get<std::string>();
        notes.push_back(urls_[i] + ": health: " + why);
        mark_down(i);
        continue;
      }
      if (!health.is_object()) {
        notes.push_back(urls_[i] + ": health: not JSON");
        continue;
      }
      if (health.value("auth", Json()) == "required" && !health.contains("tool")) {
        notes.push_back(urls_[i] + ": needs the judge services' shared secret (" +
                        (auth_headers_.empty() ? std::string("none given: --judge-secret-file FILE or CA_JUDGE_SECRET")
                                               : std::string("the one given is not it")) + ")");
        mark_down(i);
        continue;
      }
      if (health.contains("ok") && health["ok"] != true) {
        notes.push_back(urls_[i] + ": health: not ok");
        mark_down(i);
        continue;
      }
      if (!health.is_object() || !health.contains("tool") || health["tool"] != tool) {  // any type: not this tool
        if (health.is_object() && health.contains("tool") && health["tool"].is_string() && pass == 0)
          notes.push_back(urls_[i] + " is a " + health["tool"].get<std::string>() + " service");
        continue;
      }
      const Json q = health.contains("queue") ? health["queue"] : Json();
      candidates.push_back({q.is_number_integer() ? q.get<int64_t>() : 0, k, i, health.value("accepts_tasks", Json()) == true});
    }
  }
  return true;
}

JudgePool::Answer JudgePool::call(const std::string& tool, const Json& input, double timeout_s) {
  const std::size_t n = urls_.size();
  std::size_t start;
  std::vector<std::chrono::steady_clock::time_point> down;
  {
    std::lock_guard<std::mutex> lock(mu_);
    start = next_++ % n;
    down = down_until_;
  }
  std::vector<std::string> notes;
  std::vector<Candidate> candidates;
  if (!ask_health(tool, start, down, candidates, notes)) return Answer{nullptr, "", "interrupted: agent-run is stopping"};
  std::stable_sort(candidates.begin(), candidates.end(), [](const Candidate& a, const Candidate& b) {
    return a.queue != b.queue ? a.queue < b.queue : a.rank < b.rank;
  });
  // The task's code goes only where it is asked for: a service that runs client tasks checks it
  // against the task_id; any other judges the task_id from its own --tasks (and refuses a task).
  const std::string body_with_task = input.dump(-1, ' ', false, Json::error_handler_t::replace) + "\n";
  std::string body_without_task = body_with_task;
  if (input.is_object() && input.contains("task")) {
    Json bare = input;
    bare.erase("task");
    body_without_task = bare.dump(-1, ' ', false, Json::error_handler_t::replace) + "\n";
  }
  for (const Candidate& c : candidates) {
    const std::string& url = urls_[c.index];
    if (g_interrupted) return Answer{nullptr, url, "interrupted: agent-run is stopping"};
    HttpResponse r = http_request("POST", url + endpoint_of(tool), c.accepts_tasks ? body_with_task : body_without_task,
                                  with_auth({"Content-Type: application/x-ndjson"}), timeout_s, kConnectTimeoutS);
    if (!r.transport_error.empty()) {
      if (g_interrupted) return Answer{nullptr, url, "interrupted: agent-run is stopping"};
      // No answer within the call's time: the work itself is that slow; another service would be too.
      if (r.timed_out && r.connected)
        return Answer{nullptr, url, url + ": no answer within " + log::cat(timeout_s) + " s (--locked-timeout)"};
      notes.push_back(url + ": " + r.transport_error);
      mark_down(c.index);
      continue;
    }
    if (r.status >= 500) {  // stopping, no GPU there, an internal error: another may do it
      notes.push_back(url + ": HTTP " + std::to_string(r.status) + ": " + message_of(r.body));
      continue;
    }
    if (r.status != 200) return Answer{nullptr, url, url + ": HTTP " + std::to_string(r.status) + ": " + message_of(r.body)};
    std::istringstream lines(r.body);
    std::string line, last;
    while (std::getline(lines, line))
      if (!line.empty() && line[0] == '{') last = line;
    Json record;
    try {
      if (!last.empty()) record = parse_json(last, url);
    } catch (const std::exception&) {
    }
    if (!record.is_object()) return Answer{nullptr, url, url + ": an answer without a record"};
    // A service that could not run the candidate (no GPU there) gave no verdict: another may. (A
    // --compile-only service's `compiled` is what it was started to answer, as the process path's.)
    if (tool == "kernel-check" && record.contains("check") && record["check"].is_object()) {
      const Json status = record["check"].value("status", Json());
      if (status == "no_device") {
        notes.push_back(url + ": gave no verdict (" + status.get<std::string>() + ")");
        mark_down(c.index);
        continue;
      }
    }
    return Answer{record, url, ""};
  }
  std::string why;
  for (std::size_t i = 0; i < notes.size(); ++i) why += (i ? "; " : "") + notes[i];
  return Answer{nullptr, "", "no " + tool + " service answered (--judge " + std::to_string(n) + " URL" + (n == 1 ? "" : "s") +
                                 ")" + (why.empty() ? "" : ": " + why)};
}

}  // namespace ca::agent_run
