// run-store report: reads stores as one, selects a candidate per task, and folds tasks into levels.
#include "tools/run-store/report.hpp"

#include "libcommon/fields.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <set>
#include <tuple>

#include "libcommon/errors.hpp"
#include "libcommon/log.hpp"
#include "libcommon/paths.hpp"
#include "libcommon/store.hpp"
#include "tools/run-store/lineage.hpp"
#include "tools/run-store/summary_table.hpp"

namespace ca::run_store {
namespace {

// Where a row stands in time: its run's start, then the store it came from, then its rowid.
struct Seq {
  std::string started;
  int store = 0;
  int64_t rowid = 0;
  bool operator<(const Seq& o) const { return std::tie(started, store, rowid) < std::tie(o.started, o.store, o.rowid); }
};

// What the report shows of a profile, read once from its body (a few numbers, not the body's JSON:
// 333,000 profiles held as JSON took 830 MB).
struct ProfSummary {
  std::string status, bound;
  bool incorrect = false;  // "correct": false
  std::optional<double> vs_eager, vs_compile, vs_eager_pm, vs_compile_pm, time_us, floor_us;
};

struct Row {
  std::string run_id;
  int store = 0;
  int64_t rowid = 0;
  Json data;
  std::shared_ptr<const ProfSummary> prof;  // profiles only
};

struct CandidateState {
  std::string task_id, data_source;
  std::optional<Seq> candidate_seq, episode_seq, check_seq, prof_seq, reward_seq;
  std::optional<bool> check_correct;
  std::shared_ptr<const ProfSummary> prof;
  std::optional<double> reward;
  Seq newest;  // of any of its rows
  bool any = false;
};

std::optional<double> number(const Json& j, const char* key) {
  if (!j.is_object() || !j.contains(key)) return std::nullopt;
  const Json& v = j[key];
  if (v.is_number()) return v.get<double>();
  if (v.is_object() && v.contains("median") && v["median"].is_number()) return v["median"].get<double>();
  return std::nullopt;
}

std::optional<double> positive(std::optional<double> v) {
  if (v && std::isfinite(*v) && *v > 0) return v;
  return std::nullopt;
}

// The profile fields the report reads, rebuilt as a small object from their JSON texts (a dotted name
// becomes nested keys), so a row costs what the report shows, not its whole body.
Json profile_body(const Json& row) {
  Json body = Json::object();
  for (const auto& [key, value] : row.items()) {
    if (!value.is_string() || key == "candidate_id" || key == "run_id" || key == "task_id") continue;
    Json parsed;
    try {
      parsed = parse_json(value.get<std::string>(), key);
    } catch (const std::exception&) {
      continue;
    }
    Json* at = &body;
    std::size_t start = 0;
    for (std::size_t dot; (dot = key.find('.', start)) != std::string::npos; start = dot + 1) {
      Json& next = (*at)[key.substr(start, dot - start)];
      if (!next.is_object()) next = Json::object();
      at = &next;
    }
    (*at)[key.substr(start)] = std::move(parsed);
  }
  return body;
}

// Opens one store read-only, saying plainly when it is missing or is not a run store.
std::unique_ptr<Store> open_run_store(const std::string& path) {
  struct stat st{};
  if (stat(path.c_str(), &st) != 0) throw EnvironmentError("no store at '" + path + "' (no such file)");
  if (!S_ISREG(st.st_mode)) throw InputError("'" + path + "' is not a run store (not a regular file)");
  std::unique_ptr<Store> store;
  int version = 0;
  try {
    store = std::make_unique<Store>(path, true);
    version = store->schema_version();
  } catch (const Error& e) {
    // SQLite says so at the first statement (SQLITE_NOTADB), which the store reports as it comes.
    const std::string what = e.what();
    if (e.exit_code != kExitBadInput && what.find("not a database") == std::string::npos) throw;
    throw InputError("'" + path + "' is not a run store (" + what + ")");
  }
  bool has_runs = false;
  store->query("SELECT name FROM sqlite_master WHERE type = 'table' AND name = 'runs'", [&](const Json&) { has_runs = true; });
  if (version == 0 || !has_runs)
    throw InputError("'" + path + "' is an SQLite file but not a cuda-agent run store (schema version " +
                     std::to_string(version) + (has_runs ? "" : ", no runs table") + ")");
  return store;
}

// Natural order of level names: kernelbench#level2 before kernelbench#level10, torch#1 before torch#2.
bool natural_less(const std::string& a, const std::string& b) {
  std::size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    if (std::isdigit(static_cast<unsigned char>(a[i])) && std::isdigit(static_cast<unsigned char>(b[j]))) {
      std::size_t i2 = i, j2 = j;
      while (i2 < a.size() && std::isdigit(static_cast<unsigned char>(a[i2]))) ++i2;
      while (j2 < b.size() && std::isdigit(static_cast<unsigned char>(b[j2]))) ++j2;
      std::string x = a.substr(i, i2 - i), y = b.substr(j, j2 - j);
      x.erase(0, std::min(x.find_first_not_of('0'), x.size()));
      y.erase(0, std::min(y.find_first_not_of('0'), y.size()));
      if (x.size() != y.size()) return x.size() < y.size();
      if (x != y) return x < y;
      i = i2, j = j2;
    } else {
      if (a[i] != b[j]) return a[i] < b[j];
      ++i, ++j;
    }
  }
  return a.size() - i < b.size() - j;
}

double geomean(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += std::log(x);
  return std::exp(s / static_cast<double>(v.size()));
}

// The row of one level (or of all): fractions over every task of it, geomeans over the timed ones.
Json level_row(const std::string& level, const std::vector<const TaskResult*>& tasks, Select select) {
  const double n = static_cast<double>(tasks.size());
  int64_t candidates = 0, passed = 0, rewards = 0;
  double reward_sum = 0;
  for (const auto* t : tasks) {
    candidates += t->candidates;
    passed += t->passed;
    if (t->reward) ++rewards, reward_sum += *t->reward;
  }
  Json row;
  row["schema"] = "cuda-agent/report/v1";
  row["level"] = level;
  row["select"] = select_name(select);
  row["tasks"] = static_cast<int64_t>(tasks.size());
  row["candidates"] = candidates;
  row["passed"] = passed;
  row["pass_rate"] = n > 0 ? Json(passed / n) : Json(nullptr);
  // One baseline family: plain (fp32, TF32 off) or precision-matched.
  auto family = [&](const std::string& suffix, std::optional<double> TaskResult::*eager,
                    std::optional<double> TaskResult::*compile) {
    std::vector<double> e, c;
    int64_t faster_e = 0, faster_c = 0, fast15 = 0, fast2 = 0;
    for (const auto* t : tasks) {
      if (!t->passed) continue;
      if (auto s = t->*eager) {
        e.push_back(*s);
        faster_e += *s > 1.0;
      }
      if (auto s = t->*compile) {
        c.push_back(*s);
        faster_c += *s > 1.0;
        fast15 += *s > 1.5;
        fast2 += *s > 2.0;
      }
    }
    auto frac = [&](int64_t k) { return n > 0 ? Json(k / n) : Json(nullptr); };
    row["timed" + suffix] = static_cast<int64_t>(c.size());
    row["faster_than_eager" + suffix] = frac(faster_e);
    row["faster_than_compile" + suffix] = frac(faster_c);
    row["geomean_vs_eager" + suffix] = e.empty() ? Json(nullptr) : Json(geomean(e));
    row["geomean_vs_compile" + suffix] = c.empty() ? Json(nullptr) : Json(geomean(c));
    // KernelBench's fast_p: correct and faster than the baseline by more than p, over all tasks.
    row["fast_1_0" + suffix] = frac(faster_c);
    row["fast_1_5" + suffix] = frac(fast15);
    row["fast_2_0" + suffix] = frac(fast2);
  };
  family("", &TaskResult::vs_eager, &TaskResult::vs_compile);
  row["rewards"] = rewards;
  row["reward_mean"] = rewards > 0 ? Json(reward_sum / static_cast<double>(rewards)) : Json(nullptr);
  family("_precision_matched", &TaskResult::vs_eager_pm, &TaskResult::vs_compile_pm);
  return row;
}

// A candidate passed when its newest check did and its timed calls (if it was timed) were right too.
// A store without the check (kernel-check ran with --no-store) still shows a timed, correct profile.
bool passed(const CandidateState& c) {
  const bool prof_failed = c.prof && (c.prof->status == "failed" || c.prof->incorrect);
  if (prof_failed) return false;
  if (c.check_correct) return *c.check_correct;
  return c.prof && c.prof->status == "timed";
}

// Speedup against the precision-matched bar, as reward-calc reads it: kernel-prof times a matched
// baseline only when the kernel computes in tf32/fp16/bf16, and then the bar is the faster of it and
// the plain fp32 one (a lower precision never lowers the bar: autocast's casts can make PyTorch
// slower); for an fp32 kernel the plain baseline is the match.
std::optional<double> matched_speedup(const Json& prof, const std::string& mode) {
  const std::optional<double> plain = positive(number(prof, ("speedup_vs_" + mode).c_str()));
  std::optional<double> matched;
  const std::string key = "speedup_vs_" + mode + "_precision_matched";
  auto t = number(prof, "time_us");
  if (prof.contains(key)) matched = positive(number(prof, key.c_str()));
  else if (!prof.contains("matched_precision")) return plain;
  else if (prof.contains("baselines") && prof["baselines"].contains(mode + "_precision_matched") && t && *t > 0)
    if (auto b = number(prof["baselines"][mode + "_precision_matched"], "time_us")) matched = positive(*b / *t);
  if (matched && plain) return std::min(*matched, *plain);
  return matched;
}

ProfSummary summarize_prof(const Json& prof) {
  ProfSummary p;
  p.status = string_or_empty(prof, "status");
  p.incorrect = prof.contains("correct") && prof["correct"].is_boolean() && !prof["correct"].get<bool>();
  p.vs_eager = positive(number(prof, "speedup_vs_eager"));
  p.vs_compile = positive(number(prof, "speedup_vs_compile"));
  p.vs_eager_pm = matched_speedup(prof, "eager");
  p.vs_compile_pm = matched_speedup(prof, "compile");
  p.time_us = positive(number(prof, "time_us"));
  if (prof.contains("metrics") && prof["metrics"].is_object() && prof["metrics"].contains("roofline") &&
      prof["metrics"]["roofline"].is_object()) {
    p.floor_us = positive(number(prof["metrics"]["roofline"], "floor_us"));
    p.bound = string_or_empty(prof["metrics"]["roofline"], "bound");
  }
  return p;
}

}  // namespace

