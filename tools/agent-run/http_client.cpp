// agent-run's HTTP client (see http_client.hpp).
#include "tools/agent-run/http_client.hpp"

#include <curl/curl.h>
#include <strings.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <mutex>

#include "tools/agent-run/agent.hpp"

namespace ca::agent_run {
namespace {

struct Sink {
  HttpResponse* r;
  std::size_t max;
};

// Returning less than was offered ends the transfer (CURLE_WRITE_ERROR): nothing past the cap is kept.
size_t on_body(char* data, size_t size, size_t n, void* user) {
  auto* sink = static_cast<Sink*>(user);
  const std::size_t bytes = size * n;
  if (bytes > sink->max - std::min(sink->max, sink->r->body.size())) {
    sink->r->too_large = true;
    return 0;
  }
  sink->r->body.append(data, bytes);
  return bytes;
}

size_t on_header(char* data, size_t size, size_t n, void* user) {
  std::string h(data, size * n);
  auto* sink = static_cast<Sink*>(user);
  auto* r = sink->r;
  // The body's room at once when its length is known (and under the cap): a string grown by
  // doubling would hold up to three times the answer while it arrives.
  if (h.size() > 15 && strncasecmp(h.c_str(), "content-length:", 15) == 0) {
    const unsigned long long length = std::strtoull(h.c_str() + 15, nullptr, 10);
    if (length > 0 && length <= sink->max && r->body.empty()) r->body.reserve(static_cast<std::size_t>(length));
  }
  if (h.size() > 12 && strncasecmp(h.c_str(), "retry-after:", 12) == 0) {
    char* end = nullptr;
    double v = std::strtod(h.c_str() + 12, &end);
    if (end != h.c_str() + 12 && v >= 0) r->retry_after_s = v;
  }
  return size * n;
}

int on_progress(void*, curl_off_t, curl_off_t, curl_off_t, curl_off_t) { return g_interrupted.load() ? 1 : 0; }

}  // namespace

HttpResponse http_request(const std::string& method, const std::string& url, const std::string& body,
                          const std::vector<std::string>& header_lines, double timeout_s, double connect_timeout_s,
                          std::size_t max_body_bytes) {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
  HttpResponse r;
  CURL* curl = curl_easy_init();
  if (!curl) {
    r.transport_error = "curl_easy_init failed";
    return r;
  }
  curl_slist* headers = nullptr;
  for (const auto& h : header_lines) headers = curl_slist_append(headers, h.c_str());
  char errbuf[CURL_ERROR_SIZE] = {0};
  curl_easy_setopt(curl, CURLOPT_URL, url.c_str());
  curl_easy_setopt(curl, CURLOPT_HTTPHEADER, headers);
  if (method == "POST") {
    curl_easy_setopt(curl, CURLOPT_POST, 1L);
    curl_easy_setopt(curl, CURLOPT_POSTFIELDS, body.c_str());
    curl_easy_setopt(curl, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(body.size()));
  }
  Sink sink{&r, max_body_bytes};
  curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, on_body);
  curl_easy_setopt(curl, CURLOPT_WRITEDATA, &sink);
  // A Content-Length over the cap is refused before the body comes (the cap holds without it too).
  curl_easy_setopt(curl, CURLOPT_MAXFILESIZE_LARGE, static_cast<curl_off_t>(std::min<std::size_t>(max_body_bytes, INT64_MAX)));
  curl_easy_setopt(curl, CURLOPT_HEADERFUNCTION, on_header);
  curl_easy_setopt(curl, CURLOPT_HEADERDATA, &sink);
  curl_easy_setopt(curl, CURLOPT_XFERINFOFUNCTION, on_progress);
  curl_easy_setopt(curl, CURLOPT_NOPROGRESS, 0L);
  curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);  // threads: no SIGALRM for DNS timeouts
  curl_easy_setopt(curl, CURLOPT_TIMEOUT_MS, static_cast<long>(std::max(0.01, timeout_s) * 1000));
  curl_easy_setopt(curl, CURLOPT_CONNECTTIMEOUT_MS, static_cast<long>(std::max(0.1, connect_timeout_s) * 1000));
  curl_easy_setopt(curl, CURLOPT_ERRORBUFFER, errbuf);
  curl_easy_setopt(curl, CURLOPT_ACCEPT_ENCODING, "");
  CURLcode rc = curl_easy_perform(curl);
  if (rc == CURLE_FILESIZE_EXCEEDED) r.too_large = true;
  if (r.too_large) {
    r.body = std::string();  // what came is not the answer: not kept
    r.transport_error = "the answer is larger than " + std::to_string(max_body_bytes) + " bytes" +
                        (rc == CURLE_FILESIZE_EXCEEDED ? "" : " (decompressed)") + ": not read";
  } else if (rc != CURLE_OK) {
    r.transport_error = std::string(curl_easy_strerror(rc)) + (errbuf[0] ? std::string(": ") + errbuf : "");
  } else {
    curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &r.status);
  }
  r.timed_out = rc == CURLE_OPERATION_TIMEDOUT;
  double connect_s = 0;
  if (curl_easy_getinfo(curl, CURLINFO_CONNECT_TIME, &connect_s) == CURLE_OK) r.connected = connect_s > 0;
  curl_slist_free_all(headers);
  curl_easy_cleanup(curl);
  return r;
}


}  // namespace ca::agent_run
