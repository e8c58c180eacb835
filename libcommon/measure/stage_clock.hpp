// Where one record's time goes: seconds per named stage (kernel-check's check.stage_s,
// kernel-prof's prof.stage_s, and their -v lines).
#pragma once
#include <chrono>
#include <map>
#include <string>

#include "libcommon/jsonl.hpp"

namespace ca::measure {

class StageClock {
 public:
  // The time since the last lap (or since the clock was made) goes to `stage`; laps of one stage add up.
  void lap(const std::string& stage);
  bool empty() const { return seconds_.empty(); }
  Json to_json() const;   // {"stage": seconds, to the millisecond}, stages by name
  std::string text() const;  // "compare 0.005 s load 0.1 s"

 private:
  std::map<std::string, double> seconds_;
  std::chrono::steady_clock::time_point last_ = std::chrono::steady_clock::now();
};

}  // namespace ca::measure
