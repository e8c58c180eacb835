// Reward schemes: the published milestone reward and its alternatives, as a pure function from a
// record's check and prof sections to a `reward` section (DESIGN.md §7).
#pragma once
#include <string>

#include "libcommon/jsonl.hpp"

namespace ca::reward_calc {

enum class Scheme { milestone, speedup, log_speedup };
enum class CompileBaseline { plain, precision_matched };
enum class SpeedupBaseline { compile, eager };

// "More than m faster than t0" is (t0 - t)/t0 > m. Times arrive as JSON decimals rounded to
// doubles, so a case a user wrote as exactly m (t0 = 1.1, t = 1.045) can land one ulp above m.
// A gain must exceed m by more than this to count; 1e-9 is far below any measurable difference
// (profiles report a relative CI of about 1e-2) and far above double rounding (about 1e-16).
inline constexpr double kMarginEpsilon = 1e-9;

struct Config {
  Scheme scheme = Scheme::milestone;
  double margin = 0.05;                    // milestone: the "more than 5% faster" threshold
  // Both baselines (eager and compile) at the candidate's precision when kernel-prof timed them so
  // (DESIGN.md §7); plain: the fp32 ones whatever the kernel computes in. The record shows both.
  CompileBaseline compile_baseline = CompileBaseline::precision_matched;
  SpeedupBaseline speedup_baseline = SpeedupBaseline::compile;  // speedup schemes: t_base / t
  double failure_value = -1.0;             // check failed (every scheme)
  double violation_penalty = -1.0;         // check.status policy_violation (every scheme)
  double log_clip = 1.0;                   // log-speedup: clamp(ln(t_base/t), -clip, +clip)
  bool allow_unprofiled = false;           // passed but no prof: score as correct, not faster

  // Reads a YAML (or JSON) file of the same keys: scheme, margin, compile_baseline,
  // speedup_baseline, failure_value, violation_penalty, log_clip, allow_unprofiled.
  // Unknown keys and bad values throw UsageError naming the key.
  void load_yaml(const std::string& path);
  void validate() const;  // UsageError on a margin outside [0,1), a clip <= 0, ...
  Json to_json() const;   // the settings, as recorded in the run's stderr summary
};

Scheme parse_scheme(const std::string& text);
CompileBaseline parse_compile_baseline(const std::string& text);
SpeedupBaseline parse_speedup_baseline(const std::string& text);
std::string scheme_name(Scheme s);

// The check statuses that are verdicts against the candidate (it compiled, ran and was judged, or
// could not be because of something in the bundle). "no_device" and a compile-only check are not.
bool is_failure_status(const std::string& status);

// What score() decided, for the summary counts.
enum class Verdict { scored_correct, scored_failed, scored_violation, unprofiled };

// The reward section for one record. Throws FieldError (missing check, non-numeric time, a passed
// check without prof unless allow_unprofiled, ...) for the bad-record rules of DESIGN.md §1.
Json score(const Json& record, const Config& config, Verdict* verdict = nullptr);

}  // namespace ca::reward_calc
