// run-store's subcommands.
#include "tools/run-store/commands.hpp"

#include <unistd.h>

#include <algorithm>
#include <iostream>
#include <map>

#include "libcommon/errors.hpp"
#include "libcommon/file_identity.hpp"
#include "libcommon/log.hpp"
#include "libcommon/record_path.hpp"
#include "libcommon/store.hpp"
#include "tools/run-store/lineage.hpp"
#include "tools/run-store/summary_table.hpp"

namespace ca::run_store {

namespace {

// Before anything is opened or merged: OUT among the inputs (also through a symlink) would wait on
// its own lock and fail after 30 s.
void refuse_self_merge(const std::string& out, const std::vector<std::string>& inputs) {
  for (const auto& in : inputs)
    if (ca::same_file(out, in))
      throw ca::UsageError("merge: cannot merge store '" + in + "' into itself ('" + out + "' is the same file)");
}

}  // namespace

int run_init(const CommonOptions& opt) {
  ca::Store store(opt.resolved_store_path());
  ca::log::info("store ", store.path(), " at schema version ", store.schema_version());
  return ca::kExitOk;
}

int run_import(const CommonOptions& opt) {
  ca::Store store(opt.resolved_store_path());
  store.begin_run(opt);
  // Every record of the input (an import takes no shard), each kept by its kind; nothing written.
  struct Item : ca::RecordItem {
    std::string kind;
  };
  ca::RecordPathOptions path_options;
  path_options.store = &store;
  path_options.bad_left_out = "not imported";
  ca::RecordPath path(opt, path_options);
  std::map<std::string, int64_t> kinds;
  ca::RecordJob<Item> job;
  job.work = [&](int, Item& item) {
    item.kind = store.import_record(item.record);
    return ca::Outcome::done;
  };
  job.emit = [&](Item& item) { ++kinds[item.kind]; };
  int status = ca::kExitOk;
  try {
    ca::RecordReader reader(opt.input);
    path.run<Item>(
        ca::reader_source(reader),
        job, [](const ca::Json&) {});
  } catch (const ca::Error& e) {
    ca::report_error(e);
    status = e.exit_code;
  }
  try {
    path.end(status, "; imported " + ca::Json(kinds).dump());
  } catch (const ca::Error&) {
    if (status == ca::kExitOk) throw;  // else the error that ended the import is reported already
  }
  return status;
}

int run_merge(const std::string& merge_out, const std::vector<std::string>& merge_in) {
  refuse_self_merge(merge_out, merge_in);
  ca::Store out(merge_out);
  ca::Json total = ca::Json::object();
  for (const auto& path : merge_in) {
    ca::Json added = out.merge_from(path);
    ca::log::info("merged ", path, ": ", added.dump());
    for (auto& [k, v] : added.items()) total[k] = total.value(k, 0) + v.get<int64_t>();
  }
  ca::log::info("rows added: ", total.dump());
  return ca::kExitOk;
}

int run_copy(const std::string& from, const std::string& to) {
  ca::Json rows = ca::copy_store(from, to);
  int64_t total = 0;
  for (auto& [table, n] : rows.items()) total += n.get<int64_t>();
  ca::log::info("copied ", from, " to ", to, " (", total, " rows, verified)");
  return ca::kExitOk;
}

int run_query(const CommonOptions& opt, const std::string& sql) {
  ca::Store store(opt.resolved_store_path(), true);
  ca::RecordWriter out("-");
  store.query(sql, [&](const ca::Json& row) { out.write(row); });
  return ca::kExitOk;
}

int run_export(const CommonOptions& opt, const std::string& table) {
  const auto& names = ca::Store::table_names();
  if (std::find(names.begin(), names.end(), table) == names.end()) throw ca::UsageError("unknown table '" + table + "'");
  ca::Store store(opt.resolved_store_path(), true);
  ca::RecordWriter out("-");
  store.query("SELECT * FROM " + table + " ORDER BY rowid", [&](const ca::Json& row) { out.write(row); });
  return ca::kExitOk;
}

int run_summary(const CommonOptions& opt, bool as_json, bool as_table) {
  ca::Store store(opt.resolved_store_path(), true);
  ca::RecordWriter out("-");
  ca::Json runs = folded_summary(store);  // agent-run's locked calls under their episode's run
  if (as_table || (!as_json && isatty(STDOUT_FILENO))) std::cout << render_summary_table(runs);
  else
    for (const auto& row : runs) out.write(ca::Json(row));
  return ca::kExitOk;
}

}  // namespace ca::run_store
