// Units of the store's defences (libcommon/store.cpp): a truncated body read back by key is an
// InputError naming the store and the row, never a crash of the reading tool; a store replaced or
// removed under an open Store refuses the next write; copy_store carries what a connection has
// not checkpointed.
#include <doctest/doctest.h>
#include <sqlite3.h>
#include <unistd.h>

#include <cstdio>
#include <string>

#include "libcommon/cli.hpp"
#include "libcommon/errors.hpp"
#include "libcommon/paths.hpp"
#include "libcommon/store.hpp"

using namespace ca;

namespace {
void sql(const std::string& path, const std::string& statement) {
  sqlite3* db = nullptr;
  REQUIRE(sqlite3_open(path.c_str(), &db) == SQLITE_OK);
  CHECK(sqlite3_exec(db, statement.c_str(), nullptr, nullptr, nullptr) == SQLITE_OK);
  sqlite3_close(db);
}
}  // namespace

TEST_CASE("store: a truncated body read by key names the store and row") {
  PrivateTempDir dir("store-body");
  const std::string path = dir.path() + "/s.db";
  {
    Store s(path);
    s.import_record(Json::parse(R"({"task_id":"t1","code":"x"})"));
  }
  sql(path, "UPDATE tasks SET body = substr(body, 1, 7)");
  Store s(path);
  CHECK_THROWS_WITH_AS(s.get_task("t1"), doctest::Contains("the tasks row of 't1' has a body that is not valid JSON"), InputError);
}

TEST_CASE("store: replaced or removed under an open Store, the next write is refused") {
  PrivateTempDir dir("store-identity");
  const std::string path = dir.path() + "/s.db", other = dir.path() + "/o.db";
  CommonOptions opt;
  opt.tool = "unit";
  Store s(path);
  s.begin_run(opt);
  s.import_record(Json::parse(R"({"task_id":"t1","code":"x"})"));
  { Store o(other); }
  REQUIRE(std::rename(other.c_str(), path.c_str()) == 0);
  CHECK_THROWS_WITH_AS(s.import_record(Json::parse(R"({"task_id":"t2","code":"x"})")), doctest::Contains("was replaced"),
                       EnvironmentError);
  CHECK_THROWS_AS(s.end_run(0), EnvironmentError);
  ::unlink(path.c_str());
  CHECK_THROWS_WITH_AS(s.put_task(Json::parse(R"({"task_id":"t3"})")), doctest::Contains("was removed"), EnvironmentError);
}

TEST_CASE("copy_store: rows a live connection has not checkpointed are in the copy") {
  PrivateTempDir dir("store-copy");
  const std::string path = dir.path() + "/s.db", copy = dir.path() + "/c.db";
  Store s(path);
  sqlite3_exec(s.handle(), "PRAGMA wal_autocheckpoint=0", nullptr, nullptr, nullptr);
  for (int i = 0; i < 50; ++i) s.import_record(Json{{"task_id", "t" + std::to_string(i)}, {"code", "x"}});
  Json rows = copy_store(path, copy);
  CHECK(rows["tasks"] == 50);
  Store c(copy, true);
  int64_t n = 0;
  c.query("SELECT COUNT(*) AS n FROM tasks", [&](const Json& r) { n = r["n"].get<int64_t>(); });
  CHECK(n == 50);
  CHECK_THROWS_AS(copy_store(path, path), UsageError);
}