Select parse_select(const std::string& text) {
  if (text == "final") return Select::final;
  if (text == "best") return Select::best;
  throw UsageError("--select: expected final or best, got '" + text + "'");
}

const char* select_name(Select s) { return s == Select::final ? "final" : "best"; }

std::string format_rate(const Json& v) {
  if (!v.is_number()) return "-";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f%%", v.get<double>() * 100);
  return buf;
}

std::string format_number(const Json& v, const char* format) {
  if (!v.is_number()) return "-";
  if (v.is_number_integer()) return std::to_string(v.get<int64_t>());
  char buf[32];
  std::snprintf(buf, sizeof buf, format, v.get<double>());
  return buf;
}

namespace {

// Every store's rows the report shows, read in full first (rows refer to runs by id, and a run may
// come from another shard); the first store's row for a key is kept.
struct StoreRows {
  std::map<std::string, std::string> run_started, run_tool;
  std::vector<RunInfo> all_runs;
  std::map<std::string, Json> tasks;             // task_id -> {data_source, name, n_ops}
  std::map<std::string, std::vector<Row>> rows;  // table -> rows

  // A row's place in time: its run's start, then its store and rowid.
  Seq seq_of(const Row& r) const {
    auto it = run_started.find(r.run_id);
    return Seq{it == run_started.end() ? std::string() : it->second, r.store, r.rowid};
  }
};

StoreRows read_stores(const std::vector<std::string>& store_paths) {
  StoreRows in;
  // A row whose body is not JSON: left out, named on stderr (the first kShownSkips of them).
  constexpr int64_t kShownSkips = 20;
  int64_t skipped_rows = 0;
  auto valid_body = [&](const std::string& path, const std::string& table, const Json& r) {
    if (!r.contains("ok") || !r["ok"].is_number_integer() || r["ok"].get<int64_t>() != 0) return true;
    if (++skipped_rows <= kShownSkips)
      log::warn("report: '", terminal_safe(path), "': ", table, " row ", r.value("seq", int64_t(0)),
                terminal_safe(table == "tasks" ? " (task " + string_or_empty(r, "task_id") + ")"
                              : table == "ppo_steps" ? " (step " + string_or_empty(r, "step_id") + ", run " + string_or_empty(r, "run_id") + ")"
                                                     : " (candidate " + string_or_empty(r, "candidate_id") + ", run " + string_or_empty(r, "run_id") + ")"),
                ": body is not valid JSON (truncated?): row skipped");
    return false;
  };
  std::set<std::string> seen;
  auto keep = [&](const std::string& table, const std::string& key) { return seen.insert(table + "\x1f" + key).second; };
  for (int s = 0; s < static_cast<int>(store_paths.size()); ++s) {
    auto store = open_run_store(store_paths[s]);
    for (const auto& r : read_runs(*store))
      if (in.run_started.emplace(r.run_id, r.started_at).second) in.run_tool[r.run_id] = r.tool, in.all_runs.push_back(r);
    // Only the fields the report shows are read (never whole bodies: 333k profiles held whole took
    // over 8 GB), and a body that is not JSON (a truncated row) is skipped with a warning naming it
    // rather than failing every query: json_valid guards each extraction.
    store->query("SELECT rowid AS seq, task_id, json_valid(body) AS ok, "
                 "CASE WHEN json_valid(body) THEN json_extract(body, '$.data_source') END AS data_source, "
                 "CASE WHEN json_valid(body) THEN json_extract(body, '$.name') END AS name, "
                 "CASE WHEN json_valid(body) AND json_type(body, '$.ops') = 'array' THEN json_array_length(body, '$.ops') END "
                 "AS n_ops FROM tasks",
                 [&](const Json& r) {
                   if (!valid_body(store_paths[s], "tasks", r)) return;
                   in.tasks.emplace(string_or_empty(r, "task_id"), r);
                 });
    const std::string prof_fields = [] {
      std::string f;
      for (const char* k : {"status", "correct", "time_us", "speedup_vs_eager", "speedup_vs_compile",
                            "speedup_vs_eager_precision_matched", "speedup_vs_compile_precision_matched",
                            "matched_precision", "baselines.eager_precision_matched.time_us",
                            "baselines.compile_precision_matched.time_us", "metrics.roofline.floor_us",
                            "metrics.roofline.bound"})
        f += std::string(", CASE WHEN json_valid(body) THEN body -> '$.") + k + "' END AS \"" + k + "\"";
      return f;
    }();
    const std::vector<std::pair<std::string, std::string>> tables = {
        {"candidates", "SELECT rowid AS seq, candidate_id, task_id, run_id, json_valid(body) AS ok, "
                       "CASE WHEN json_valid(body) THEN json_extract(body, '$.task.data_source') END AS data_source "
                       "FROM candidates"},
        {"checks", "SELECT rowid AS seq, candidate_id, run_id, task_id, correct FROM checks"},
        {"profiles", "SELECT rowid AS seq, candidate_id, run_id, task_id, json_valid(body) AS ok" + prof_fields +
                         " FROM profiles"},
        {"rewards", "SELECT rowid AS seq, candidate_id, run_id, task_id, value FROM rewards"},
        {"episodes", "SELECT rowid AS seq, candidate_id, run_id, task_id FROM episodes"},
        {"ppo_steps", "SELECT rowid AS seq, step_id, run_id, json_valid(body) AS ok, "
                      "CASE WHEN json_valid(body) THEN json_object('mode', body -> '$.mode', 'step', body -> '$.step', "
                      "'reward_mean', body -> '$.reward_mean', 'losses', body -> '$.losses') END AS body FROM ppo_steps"}};
    for (const auto& [table, sql] : tables) {
      store->query(sql, [&](const Json& r) {
        if (!valid_body(store_paths[s], table, r)) return;
        // candidates are keyed by candidate_id alone; the per-run tables by (id, run).
        std::string key = table == "ppo_steps" ? string_or_empty(r, "step_id") : string_or_empty(r, "candidate_id");
        if (table != "candidates") key += "\x1f" + string_or_empty(r, "run_id");
        if (!keep(table, key)) return;
        // A row keeps only what the report reads of it (its run, store and rowid are in Row): the
        // profile's fields as one small body, not each besides as its JSON text.
        Json data = Json::object();
        for (const char* k : {"candidate_id", "task_id", "data_source", "correct", "value", "body", "step_id"})
          if (r.contains(k) && !r[k].is_null()) data[k] = r[k];
        std::shared_ptr<const ProfSummary> prof;
        if (table == "profiles") prof = std::make_shared<const ProfSummary>(summarize_prof(profile_body(r)));
        in.rows[table].push_back(Row{string_or_empty(r, "run_id"), s, r.value("seq", int64_t(0)), std::move(data), std::move(prof)});
      });
    }
  }
  if (skipped_rows > kShownSkips)
    log::warn("report: ", skipped_rows, " rows in all skipped for a body that is not JSON (", kShownSkips, " named above)");
  return in;
}

// Per candidate: its newest check, profile, reward, and where its candidate and episode rows stand.
std::map<std::string, CandidateState> candidate_states(StoreRows& in) {
  auto seq_of = [&](const Row& r) { return in.seq_of(r); };
  auto& rows = in.rows;
  std::map<std::string, CandidateState> cands;
  auto touch = [&](const Row& r) -> CandidateState& {
    CandidateState& c = cands[string_or_empty(r.data, "candidate_id")];
    if (c.task_id.empty()) c.task_id = string_or_empty(r.data, "task_id");
    Seq q = seq_of(r);
    if (!c.any || c.newest < q) c.newest = q, c.any = true;
    return c;
  };
  auto newer = [](const std::optional<Seq>& have, const Seq& q) { return !have || *have < q; };
  for (const auto& r : rows["candidates"]) {
    CandidateState& c = touch(r);
    Seq q = seq_of(r);
    if (newer(c.candidate_seq, q)) c.candidate_seq = q;
    if (c.data_source.empty()) c.data_source = string_or_empty(r.data, "data_source");
  }
  for (const auto& r : rows["episodes"]) {
    CandidateState& c = touch(r);
    if (Seq q = seq_of(r); newer(c.episode_seq, q)) c.episode_seq = q;
  }
  for (const auto& r : rows["checks"]) {
    CandidateState& c = touch(r);
    if (Seq q = seq_of(r); newer(c.check_seq, q)) {
      c.check_seq = q;
      // The column is NULL for a check that gave no verdict (compile-only, no device): then absent from data.
      const auto it = r.data.find("correct");
      c.check_correct = it != r.data.end() && it->is_number() ? std::optional<bool>(it->get<int64_t>() != 0) : std::nullopt;
    }
  }
  // Each table's rows are let go once folded (rewards are read again by add_iterations).
  for (auto& r : rows["profiles"]) {
    CandidateState& c = touch(r);
    if (Seq q = seq_of(r); newer(c.prof_seq, q)) c.prof_seq = q, c.prof = r.prof;
  }
  for (const char* table : {"candidates", "episodes", "checks", "profiles"}) std::vector<Row>().swap(rows[table]);
  for (const auto& r : rows["rewards"]) {
    CandidateState& c = touch(r);
    if (Seq q = seq_of(r); newer(c.reward_seq, q)) c.reward_seq = q, c.reward = number(r.data, "value");
  }
  return cands;
}

// One task's row: its selected candidate (final: the newest episode's; best: the fastest that passed)
// and what the report shows of it.
TaskResult task_result(const std::string& task_id, const std::vector<std::pair<std::string, const CandidateState*>>& list,
                       std::map<std::string, Json>& tasks, Select select) {
  // final: newest episode, else newest candidate row, else newest row of any kind.
  auto final_key = [](const CandidateState& c) {
    return std::make_tuple(c.episode_seq.has_value(), c.episode_seq.value_or(Seq{}), c.candidate_seq.has_value(),
                           c.candidate_seq.value_or(Seq{}), c.newest);
  };
  const std::pair<std::string, const CandidateState*>* chosen = &list.front();
  for (const auto& e : list)
    if (final_key(*chosen->second) < final_key(*e.second)) chosen = &e;
  if (select == Select::best) {
    const std::pair<std::string, const CandidateState*>* best = nullptr;
    auto best_key = [&](const CandidateState& c) {
      return std::make_tuple(c.prof ? c.prof->vs_compile.value_or(0.0) : 0.0,
                             c.prof ? c.prof->vs_eager.value_or(0.0) : 0.0, c.newest);
    };
    for (const auto& e : list)
      if (passed(*e.second) && (!best || best_key(*best->second) < best_key(*e.second))) best = &e;
    if (best) chosen = best;
  }
  const CandidateState& c = *chosen->second;
  TaskResult t;
  t.task_id = task_id;
  t.candidate_id = chosen->first;
  t.candidates = static_cast<int>(list.size());
  auto meta = tasks.find(task_id);
  if (meta != tasks.end()) {
    t.name = string_or_empty(meta->second, "name");
    t.level = string_or_empty(meta->second, "data_source");
  }
  for (const auto& e : list)
    if (t.level.empty()) t.level = e.second->data_source;
  if (t.level.empty() && meta != tasks.end() && meta->second["n_ops"].is_number_integer())
    t.level = "torch#" + std::to_string(meta->second["n_ops"].get<int64_t>());
  if (t.level.empty()) t.level = "unknown";
  t.passed = passed(c);
  if (t.passed && c.prof && c.prof->status == "timed") {
    t.vs_eager = c.prof->vs_eager;
    t.vs_compile = c.prof->vs_compile;
    t.vs_eager_pm = c.prof->vs_eager_pm;
    t.vs_compile_pm = c.prof->vs_compile_pm;
    t.time_us = c.prof->time_us;
    t.floor_us = c.prof->floor_us;
    t.bound = c.prof->bound;
  }
  t.reward = c.reward;
  return t;
}

// The per-level rows, levels in the tasks' (sorted) order, then "all".
void add_levels(Report& report, Select select) {
  std::vector<const TaskResult*> all;
  std::map<std::string, std::vector<const TaskResult*>> levels;
  std::vector<std::string> order;
  for (const auto& t : report.tasks) {
    if (!levels.count(t.level)) order.push_back(t.level);
    levels[t.level].push_back(&t);
    all.push_back(&t);
  }
  for (const auto& level : order) report.levels.push_back(level_row(level, levels[level], select));
  report.levels.push_back(level_row("all", all, select));

}

// Iterations: every reward row (not only the selected candidates') by the run that wrote it.
void add_iterations(Report& report, StoreRows& in, const std::map<std::string, CandidateState>& cands) {
  auto& rows = in.rows;
  std::map<std::string, std::pair<int, std::pair<double, int>>> per_run;  // run -> (n, (sum, passed))
  for (const auto& r : rows["rewards"]) {
    auto v = number(r.data, "value");
    if (!v) continue;
    auto& acc = per_run[r.run_id];
    acc.first += 1;
    acc.second.first += *v;
    auto c = cands.find(string_or_empty(r.data, "candidate_id"));
    acc.second.second += c != cands.end() && passed(c->second);
  }
  for (const auto& run : in.all_runs) {
    auto it = per_run.find(run.run_id);
    if (it == per_run.end()) continue;
    Iteration i;
    i.run_id = run.run_id;
    i.tool = run.tool;
    i.started_at = run.started_at;
    i.rewards = it->second.first;
    i.reward_mean = it->second.second.first / i.rewards;
    i.pass_rate = static_cast<double>(it->second.second.second) / i.rewards;
    report.iterations.push_back(i);
  }
}

// ppo-step's steps, in the order they ran.
void add_ppo_steps(Report& report, StoreRows& in) {
  std::vector<std::pair<Seq, PpoStep>> steps;
  for (const auto& r : in.rows["ppo_steps"]) {
    const Json& body = r.data["body"];
    PpoStep p;
    p.run_id = r.run_id;
    p.mode = string_or_empty(body, "mode");
    p.step = body.contains("step") && body["step"].is_number_integer() ? body["step"].get<int64_t>() : 0;
    p.reward_mean = number(body, "reward_mean");
    if (body.contains("losses") && body["losses"].is_object()) p.losses = Json(body["losses"]);
    steps.emplace_back(in.seq_of(r), p);
  }
  std::sort(steps.begin(), steps.end(), [](const auto& a, const auto& b) {
    return std::tie(a.first.started, a.second.step, a.first.store, a.first.rowid) <
           std::tie(b.first.started, b.second.step, b.first.store, b.first.rowid);
  });
  for (auto& s : steps) report.ppo_steps.push_back(s.second);
}

}  // namespace

