// The judge services of --judge (see judge.hpp).
#include "tools/agent-run/judge.hpp"

#include <algorithm>
#include <sstream>

#include "libcommon/errors.hpp"
#include "libcommon/log.hpp"
#include "tools/agent-run/agent.hpp"
#include "tools/agent-run/http_client.hpp"

namespace ca::agent {
namespace {

constexpr double kConnectTimeoutS = 5;
constexpr auto kDownFor = std::chrono::seconds(30);  // a service that failed is asked last for this long

std::string endpoint_of(const std::string& tool) { return tool == "kernel-prof" ? "/v1/profile" : "/v1/check"; }

// The error message of a service's error answer ({"error": ...}), else the start of the body.
std::string message_of(const std::string& body) {
  try {
    Json j = Json::parse(body);
    if (j.is_object() && j.contains("error") && j["error"].is_string()) return j["error"].get<std::string>();
  } catch (const std::exception&) {
  }
  return body.substr(0, 300);
}

}  // namespace

JudgePool::JudgePool(const std::vector<std::string>& urls) {
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

JudgePool::Answer JudgePool::call(const std::string& tool, const Json& input, double timeout_s) {
  const std::size_t n = urls_.size();
  std::size_t start;
  std::vector<std::chrono::steady_clock::time_point> down;
  {
    std::lock_guard<std::mutex> lock(mu_);
    start = next_++ % n;
    down = down_until_;
  }
  auto mark_down = [&](std::size_t i) {
    std::lock_guard<std::mutex> lock(mu_);
    down_until_[i] = std::chrono::steady_clock::now() + kDownFor;
  };
  std::vector<std::string> notes;
  struct Candidate {
    int64_t queue;
    std::size_t rank, index;
  };
  std::vector<Candidate> candidates;
  // Health first: which services are up, of this tool, and how busy. Those that failed lately are
  // asked only when no other answers.
  const auto now = std::chrono::steady_clock::now();
  for (int pass = 0; pass < 2 && candidates.empty(); ++pass) {
    for (std::size_t k = 0; k < n; ++k) {
      const std::size_t i = (start + k) % n;
      if ((down[i] > now) != (pass == 1)) continue;
      if (g_interrupted) return Answer{nullptr, "", "interrupted: agent-run is stopping"};
      HttpResponse h = http_request("GET", urls_[i] + "/v1/health", "", {"Accept: application/json"}, kConnectTimeoutS,
                                    kConnectTimeoutS);
      if (!h.transport_error.empty() || h.status != 200) {
        notes.push_back(urls_[i] + ": health: " + (h.transport_error.empty() ? "HTTP " + std::to_string(h.status) : h.transport_error));
        mark_down(i);
        continue;
      }
      Json health;
      try {
        health = Json::parse(h.body);
      } catch (const std::exception&) {
        notes.push_back(urls_[i] + ": health: not JSON");
        continue;
      }
      if (!health.is_object() || health.value("tool", std::string()) != tool) {
        if (health.is_object() && health.contains("tool") && health["tool"].is_string() && pass == 0)
          notes.push_back(urls_[i] + " is a " + health["tool"].get<std::string>() + " service");
        continue;
      }
      candidates.push_back({health.value("queue", int64_t{0}), k, i});
    }
  }
  std::stable_sort(candidates.begin(), candidates.end(), [](const Candidate& a, const Candidate& b) {
    return a.queue != b.queue ? a.queue < b.queue : a.rank < b.rank;
  });
  const std::string body = input.dump(-1, ' ', false, Json::error_handler_t::replace) + "\n";
  for (const Candidate& c : candidates) {
    const std::string& url = urls_[c.index];
    if (g_interrupted) return Answer{nullptr, url, "interrupted: agent-run is stopping"};
    HttpResponse r = http_request("POST", url + endpoint_of(tool), body, {"Content-Type: application/x-ndjson"}, timeout_s,
                                  kConnectTimeoutS);
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
    try {
      if (!last.empty()) return Answer{Json::parse(last), url, ""};
    } catch (const std::exception&) {
    }
    return Answer{nullptr, url, url + ": an answer without a record"};
  }
  std::string why;
  for (std::size_t i = 0; i < notes.size(); ++i) why += (i ? "; " : "") + notes[i];
  return Answer{nullptr, "", "no " + tool + " service answered (--judge " + std::to_string(n) + " URL" + (n == 1 ? "" : "s") +
                                 ")" + (why.empty() ? "" : ": " + why)};
}

}  // namespace ca::agent
