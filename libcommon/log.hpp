// Logging with levels on stderr (stdout carries records only), and a progress line for terminals.
#pragma once
#include <chrono>
#include <cstdint>
#include <sstream>
#include <string>

namespace ca::log {

enum Level : int { kQuiet = -1, kNormal = 0, kVerbose = 1, kDebug = 2 };

void set_tool(const std::string& name);
const std::string& tool();
void set_level(int level);
int level();
void write(const char* tag, const std::string& message);

template <class... A> std::string cat(const A&... parts) {
  std::ostringstream s;
  (s << ... << parts);
  return s.str();
}
template <class... A> void error(const A&... p) { write("error", cat(p...)); }
template <class... A> void warn(const A&... p) { if (level() >= kNormal) write("warning", cat(p...)); }
template <class... A> void info(const A&... p) { if (level() >= kNormal) write(nullptr, cat(p...)); }
template <class... A> void verbose(const A&... p) { if (level() >= kVerbose) write(nullptr, cat(p...)); }
template <class... A> void debug(const A&... p) { if (level() >= kDebug) write("debug", cat(p...)); }

// "\r<tool>: 12/40 episodes, 1.3/s, 0:25 left" (or "1234 records, 56.7/s" when the total is unknown)
// redrawn at most twice a second, only when stderr is a terminal (and not under -q); a log line
// clears it first, finish() (or the destructor) clears it for good. Ticks may come from several threads.
class Progress {
 public:
  explicit Progress(std::string unit = "records", int64_t total = -1);
  ~Progress();
  void set_total(int64_t total);  // -1: unknown
  void tick(int64_t n = 1);
  void finish();
  bool enabled() const { return enabled_; }

 private:
  std::string unit_;
  int64_t total_, count_ = 0;
  bool enabled_;
  std::chrono::steady_clock::time_point start_, last_draw_;
};

}  // namespace ca::log