Report build_report(const std::vector<std::string>& store_paths, Select select) {
  Report report;
  report.stores = store_paths;
  report.select = select;
  StoreRows in = read_stores(store_paths);
  const std::map<std::string, CandidateState> cands = candidate_states(in);

  // Tasks, each by its selected candidate.
  std::map<std::string, std::vector<std::pair<std::string, const CandidateState*>>> by_task;
  for (const auto& [id, c] : cands)
    if (!id.empty() && !c.task_id.empty()) by_task[c.task_id].emplace_back(id, &c);
  for (const auto& [task_id, t] : in.tasks)
    if (!by_task.count(task_id)) ++report.tasks_without_candidates;
  for (const auto& [task_id, list] : by_task) report.tasks.push_back(task_result(task_id, list, in.tasks, select));
  std::sort(report.tasks.begin(), report.tasks.end(), [](const TaskResult& a, const TaskResult& b) {
    if (a.level != b.level) return natural_less(a.level, b.level);
    return std::tie(a.name, a.task_id) < std::tie(b.name, b.task_id);
  });
  add_levels(report, select);
  add_iterations(report, in, cands);
  add_ppo_steps(report, in);
  return report;
}

std::string render_table(const Report& report) {
  // Two blocks of the same shape: the plain baselines, then the precision-matched ones.
  auto block = [&](const std::string& suffix) {
    const std::vector<std::pair<std::string, std::string>> columns = {
        {"level", "level"},
        {"tasks", "tasks"},
        {"pass_rate", "pass"},
        {"faster_than_eager" + suffix, ">eager"},
        {"faster_than_compile" + suffix, ">compile"},
        {"geomean_vs_eager" + suffix, "gm/eager"},
        {"geomean_vs_compile" + suffix, "gm/compile"},
        {"fast_1_0" + suffix, "fast_1.0"},
        {"fast_1_5" + suffix, "fast_1.5"},
        {"fast_2_0" + suffix, "fast_2.0"},
        {"reward_mean", "r_mean"}};
    std::vector<std::vector<std::string>> cells(1);
    for (const auto& c : columns) cells[0].push_back(c.second);
    for (const auto& row : report.levels) {
      std::vector<std::string> line;
      for (const auto& [key, _] : columns) {
        const Json v = row.contains(key) ? row[key] : Json();
        if (v.is_string()) line.push_back(terminal_safe(v.get<std::string>()));
        else if (key == "pass_rate" || key.rfind("faster", 0) == 0 || key.rfind("fast_", 0) == 0) line.push_back(format_rate(v));
        else line.push_back(format_number(v));
      }
      cells.push_back(line);
    }
    std::vector<std::size_t> width(columns.size(), 0);
    for (const auto& line : cells)
      for (std::size_t i = 0; i < line.size(); ++i) width[i] = std::max(width[i], line[i].size());
    std::string out;
    for (const auto& line : cells) {
      for (std::size_t i = 0; i < line.size(); ++i) {
        // The level name left-aligned, the numbers right-aligned.
        std::string pad(width[i] - line[i].size(), ' ');
        out += i == 0 ? line[i] + pad : pad + line[i];
        if (i + 1 < line.size()) out += "  ";
      }
      out += '\n';
    }
    return out;
  };
  std::string out = "select: " + std::string(select_name(report.select)) + "; speedups over the plain baselines (fp32, TF32 off)\n";
  out += block("");
  out += "\nspeedups over the precision-matched baselines\n";
  out += block("_precision_matched");
  return out;
}

int run_report(const ReportCommand& command, const std::string& default_store) {
  if (command.json && command.table) throw UsageError("report: --json and --table exclude each other");
  const Select select = parse_select(command.select);
  const Report r = build_report(command.stores.empty() ? std::vector<std::string>{default_store} : command.stores, select);
  if (!command.html.empty()) {
    write_file_atomic(command.html, render_html(r));  // whole or not at all, every step checked
    log::info("report: wrote ", command.html);
  }
  if (command.table || (!command.json && isatty(STDOUT_FILENO))) {
    std::cout << render_table(r) << std::flush;
  } else {
    RecordWriter out("-");
    for (const auto& row : r.levels) out.write(row);
  }
  auto many = [](std::size_t n, const char* what) { return log::cat(n, " ", what, n == 1 ? "" : "s"); };
  log::info("report: ", many(r.tasks.size(), "task"), " in ", many(r.levels.size() - 1, "level"), ", by the ",
            select_name(select), " candidate",
            r.tasks_without_candidates ? "; " + many(r.tasks_without_candidates, "task") + " without a candidate not counted"
                                       : std::string());
  return kExitOk;
}

}  // namespace ca::run_store
