// run-store report --html: one self-contained page (inline CSS, inline SVG drawn here, no script, no
// network) with the per-level tables, the speedup distribution, the loop's iterations and the roofline.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>

#include "ca/version.hpp"
#include "tools/run-store/report.hpp"
#include "tools/run-store/summary_table.hpp"

namespace ca::run_store {
namespace {

// HTML-escaped, control characters and invalid UTF-8 shown as the tables show them (\x1b): a raw ESC
// or C1 byte from task data is invalid HTML and reaches a terminal that prints the page.
std::string escape(const std::string& s) {
  std::string out;
  for (char c : terminal_safe(s)) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      default: out += c;
    }
  }
  return out;
}

std::string num(double v, const char* format = "%.4g") {
  char buf[48];
  std::snprintf(buf, sizeof buf, format, v);
  return buf;
}

std::string px(double v) { return num(v, "%.1f"); }

// A linear or log10 scale from a data interval onto pixels.
struct Scale {
  double lo, hi, p0, p1;
  bool log;
  double operator()(double v) const {
    double a = log ? std::log10(lo) : lo, b = log ? std::log10(hi) : hi, x = log ? std::log10(v) : v;
    return p0 + (x - a) / (b - a) * (p1 - p0);
  }
};

// Decade-aligned bounds around [lo, hi] for a log axis, at least one decade wide.
std::pair<double, double> decades(double lo, double hi) {
  double a = std::floor(std::log10(lo)), b = std::ceil(std::log10(hi));
  if (b <= a) b = a + 1;
  return {std::pow(10.0, a), std::pow(10.0, b)};
}

// Ticks of a log axis: each decade, with 2 and 5 between when there are few decades.
std::vector<double> log_ticks(double lo, double hi) {
  std::vector<double> t;
  const int a = static_cast<int>(std::lround(std::log10(lo))), b = static_cast<int>(std::lround(std::log10(hi)));
  for (int k = a; k <= b; ++k) {
    const double d = std::pow(10.0, k);
    t.push_back(d);
    if (b - a <= 2 && k < b) t.push_back(2 * d), t.push_back(5 * d);
  }
  return t;
}

