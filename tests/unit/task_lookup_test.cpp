// The one task lookup (libcommon/task_lookup): the record's task, --tasks, the store, the record.
#include <doctest/doctest.h>

#include <fstream>

#include "libcommon/errors.hpp"
#include "libcommon/ids.hpp"
#include "libcommon/paths.hpp"
#include "libcommon/store.hpp"
#include "libcommon/task_lookup.hpp"

using namespace ca;

TEST_CASE("task lookup: each source in its order, and nothing when none has the task") {
  PrivateTempDir dir("tasks");
  const std::string tasks_path = dir.path() + "/tasks.jsonl";
  {
    std::ofstream f(tasks_path);
    f << R"({"task_id":"t1","code":"from file"})" << "\n" << R"({"code":"no id"})" << "\n";
  }
  TaskLookup lookup(tasks_path);
  CHECK(lookup.size() == 2);
  Store store(dir.path() + "/s.db");
  store.put_task(Json::parse(R"({"task_id":"t2","code":"from store"})"));

  // the record's own task object first, even when the file and the store know the id
  auto t = lookup.find(Json::parse(R"({"task_id":"t1","task":{"code":"own"}})"), "t1", &store);
  REQUIRE(t);
  CHECK((*t)["code"] == "own");
  t = lookup.find(Json::parse(R"({"task_id":"t1"})"), "t1", &store);
  REQUIRE(t);
  CHECK((*t)["code"] == "from file");
  // a task without task_id in the file is keyed by its content id, as ops-synth names it
  const std::string content_id = task_id_for(Json::parse(R"({"code":"no id"})"));
  t = lookup.find(Json::parse("{}"), content_id, nullptr);
  REQUIRE(t);
  CHECK((*t)["code"] == "no id");
  std::mutex mu;
  t = lookup.find(Json::parse(R"({"task_id":"t2"})"), "t2", &store, &mu);
  REQUIRE(t);
  CHECK((*t)["code"] == "from store");
  // a task record carrying its bundle is its own task
  t = lookup.find(Json::parse(R"({"task_id":"t3","code":"itself","bundle":{}})"), "t3", &store);
  REQUIRE(t);
  CHECK((*t)["code"] == "itself");
  CHECK_FALSE(lookup.find(Json::parse(R"({"task_id":"t4"})"), "t4", &store));
  CHECK_FALSE(TaskLookup().find(Json::parse(R"({"task_id":"t1"})"), "t1", nullptr));
}

TEST_CASE("task lookup: a bad --tasks line is the reader's error, naming the line") {
  PrivateTempDir dir("tasks-bad");
  const std::string path = dir.path() + "/tasks.jsonl";
  {
    std::ofstream f(path);
    f << R"({"task_id":"t1","code":"x"})" << "\n" << "not json\n";
  }
  try {
    TaskLookup lookup(path);
    FAIL("a bad line must throw");
  } catch (const Error& e) {
    CHECK(std::string(e.what()).find("tasks.jsonl line 2") != std::string::npos);
  }
}
