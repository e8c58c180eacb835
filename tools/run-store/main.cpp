// run-store: create, fill, merge, query and summarize the SQLite run store.
#include <unistd.h>

#include <iostream>

#include "libcommon/cli.hpp"
#include "libcommon/errors.hpp"
#include "libcommon/file_identity.hpp"
#include "libcommon/log.hpp"
#include "libcommon/record_loop.hpp"
#include "libcommon/store.hpp"
#include "tools/run-store/lineage.hpp"
#include "tools/run-store/report.hpp"
#include "tools/run-store/summary_table.hpp"

namespace {

// Before anything is opened or merged: OUT among the inputs (also through a symlink) would wait on
// its own lock and fail after 30 s.
void refuse_self_merge(const std::string& out, const std::vector<std::string>& inputs) {
  for (const auto& in : inputs)
    if (ca::same_file(out, in))
      throw ca::UsageError("merge: cannot merge store '" + in + "' into itself ('" + out + "' is the same file)");
}

}  // namespace

int main(int argc, char** argv) {
  ca::Cli cli("run-store", "The cuda-agent run store (SQLite): init, import, merge, query, export, summary, report.",
              "run-store merge merged.db shard-*.db && run-store summary --store merged.db",
              "kernel-check(1), kernel-prof(1), reward-calc(1), cuda-agent(7)");
  auto& app = cli.app();
  auto& opt = cli.options();
  app.require_subcommand(1);

  auto* init = app.add_subcommand("init", "Create (or migrate) a store");
  init->add_option("--store", opt.store_path, "Store path (default $CUDA_AGENT_STORE or ./cuda-agent.db)");

  auto* import = app.add_subcommand("import", "Import JSONL records of any kind into the store");
  // A sink: records in, rows in the store; nothing comes out (-o would be a promise it never kept).
  import->add_option("-i,--input", opt.input, "Input JSON Lines ('-' = stdin)")->capture_default_str();
  import->add_option("--store", opt.store_path, "Store path");
  cli.add_record_options(import);

  std::string merge_out;
  std::vector<std::string> merge_in;
  auto* merge = app.add_subcommand("merge", "Fold shard stores into OUT without duplicates (idempotent)");
  merge->add_option("out", merge_out, "The merged store (created if missing)")->required();
  merge->add_option("inputs", merge_in, "Shard stores")->required()->check(CLI::ExistingFile);

  std::string sql;
  auto* query = app.add_subcommand("query", "Run one SQL statement; rows as JSON Lines");
  query->add_option("sql", sql, "SQL (read-only use is up to you)")->required();
  query->add_option("--store", opt.store_path, "Store path");

  std::string table;
  auto* export_cmd = app.add_subcommand("export", "Print every row of a table as JSON Lines");
  export_cmd->add_option("table", table, "Table name")->required();
  export_cmd->add_option("--store", opt.store_path, "Store path");

  bool as_json = false, as_table = false;
  auto* summary = app.add_subcommand("summary", "Per run: counts, pass rate, speedup rates and geomeans, reward mean");
  summary->add_option("--store", opt.store_path, "Store path");
  summary->add_flag("--json", as_json, "JSON Lines even on a terminal");
  summary->add_flag("--table", as_table, "A table even when piped");

  ca::report::Command report_cmd;
  auto* report = app.add_subcommand("report", "Per data_source level: pass rate, speedups, fast_p, mean reward; --html: a page with plots");
  report->add_option("stores", report_cmd.stores, "Stores read as one (default: --store)");
  report->add_option("--store", opt.store_path, "Store path, when no store is named");
  report->add_option("--select", report_cmd.select, "Which candidate a task counts by: final (default) or best");
  report->add_option("--html", report_cmd.html, "Also write a self-contained HTML page with the tables and plots to FILE");
  report->add_flag("--json", report_cmd.json, "JSON Lines even on a terminal");
  report->add_flag("--table", report_cmd.table, "A table even when piped");

  return cli.run(argc, argv, [&]() -> int {
    if (*init) {
      ca::Store store(opt.resolved_store_path());
      ca::log::info("store ", store.path(), " at schema version ", store.schema_version());
      return ca::kExitOk;
    }
    if (*import) {
      ca::Store store(opt.resolved_store_path());
      store.begin_run(opt);
      ca::RecordReader reader(opt.input);
      ca::Counts counts;
      std::map<std::string, int64_t> kinds;
      ca::Record record;
      int status = ca::kExitOk;
      try {
        while (reader.next(record)) {
          ++counts.read;
          try {
            ++kinds[store.import_record(record)];
            ++counts.done;
          } catch (const ca::FieldError& e) {
            if (opt.strict) throw ca::InputError(reader.where() + ": " + e.field + ": " + e.reason);
            ca::log::warn(reader.where(), ": ", e.field, ": ", e.reason, " (not imported)");
            ++counts.bad;
          }
        }
      } catch (const ca::Error& e) {
        ca::report_error(e);
        status = e.exit_code;
      }
      ca::Json by_kind = kinds;
      store.end_run(status, counts.to_json());
      ca::log::info("imported ", counts.done, " records ", by_kind.dump(), ", ", counts.bad, " bad");
      return status;
    }
    if (*merge) {
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
    if (*report) return ca::report::run(report_cmd, opt.resolved_store_path());
    if (*query || *export_cmd || *summary) {
      ca::Store store(opt.resolved_store_path(), true);
      ca::RecordWriter out("-");
      if (*query) {
        store.query(sql, [&](const ca::Record& row) { out.write(row); });
      } else if (*export_cmd) {
        const auto& names = ca::Store::table_names();
        if (std::find(names.begin(), names.end(), table) == names.end())
          throw ca::UsageError("unknown table '" + table + "'");
        store.query("SELECT * FROM " + table + " ORDER BY rowid", [&](const ca::Record& row) { out.write(row); });
      } else {
        ca::Json runs = ca::folded_summary(store);  // agent-run's locked calls under their episode's run
        bool table_mode = as_table || (!as_json && isatty(STDOUT_FILENO));
        if (table_mode) std::cout << ca::render_summary_table(runs);
        else
          for (const auto& row : runs) out.write(ca::Record::parse(row.dump()));
      }
      return ca::kExitOk;
    }
    return ca::kExitUsage;
  });
}