const char* kCss = R"CSS(
body { font: 14px/1.45 system-ui, sans-serif; color: #1b1f24; margin: 2em auto; max-width: 1100px; padding: 0 1em; }
h1 { font-size: 1.5em; margin-bottom: .2em; } h2 { font-size: 1.15em; margin-top: 2em; border-bottom: 1px solid #d0d7de; }
p.meta, p.note, p.empty { color: #57606a; } code { font-size: 90%; }
table { border-collapse: collapse; margin: .6em 0; font-variant-numeric: tabular-nums; }
th, td { padding: .25em .7em; border-bottom: 1px solid #e5e8eb; text-align: right; }
th { background: #f6f8fa; font-weight: 600; } td:first-child, th:first-child { text-align: left; }
tr.total td { font-weight: 600; border-top: 2px solid #8c959f; }
figure.plot { margin: 1em 0; } figcaption { color: #57606a; margin-bottom: .3em; }
svg text { font: 11px system-ui, sans-serif; fill: #424a53; }
svg .axis { stroke: #8c959f; } svg .grid { stroke: #e5e8eb; } svg .ref { stroke: #cf222e; stroke-dasharray: 4 3; }
svg .fast { fill: #1a7f37; } svg .slow { fill: #bc4c00; } svg .memory { fill: #0969da; } svg .compute { fill: #8250df; }
svg .line-pass { stroke: #1a7f37; fill: none; stroke-width: 2; } svg .line-reward { stroke: #0969da; fill: none; stroke-width: 2; }
svg .dot-pass { fill: #1a7f37; } svg .dot-reward { fill: #0969da; }
)CSS";

// The per-level table of one baseline family ("" plain, "_precision_matched").
std::string level_table(const Report& r, const std::string& id, const std::string& suffix) {
  struct Col {
    std::string key, head;
    bool rate;
  };
  const std::vector<Col> cols = {{"tasks", "tasks", false},
                                 {"passed", "passed", false},
                                 {"pass_rate", "pass rate", true},
                                 {"faster_than_eager" + suffix, "faster than eager", true},
                                 {"faster_than_compile" + suffix, "faster than compile", true},
                                 {"geomean_vs_eager" + suffix, "geomean vs eager", false},
                                 {"geomean_vs_compile" + suffix, "geomean vs compile", false},
                                 {"fast_1_0" + suffix, "fast_1.0", true},
                                 {"fast_1_5" + suffix, "fast_1.5", true},
                                 {"fast_2_0" + suffix, "fast_2.0", true},
                                 {"reward_mean", "mean reward", false}};
  std::string h = "<table class=\"levels\" id=\"" + id + "\">\n<thead><tr><th>level</th>";
  for (const auto& c : cols) h += "<th>" + escape(c.head) + "</th>";
  h += "</tr></thead>\n<tbody>\n";
  for (const auto& row : r.levels) {
    const std::string level = row.value("level", std::string());
    h += "<tr data-level=\"" + escape(level) + "\"" + (level == "all" ? " class=\"total\"" : "") + "><td>" +
         escape(level) + "</td>";
    for (const auto& c : cols) {
      const Json v = row.contains(c.key) ? row[c.key] : Json();
      h += "<td data-key=\"" + escape(c.key) + "\">" + escape(c.rate ? format_rate(v) : format_number(v)) + "</td>";
    }
    h += "</tr>\n";
  }
  return h + "</tbody></table>\n";
}

// Strip plot: each timed task's speedup over torch.compile, one row per level, log scale.
std::string speedup_plot(const Report& r) {
  std::vector<std::string> levels;
  std::map<std::string, std::vector<const TaskResult*>> points;
  double lo = 0.5, hi = 2.0;
  for (const auto& t : r.tasks) {
    if (std::find(levels.begin(), levels.end(), t.level) == levels.end()) levels.push_back(t.level);
    if (!t.vs_compile) continue;
    points[t.level].push_back(&t);
    lo = std::min(lo, *t.vs_compile);
    hi = std::max(hi, *t.vs_compile);
  }
  if (points.empty()) return "<p class=\"empty\">No timed task: no speedup to plot (kernel-prof has not timed a passing candidate).</p>\n";
  auto [a, b] = decades(lo, hi);
  const double left = 170, right = 700, top = 20, row_h = 34;
  const double height = top + row_h * static_cast<double>(levels.size()) + 40;
  Scale x{a, b, left, right, true};
  std::string s = "<svg class=\"plot\" id=\"plot-speedup\" xmlns=\"http://www.w3.org/2000/svg\" width=\"720\" height=\"" +
                  px(height) + "\" viewBox=\"0 0 720 " + px(height) + "\" role=\"img\">\n";
  const double bottom = top + row_h * static_cast<double>(levels.size());
  for (double t : log_ticks(a, b)) {
    s += "<line class=\"grid\" x1=\"" + px(x(t)) + "\" x2=\"" + px(x(t)) + "\" y1=\"" + px(top) + "\" y2=\"" + px(bottom) + "\"/>";
    s += "<text x=\"" + px(x(t)) + "\" y=\"" + px(bottom + 14) + "\" text-anchor=\"middle\">" + num(t, "%g") + "x</text>\n";
  }
  s += "<line class=\"ref\" x1=\"" + px(x(1.0)) + "\" x2=\"" + px(x(1.0)) + "\" y1=\"" + px(top - 6) + "\" y2=\"" + px(bottom) + "\"/>\n";
  s += "<text x=\"" + px((left + right) / 2) + "\" y=\"" + px(bottom + 32) +
       "\" text-anchor=\"middle\">speedup over torch.compile (log scale; right of the red line: faster)</text>\n";
  for (std::size_t i = 0; i < levels.size(); ++i) {
    const double yc = top + row_h * (static_cast<double>(i) + 0.5);
    s += "<text x=\"" + px(left - 8) + "\" y=\"" + px(yc + 4) + "\" text-anchor=\"end\">" + escape(levels[i]) + "</text>\n";
    int k = 0;
    for (const auto* t : points[levels[i]]) {
      const double jitter = static_cast<double>((k++ * 7) % 11 - 5) * 2.2;  // fixed, so the page is reproducible
      s += "<circle class=\"" + std::string(*t->vs_compile > 1.0 ? "fast" : "slow") + "\" cx=\"" + px(x(*t->vs_compile)) +
           "\" cy=\"" + px(yc + jitter) + "\" r=\"4\" fill-opacity=\"0.75\"><title>" +
           escape((t->name.empty() ? t->task_id : t->name) + ": " + num(*t->vs_compile, "%.3f") + "x over compile") +
           "</title></circle>\n";
    }
  }
  s += "<line class=\"axis\" x1=\"" + px(left) + "\" x2=\"" + px(right) + "\" y1=\"" + px(bottom) + "\" y2=\"" + px(bottom) + "\"/>\n";
  return s + "</svg>\n";
}

// A line chart of one series against its position (1, 2, ...), with a hover title per point.
std::string line_chart(const std::string& id, const std::string& cls, const std::string& y_label, double y_lo,
                       double y_hi, const std::vector<std::pair<double, std::string>>& values, const std::string& x_label) {
  const double left = 60, right = 700, top = 14, bottom = 190;
  const std::size_t n = values.size();
  Scale x{1.0, n > 1 ? static_cast<double>(n) : 2.0, left + 10, right - 10, false};
  Scale y{y_lo, y_hi, bottom, top, false};
  std::string s = "<svg class=\"plot\" id=\"" + id +
                  "\" xmlns=\"http://www.w3.org/2000/svg\" width=\"720\" height=\"230\" viewBox=\"0 0 720 230\" role=\"img\">\n";
  for (int k = 0; k <= 4; ++k) {
    const double v = y_lo + (y_hi - y_lo) * k / 4.0;
    s += "<line class=\"grid\" x1=\"" + px(left) + "\" x2=\"" + px(right) + "\" y1=\"" + px(y(v)) + "\" y2=\"" + px(y(v)) + "\"/>";
    s += "<text x=\"" + px(left - 6) + "\" y=\"" + px(y(v) + 4) + "\" text-anchor=\"end\">" + num(v, "%.3g") + "</text>\n";
  }
  const std::size_t every = std::max<std::size_t>(1, n / 12);
  for (std::size_t i = 0; i < n; i += every)
    s += "<text x=\"" + px(x(static_cast<double>(i + 1))) + "\" y=\"" + px(bottom + 14) + "\" text-anchor=\"middle\">" +
         std::to_string(i + 1) + "</text>";
  s += "\n<text x=\"" + px((left + right) / 2) + "\" y=\"" + px(bottom + 32) + "\" text-anchor=\"middle\">" + escape(x_label) +
       "</text>\n<text x=\"14\" y=\"" + px((top + bottom) / 2) + "\" text-anchor=\"middle\" transform=\"rotate(-90 14 " +
       px((top + bottom) / 2) + ")\">" + escape(y_label) + "</text>\n";
  std::string points;
  for (std::size_t i = 0; i < n; ++i)
    points += (i ? " " : "") + px(x(static_cast<double>(i + 1))) + "," + px(y(values[i].first));
  if (n > 1) s += "<polyline class=\"line-" + cls + "\" points=\"" + points + "\"/>\n";
  for (std::size_t i = 0; i < n; ++i)
    s += "<circle class=\"dot-" + cls + "\" cx=\"" + px(x(static_cast<double>(i + 1))) + "\" cy=\"" + px(y(values[i].first)) +
         "\" r=\"3.5\"><title>" + escape(values[i].second) + "</title></circle>\n";
  s += "<line class=\"axis\" x1=\"" + px(left) + "\" x2=\"" + px(right) + "\" y1=\"" + px(bottom) + "\" y2=\"" + px(bottom) + "\"/>\n";
  return s + "</svg>\n";
}

std::string training_plots(const Report& r) {
  std::string h;
  if (r.iterations.empty()) {
    h += "<p class=\"empty\">No rewards in the store(s): no iteration to plot (reward-calc has not run).</p>\n";
  } else {
    std::vector<std::pair<double, std::string>> pass, reward;
    double lo = -1, hi = 3;
    for (std::size_t i = 0; i < r.iterations.size(); ++i) {
      const auto& it = r.iterations[i];
      const std::string where = "run " + it.run_id.substr(0, 8) + " (" + it.tool + ", " + it.started_at.substr(0, 19) +
                                "), " + std::to_string(it.rewards) + " rewards";
      pass.emplace_back(it.pass_rate, where + ": pass rate " + format_rate(Json(it.pass_rate)));
      reward.emplace_back(it.reward_mean, where + ": mean reward " + num(it.reward_mean, "%.3f"));
      lo = std::min(lo, it.reward_mean);
      hi = std::max(hi, it.reward_mean);
    }
    h += "<figure class=\"plot\"><figcaption>Pass rate of the rewarded candidates, per reward-calc run in run order "
         "(an iteration of the loop).</figcaption>\n" +
         line_chart("plot-pass-rate", "pass", "pass rate", 0, 1, pass, "iteration (reward-calc run, in run order)") +
         "</figure>\n";
    h += "<figure class=\"plot\"><figcaption>Mean reward per reward-calc run.</figcaption>\n" +
         line_chart("plot-reward", "reward", "mean reward", lo, hi, reward, "iteration (reward-calc run, in run order)") +
         "</figure>\n";
  }
  std::vector<std::pair<double, std::string>> ppo;
  double lo = 0, hi = 0;
  for (const auto& p : r.ppo_steps) {
    if (!p.reward_mean) continue;
    ppo.emplace_back(*p.reward_mean, "step " + std::to_string(p.step) + " (" + p.mode + "): reward_mean " +
                                         num(*p.reward_mean, "%.3f") + ", losses " + p.losses.dump());
    lo = std::min(lo, *p.reward_mean);
    hi = std::max(hi, *p.reward_mean);
  }
  if (!ppo.empty()) {
    if (hi <= lo) hi = lo + 1;
    h += "<figure class=\"plot\"><figcaption>ppo-step: the mean reward of each step's batch, in run order.</figcaption>\n" +
         line_chart("plot-ppo", "reward", "reward_mean", lo, hi, ppo, "ppo-step step (in run order)") + "</figure>\n";
    h += "<table class=\"ppo\" id=\"ppo-steps\"><thead><tr><th>step</th><th>mode</th><th>reward_mean</th><th>losses</th></tr></thead><tbody>\n";
    for (const auto& p : r.ppo_steps)
      h += "<tr><td>" + std::to_string(p.step) + "</td><td>" + escape(p.mode) + "</td><td>" +
           (p.reward_mean ? num(*p.reward_mean, "%.4f") : "-") + "</td><td><code>" + escape(p.losses.dump()) + "</code></td></tr>\n";
    h += "</tbody></table>\n";
  } else {
    h += "<p class=\"empty\">No ppo-step metrics in the store(s).</p>\n";
  }
  return h;
}

// Log-log scatter of each timed kernel against the time its roofline allows (kernel-prof --metrics).
std::string roofline_plot(const Report& r) {
  std::vector<const TaskResult*> pts;
  double lo = 1e300, hi = 0;
  for (const auto& t : r.tasks) {
    if (!t.time_us || !t.floor_us) continue;
    pts.push_back(&t);
    lo = std::min({lo, *t.time_us, *t.floor_us});
    hi = std::max({hi, *t.time_us, *t.floor_us});
  }
  if (pts.empty())
    return "<p class=\"empty\">No roofline data: kernel-prof records it with <code>--metrics</code> for tasks with FLOP "
           "and byte estimates.</p>\n";
  auto [a, b] = decades(lo, hi);
  const double left = 70, right = 470, top = 14, bottom = 414;
  Scale x{a, b, left, right, true}, y{a, b, bottom, top, true};
  std::string s = "<svg class=\"plot\" id=\"plot-roofline\" xmlns=\"http://www.w3.org/2000/svg\" width=\"520\" height=\"460\" "
                  "viewBox=\"0 0 520 460\" role=\"img\">\n";
  for (double t : log_ticks(a, b)) {
    s += "<line class=\"grid\" x1=\"" + px(x(t)) + "\" x2=\"" + px(x(t)) + "\" y1=\"" + px(top) + "\" y2=\"" + px(bottom) + "\"/>";
    s += "<line class=\"grid\" x1=\"" + px(left) + "\" x2=\"" + px(right) + "\" y1=\"" + px(y(t)) + "\" y2=\"" + px(y(t)) + "\"/>";
    s += "<text x=\"" + px(x(t)) + "\" y=\"" + px(bottom + 14) + "\" text-anchor=\"middle\">" + num(t, "%g") + "</text>";
    s += "<text x=\"" + px(left - 6) + "\" y=\"" + px(y(t) + 4) + "\" text-anchor=\"end\">" + num(t, "%g") + "</text>\n";
  }
  s += "<line class=\"ref\" x1=\"" + px(x(a)) + "\" y1=\"" + px(y(a)) + "\" x2=\"" + px(x(b)) + "\" y2=\"" + px(y(b)) +
       "\"><title>time = floor</title></line>\n";
  s += "<text x=\"" + px((left + right) / 2) + "\" y=\"" + px(bottom + 34) +
       "\" text-anchor=\"middle\">roofline floor, us (log)</text>\n<text x=\"16\" y=\"" + px((top + bottom) / 2) +
       "\" text-anchor=\"middle\" transform=\"rotate(-90 16 " + px((top + bottom) / 2) + ")\">kernel time, us (log)</text>\n";
  for (const auto* t : pts)
    s += "<circle class=\"" + std::string(t->bound == "compute" ? "compute" : "memory") + "\" cx=\"" + px(x(*t->floor_us)) +
         "\" cy=\"" + px(y(*t->time_us)) + "\" r=\"4\" fill-opacity=\"0.8\"><title>" +
         escape((t->name.empty() ? t->task_id : t->name) + ": " + num(*t->time_us) + " us, floor " + num(*t->floor_us) +
                " us (" + (t->bound.empty() ? "?" : t->bound) + " bound), " + num(*t->time_us / *t->floor_us, "%.2f") +
                "x the floor") +
         "</title></circle>\n";
  return s + "</svg>\n";
}

std::string task_table(const Report& r) {
  std::string h = "<details><summary>" + std::to_string(r.tasks.size()) +
                  " tasks, each by its selected candidate</summary>\n<table class=\"tasks\" id=\"tasks\"><thead><tr>"
                  "<th>task</th><th>level</th><th>candidate</th><th>candidates</th><th>passed</th><th>vs eager</th>"
                  "<th>vs compile</th><th>vs compile (matched)</th><th>reward</th></tr></thead><tbody>\n";
  auto opt = [](const std::optional<double>& v) { return v ? num(*v, "%.3f") : std::string("-"); };
  for (const auto& t : r.tasks)
    h += "<tr><td>" + escape(t.name.empty() ? t.task_id : t.name) + "</td><td>" + escape(t.level) + "</td><td><code>" +
         escape(t.candidate_id) + "</code></td><td>" + std::to_string(t.candidates) + "</td><td>" + (t.passed ? "yes" : "no") +
         "</td><td>" + opt(t.vs_eager) + "</td><td>" + opt(t.vs_compile) + "</td><td>" + opt(t.vs_compile_pm) + "</td><td>" +
         opt(t.reward) + "</td></tr>\n";
  return h + "</tbody></table></details>\n";
}

}  // namespace

std::string render_html(const Report& r) {
  std::string stores;
  for (const auto& s : r.stores) stores += (stores.empty() ? "" : ", ") + std::string("<code>") + escape(s) + "</code>";
  std::string h = "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n<title>cuda-agent report</title>\n<style>" +
                  std::string(kCss) + "</style></head>\n<body>\n<h1>cuda-agent report</h1>\n";
  h += "<p class=\"meta\">From " + stores + " by run-store " + escape(std::string(kVersion) + "+" + kGitRevision) +
       "; a task counts once, by its <b>" + select_name(r.select) + "</b> candidate (" +
       (r.select == Select::final ? "the episode's submitted candidate, else the newest one"
                                  : "of those that passed, the fastest over torch.compile; else the final one") +
       ").</p>\n";
  h += "<h2>Per level: plain baselines</h2>\n<p class=\"note\">Fractions are over every task of the level; a task is "
       "faster when its candidate passed and its speedup is above 1; fast_p: passed and more than p times faster than "
       "torch.compile (KernelBench). Geomeans are over the tasks that passed and were timed. Baselines in fp32, TF32 off.</p>\n";
  h += level_table(r, "levels-plain", "");
  h += "<h2>Per level: precision-matched baselines</h2>\n<p class=\"note\">Against eager and torch.compile timed with the "
       "precision the kernel computes in (TF32 on, or autocast to fp16/bf16); for an fp32 kernel that is the plain "
       "baseline.</p>\n";
  h += level_table(r, "levels-matched", "_precision_matched");
  if (r.tasks_without_candidates > 0)
    h += "<p class=\"note\">" + std::to_string(r.tasks_without_candidates) +
         (r.tasks_without_candidates == 1 ? " task" : " tasks") + " in the store(s) without a candidate, not counted.</p>\n";
  h += "<h2>Speedup distribution</h2>\n<figure class=\"plot\"><figcaption>Each timed task's speedup over torch.compile "
       "(plain baseline), by level.</figcaption>\n" +
       speedup_plot(r) + "</figure>\n";
  h += "<h2>Training</h2>\n" + training_plots(r);
  h += "<h2>Roofline</h2>\n<figure class=\"plot\"><figcaption>Each timed kernel's time against its roofline floor "
       "(the time the GPU's peak FLOP/s and DRAM bandwidth allow for the task's FLOP and byte estimates); on the red "
       "line a kernel runs at the floor.</figcaption>\n" +
       roofline_plot(r) + "</figure>\n";
  h += "<h2>Tasks</h2>\n" + task_table(r);
  return h + "</body></html>\n";
}

}  // namespace ca::run_store
