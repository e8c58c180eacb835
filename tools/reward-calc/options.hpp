// reward-calc's settings as given (options, --config YAML), and the summary of a run's rewards.
#pragma once
#include <cstdint>
#include <map>
#include <string>

#include "libcommon/cli.hpp"
#include "tools/reward-calc/scheme.hpp"

namespace ca::reward_calc {

struct Options {
  std::string config_path, scheme = "milestone", compile_baseline = "precision-matched", speedup_baseline = "compile";
  Config values;  // the numeric options and flags as parsed
  CLI::Option *scheme_opt = nullptr, *margin_opt = nullptr, *compile_opt = nullptr, *speedup_opt = nullptr,
              *failure_opt = nullptr, *violation_opt = nullptr, *clip_opt = nullptr, *unprofiled_opt = nullptr;
};
void add_options(CLI::App& app, Options& o);
// The settings in force: defaults, then --config's YAML, then the options given on the command
// line (validated).
Config settings(const Options& o);

// The rewards given, for the summary line: counts per value when the scheme has few values
// (milestone), else the range; the mean; violations and unprofiled records.
class Tally {
 public:
  void add(double value, const std::string& value_text, Verdict verdict);
  std::string text(const Config& config) const;

 private:
  std::map<std::string, int64_t> histogram_;
  double sum_ = 0, lowest_ = 0, highest_ = 0;
  int64_t scored_ = 0, violations_ = 0, unprofiled_ = 0;
};

}  // namespace ca::reward_calc
