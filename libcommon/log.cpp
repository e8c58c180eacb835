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
}  // namespace

void set_tool(const std::string& name) { g_tool = name; }
const std::string& tool() { return g_tool; }
void set_level(int l) { g_level = l; }
int level() { return g_level; }

void write(const char* tag, const std::string& message) {
  std::lock_guard<std::mutex> lock(g_mutex);
  std::string line = g_tool + ": ";
  if (tag) line += std::string(tag) + ": ";
  line += message;
  line += '\n';
  std::fwrite(line.data(), 1, line.size(), stderr);
  std::fflush(stderr);
}

Progress::Progress(std::string unit, int64_t total)
    : unit_(std::move(unit)), total_(total), enabled_(isatty(STDERR_FILENO) && g_level >= kNormal),
      start_(std::chrono::steady_clock::now()), last_draw_(start_) {}

Progress::~Progress() { finish(); }

void Progress::tick(int64_t n) {
  count_ += n;
  if (!enabled_) return;
  auto now = std::chrono::steady_clock::now();
  if (now - last_draw_ < std::chrono::milliseconds(250)) return;
  last_draw_ = now;
  double secs = std::chrono::duration<double>(now - start_).count();
  double rate = secs > 0 ? count_ / secs : 0.0;
  std::string line = cat("\r", g_tool, ": ", count_, " ", unit_, ", ");
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.1f/s", rate);
  line += buf;
  if (total_ > 0 && rate > 0 && count_ < total_) {
    int eta = static_cast<int>((total_ - count_) / rate);
    std::snprintf(buf, sizeof buf, ", ETA %d:%02d", eta / 60, eta % 60);
    line += buf;
  }
  line += "   ";
  std::lock_guard<std::mutex> lock(g_mutex);
  std::fwrite(line.data(), 1, line.size(), stderr);
  drawn_ = true;
}

void Progress::finish() {
  if (enabled_ && drawn_) {
    std::lock_guard<std::mutex> lock(g_mutex);
    std::fputs("\r\033[K", stderr);
    drawn_ = false;
  }
}

}  // namespace ca::log
