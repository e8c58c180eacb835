#include "libcommon/measure/stage_clock.hpp"

#include <cmath>

#include "libcommon/log.hpp"

namespace ca::measure {

namespace {
double ms_rounded(double s) { return std::round(s * 1000) / 1000; }
}  // namespace

void StageClock::lap(const std::string& stage) {
  auto now = std::chrono::steady_clock::now();
  seconds_[stage] += std::chrono::duration<double>(now - last_).count();
  last_ = now;
}

Json StageClock::to_json() const {
  Json j = Json::object();
  for (const auto& [k, v] : seconds_) j[k] = ms_rounded(v);
  return j;
}

std::string StageClock::text() const {
  std::string t;
  for (const auto& [k, v] : seconds_) t += (t.empty() ? "" : " ") + k + " " + log::cat(ms_rounded(v)) + " s";
  return t;
}

}  // namespace ca::measure
