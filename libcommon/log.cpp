// Logging implementation: one mutex-guarded write per line so threads never interleave a line.
#include "libcommon/log.hpp"

#include <unistd.h>

#include <cstdio>
#include <mutex>

namespace ca::log {
namespace {
std::string g_tool = "cuda-agent";
int g_level = kNormal;
std::mutex g_mutex;

// A progress line is on the terminal (guarded by g_mutex): a log line clears it before it is written.
bool g_progress_drawn = false;

void clear_progress_locked() {
  if (!g_progress_drawn) return;
  std::fputs("\r\033[K", stderr);
  g_progress_drawn = false;
}

std::string clock_text(double seconds) {
  const int64_t s = int64_t(seconds + 0.5);
  char buf[32];
  if (s >= 3600)
    std::snprintf(buf, sizeof buf, "%lld:%02lld:%02lld", (long long)(s / 3600), (long long)(s / 60 % 60), (long long)(s % 60));
  else
    std::snprintf(buf, sizeof buf, "%lld:%02lld", (long long)(s / 60), (long long)(s % 60));
  return buf;
}
}  // namespace

void set_tool(const std::string& name) { g_tool = name; }
const std::string& tool() { return g_tool; }
void set_level(int l) { g_level = l; }
int level() { return g_level; }


void write(const char* tag, const std::string& message) {
  std::lock_guard<std::mutex> lock(g_mutex);
  clear_progress_locked();
  std::string line = g_tool + ": ";
  if (tag) line += std::string(tag) + ": ";
  line += message;
  line += '\n';
  std::fwrite(line.data(), 1, line.size(), stderr);
  std::fflush(stderr);
}

Progress::Progress(std::string unit, int64_t total)
    : unit_(std::move(unit)), total_(total), enabled_(isatty(STDERR_FILENO) && g_level >= kNormal),
      start_(std::chrono::steady_clock::now()), last_draw_(start_ - std::chrono::seconds(1)) {}

Progress::~Progress() { finish(); }

void Progress::set_total(int64_t total) {
  std::lock_guard<std::mutex> lock(g_mutex);
  total_ = total;
}

void Progress::tick(int64_t n) {
  std::lock_guard<std::mutex> lock(g_mutex);
  count_ += n;
  if (!enabled_) return;
  auto now = std::chrono::steady_clock::now();
  if (now - last_draw_ < std::chrono::milliseconds(500)) return;  // twice a second at most
  last_draw_ = now;
  const double secs = std::chrono::duration<double>(now - start_).count();
  const double rate = secs > 0 ? double(count_) / secs : 0.0;
  std::string line = "\r" + g_tool + ": " + std::to_string(count_);
  if (total_ > 0) line += "/" + std::to_string(total_);
  line += " " + unit_;
  char buf[64];
  std::snprintf(buf, sizeof buf, rate >= 10 ? ", %.0f/s" : ", %.2f/s", rate);
  line += buf;
  if (total_ > 0 && count_ < total_ && rate > 0) line += ", " + clock_text(double(total_ - count_) / rate) + " left";
  line += "\033[K";
  std::fwrite(line.data(), 1, line.size(), stderr);
  std::fflush(stderr);
  g_progress_drawn = true;
}

void Progress::finish() {
  if (!enabled_) return;
  std::lock_guard<std::mutex> lock(g_mutex);
  clear_progress_locked();
}

}  // namespace ca::log
