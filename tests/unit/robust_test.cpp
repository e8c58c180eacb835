// Units of the record reader and the store under hostile input (issue 21): overflow, depth and
// encoding are bad input naming the line; mistyped ids are field errors; a foreign SQLite file is
// left untouched; a store is never merged into itself (read-only stores: tests/cli/store_safety.sh).
#include <doctest/doctest.h>
#include <sqlite3.h>

#include <filesystem>
#include <fstream>

#include "libcommon/cli.hpp"
#include "libcommon/errors.hpp"
#include "libcommon/file_identity.hpp"
#include "libcommon/jsonl.hpp"
#include "libcommon/paths.hpp"
#include "libcommon/record_loop.hpp"
#include "libcommon/store.hpp"

using namespace ca;
namespace fs = std::filesystem;

namespace {

// The InputError message a line gives, or "" when it parses.
std::string parse_error_of(const std::string& line) {
  try {
    parse_record_line(line, "line 7");
    return "";
  } catch (const InputError& e) {
    CHECK(e.exit_code == kExitBadInput);
    return e.what();
  }
}

std::string sqlite_text(const std::string& path, const std::string& sql) {
  sqlite3* db = nullptr;
  REQUIRE(sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READONLY, nullptr) == SQLITE_OK);
  sqlite3_stmt* st = nullptr;
  REQUIRE(sqlite3_prepare_v2(db, sql.c_str(), -1, &st, nullptr) == SQLITE_OK);
  std::string out;
  while (sqlite3_step(st) == SQLITE_ROW) {
    const unsigned char* t = sqlite3_column_text(st, 0);
    out += (out.empty() ? "" : ",") + std::string(t ? reinterpret_cast<const char*>(t) : "NULL");
  }
  sqlite3_finalize(st);
  sqlite3_close(db);
  return out;
}

}  // namespace

TEST_CASE("every parse failure is bad input naming the line") {
  // A number a double cannot hold was json's out_of_range (exit 4, no line).
  CHECK(parse_error_of(R"({"x": 1e999})").find("line 7") != std::string::npos);
  CHECK(parse_error_of(R"({"x": -1e999})").find("number overflow") != std::string::npos);
  CHECK(parse_error_of(R"({"x": 1e308})").empty());
  // Nesting deeper than the limit; brackets inside strings do not count.
  std::string deep = std::string(100000, '[') + std::string(100000, ']');
  CHECK(parse_error_of("{\"x\": " + deep + "}").find("nested deeper") != std::string::npos);
  CHECK(parse_error_of("{\"x\": \"" + std::string(5000, '[') + "\"}").empty());
  CHECK(parse_error_of("{\"a\": " + std::string(300, '[') + std::string(300, ']') + "}").empty());
  // Ill-formed UTF-8 and a stray byte.
  CHECK(parse_error_of("{\"x\": \"\xff\xfe\"}").find("line 7") != std::string::npos);
  CHECK(parse_error_of("{\"x\": 1}\x01").find("line 7") != std::string::npos);
}

TEST_CASE("a mistyped id is a field error, not a missing one") {
  CHECK_NOTHROW(check_record_ids(Json::parse(R"({"task_id":"t1","candidate_id":"c1"})")));
  CHECK_NOTHROW(check_record_ids(Json::parse(R"({"code":"x"})")));
  CHECK_THROWS_AS(check_record_ids(Json::parse(R"({"task_id":"t1","candidate_id":7})")), FieldError);
  CHECK_THROWS_AS(check_record_ids(Json::parse(R"({"task_id":["t1"]})")), FieldError);
  CHECK_THROWS_AS(check_record_ids(Json::parse(R"({"task_id":""})")), FieldError);
  CHECK_THROWS_AS(check_record_ids(Json::parse(R"({"task_id":null})")), FieldError);

  PrivateTempDir dir("unit");
  CommonOptions opt;
  opt.tool = "unit";
  Store s(dir.path() + "/ids.db");
  s.begin_run(opt);
  s.import_record(Json::parse(R"({"task_id":"t1","code":"the real code"})"));
  // A candidate whose candidate_id is a number was filed as a task over t1's row.
  CHECK_THROWS_AS(s.import_record(Json::parse(R"({"task_id":"t1","candidate_id":12,"bundle":{}})")), FieldError);
  CHECK_THROWS_AS(s.import_record(Json::parse(R"({"task_id":5,"code":"y"})")), FieldError);
  auto task = s.get_task("t1");
  REQUIRE(task.has_value());
  CHECK((*task)["code"] == "the real code");
}

TEST_CASE("a foreign SQLite file is refused untouched") {
  PrivateTempDir dir("unit");
  std::string path = dir.path() + "/other.db";
  {
    sqlite3* db = nullptr;
    REQUIRE(sqlite3_open(path.c_str(), &db) == SQLITE_OK);
    REQUIRE(sqlite3_exec(db, "CREATE TABLE notes (id INTEGER, text TEXT); INSERT INTO notes VALUES (1, 'mine');",
                         nullptr, nullptr, nullptr) == SQLITE_OK);
    sqlite3_close(db);
  }
  auto before = fs::file_size(path);
  CHECK_THROWS_AS(Store{path}, EnvironmentError);
  CHECK(sqlite_text(path, "SELECT name FROM sqlite_master WHERE type='table'") == "notes");
  CHECK(sqlite_text(path, "PRAGMA journal_mode") == "delete");
  CHECK(sqlite_text(path, "PRAGMA user_version") == "0");
  CHECK(fs::file_size(path) == before);
  CHECK_FALSE(fs::exists(path + "-wal"));

  // A file with our user_version but not our tables is not ours either; an empty file is new.
  std::string other = dir.path() + "/versioned.db";
  {
    sqlite3* db = nullptr;
    REQUIRE(sqlite3_open(other.c_str(), &db) == SQLITE_OK);
    sqlite3_exec(db, "CREATE TABLE t (x); PRAGMA user_version = 1;", nullptr, nullptr, nullptr);
    sqlite3_close(db);
  }
  CHECK_THROWS_AS(Store{other}, EnvironmentError);
  std::ofstream(dir.path() + "/empty.db").close();
  Store fresh(dir.path() + "/empty.db");
  CHECK(fresh.schema_version() == Store::kSchemaVersion);
}

TEST_CASE("a store is not merged into itself, also through a symlink") {
  PrivateTempDir dir("unit");
  std::string path = dir.path() + "/s.db";
  {
    Store s(path);
    CommonOptions opt;
    opt.tool = "unit";
    s.begin_run(opt);
    s.import_record(Json::parse(R"({"task_id":"t1","code":"x"})"));
    s.end_run(0);
  }
  fs::create_symlink(path, dir.path() + "/link.db");
  CHECK(same_file(path, dir.path() + "/link.db"));
  CHECK_FALSE(same_file(path, dir.path() + "/missing.db"));
  Store s(path);
  auto started = std::chrono::steady_clock::now();
  CHECK_THROWS_AS(s.merge_from(path), UsageError);
  CHECK_THROWS_AS(s.merge_from(dir.path() + "/link.db"), UsageError);
  CHECK(std::chrono::steady_clock::now() - started < std::chrono::seconds(5));  // was a 30 s lock wait
}
