// run-store's subcommands that are not the report: init, import, merge, query, export, summary.
#pragma once
#include <string>
#include <vector>

#include "libcommon/cli.hpp"

namespace ca::run_store {

// Creates (or migrates) the store and says at which schema version it is.
int run_init(const CommonOptions& options);
// Records of any kind from --input into the store, one import run; bad records are named and left
// out (fatal under --strict).
int run_import(const CommonOptions& options);
// Folds the shard stores into `out` (created if missing) without duplicates; refuses `out` among them.
int run_merge(const std::string& out, const std::vector<std::string>& inputs);
// Rows as JSON Lines on stdout: one SQL statement's, or a whole table's.
// A verified copy of a live or killed store, WAL content included (ca::copy_store).
int run_copy(const std::string& from, const std::string& to);
int run_query(const CommonOptions& options, const std::string& sql);
int run_export(const CommonOptions& options, const std::string& table);
// One row per run (agent-run's locked calls folded under their episode's run): a table on a
// terminal (or with --table), JSON Lines otherwise (or with --json).
int run_summary(const CommonOptions& options, bool as_json, bool as_table);

}  // namespace ca::run_store
