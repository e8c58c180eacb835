// Run lineage: the runs other runs started (agent-run's locked tool calls), and the summary folded by it.
#include "tools/run-store/lineage.hpp"

#include "libcommon/fields.hpp"

namespace ca::run_store {
namespace {

bool has_column(Store& store, const std::string& table, const std::string& column) {
  bool found = false;
  store.query("PRAGMA table_info(" + table + ")", [&](const Json& row) {
    if (string_or_empty(row, "name") == column) found = true;
  });
  return found;
}

}  // namespace

std::vector<RunInfo> read_runs(Store& store) {
  const bool recorded_parent = has_column(store, "runs", "parent_run_id");
  std::vector<RunInfo> runs;
  store.query(std::string("SELECT run_id, tool, host, started_at, ended_at, counts") +
                  (recorded_parent ? ", parent_run_id" : "") + " FROM runs ORDER BY started_at, rowid",
              [&](const Json& row) {
                RunInfo r;
                r.run_id = string_or_empty(row, "run_id");
                r.tool = string_or_empty(row, "tool");
                r.host = string_or_empty(row, "host");
                r.started_at = string_or_empty(row, "started_at");
                r.ended_at = string_or_empty(row, "ended_at");
                r.parent_run_id = string_or_empty(row, "parent_run_id");
                if (row.contains("counts") && row["counts"].is_object() && row["counts"].contains("read") &&
                    row["counts"]["read"].is_number_integer())
                  r.records_read = row["counts"]["read"].get<int64_t>();
                runs.push_back(r);
              });
  return runs;
}

std::map<std::string, std::string> locked_call_parents(const std::vector<RunInfo>& runs) {
  std::map<std::string, const RunInfo*> by_id;
  for (const auto& r : runs) by_id[r.run_id] = &r;
  std::map<std::string, std::string> parents;
  // Only what a run recorded decides: two pipelines on one store overlap in time, and a guess by time
  // gave each the other's locked calls.
  for (const auto& child : runs)
    if (!child.parent_run_id.empty() && child.parent_run_id != child.run_id && by_id.count(child.parent_run_id))
      parents[child.run_id] = child.parent_run_id;
  return parents;
}

Json folded_summary(Store& store) {
  const auto parents = locked_call_parents(read_runs(store));
  Json rows = store.summary();
  std::map<std::string, Json> folded;  // parent run_id -> {calls, checks, profiles}
  for (const auto& row : rows) {
    auto p = parents.find(row.value("run_id", std::string()));
    if (p == parents.end()) continue;
    Json& f = folded.emplace(p->second, Json::object()).first->second;
    f["locked_calls"] = f.value("locked_calls", 0) + 1;
    f["locked_checks"] = f.value("locked_checks", 0) + row.value("checks", 0);
    f["locked_profiles"] = f.value("locked_profiles", 0) + row.value("profiles", 0);
  }
  Json out = Json::array();
  for (auto& row : rows) {
    const std::string id = row.value("run_id", std::string());
    if (parents.count(id)) continue;
    auto f = folded.find(id);
    for (const char* key : {"locked_calls", "locked_checks", "locked_profiles"})
      row[key] = f == folded.end() ? 0 : f->second.value(key, 0);
    out.push_back(row);
  }
  return out;
}

}  // namespace ca::run_store
