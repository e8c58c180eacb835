// run-store: create, fill, merge, query and summarize the SQLite run store.
#include <CLI/CLI.hpp>

#include "libcommon/cli.hpp"
#include "libcommon/errors.hpp"
#include "tools/run-store/commands.hpp"
#include "tools/run-store/report.hpp"

int main(int argc, char** argv) {
  ca::Cli cli("run-store", "The cuda-agent run store (SQLite): init, import, merge, copy, query, export, summary, report.",
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

  std::string copy_from, copy_to;
  auto* copy = app.add_subcommand("copy", "A whole, verified copy of a store (SQLite backup: a killed writer's -wal too)");
  copy->add_option("from", copy_from, "The store (may be in use, or left by a killed tool)")->required();
  copy->add_option("to", copy_to, "The copy (replaced only when the copy verified)")->required();

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

  ca::run_store::ReportCommand report_cmd;
  auto* report = app.add_subcommand("report", "Per data_source level: pass rate, speedups, fast_p, mean reward; --html: a page with plots");
  report->add_option("stores", report_cmd.stores, "Stores read as one (default: --store)");
  report->add_option("--store", opt.store_path, "Store path, when no store is named");
  report->add_option("--select", report_cmd.select, "Which candidate a task counts by: final (default) or best");
  report->add_option("--html", report_cmd.html, "Also write a self-contained HTML page with the tables and plots to FILE");
  report->add_flag("--json", report_cmd.json, "JSON Lines even on a terminal");
  report->add_flag("--table", report_cmd.table, "A table even when piped");

  return cli.run(argc, argv, [&]() -> int {
    if (*init) return ca::run_store::run_init(opt);
    if (*import) return ca::run_store::run_import(opt);
    if (*merge) return ca::run_store::run_merge(merge_out, merge_in);
    if (*copy) return ca::run_store::run_copy(copy_from, copy_to);
    if (*report) return ca::run_store::run_report(report_cmd, opt.resolved_store_path());
    if (*query) return ca::run_store::run_query(opt, sql);
    if (*export_cmd) return ca::run_store::run_export(opt, table);
    if (*summary) return ca::run_store::run_summary(opt, as_json, as_table);
    return ca::kExitUsage;
  });
}
