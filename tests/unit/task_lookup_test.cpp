// The one task lookup (libcommon/task_lookup): the record's task, --tasks, the store, the record.
#include <doctest/doctest.h>

#include <fstream>

#include "libcommon/errors.hpp"
#include "libcommon/http_server.hpp"
#include "libcommon/ids.hpp"
#include "libcommon/paths.hpp"
#include "libcommon/service.hpp"
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

TEST_CASE("client tasks: refused by a service, taken only under their content id with --accept-tasks") {
  Json task = Json::parse(R"({"code":"class Model: pass","init_inputs":[1]})");
  const std::string id = task_id_for(task);
  Json rec = {{"task_id", id}, {"task", task}, {"bundle", Json::object()}};
  // a stream trusts its input; a service refuses any task code a client sends, by field
  CHECK_NOTHROW(screen_client_task(rec, id, ClientTasks::trusted));
  try {
    screen_client_task(rec, id, ClientTasks::refused);
    FAIL("refused must throw");
  } catch (const FieldError& e) {
    CHECK(e.field == "task");
  }
  Json self = task;
  self["task_id"] = id;
  try {
    screen_client_task(self, id, ClientTasks::refused);
    FAIL("a task record's own code must be refused");
  } catch (const FieldError& e) {
    CHECK(e.field == "code");
  }
  // verified: its own content id only; another task's code under that id, or a name, is refused
  CHECK_NOTHROW(screen_client_task(rec, id, ClientTasks::verified));
  Json other = rec;
  other["task"]["code"] = "class Model: evil";
  CHECK_THROWS_AS(screen_client_task(other, id, ClientTasks::verified), FieldError);
  CHECK_THROWS_AS(screen_client_task(rec, "example-task", ClientTasks::verified), FieldError);
  Json not_object = rec;
  not_object["task"] = "code";
  CHECK_THROWS_AS(screen_client_task(not_object, id, ClientTasks::verified), FieldError);
  // the lookup applies the policy before any source
  TaskLookup lookup("", ClientTasks::refused);
  CHECK_THROWS_AS(lookup.find(rec, id, nullptr), FieldError);
  CHECK_FALSE(lookup.find(Json{{"task_id", id}}, id, nullptr));
  // the cache key is the content of what the worker runs, whatever the record's id
  Json seeded = task;
  seeded["seed"] = 7;
  CHECK(task_cache_key(task) != task_cache_key(seeded));
  CHECK(task_cache_key(task) == task_cache_key(Json::parse(R"({"init_inputs":[1],"code":"class Model: pass","task_id":"x"})")));
}

TEST_CASE("task ids: the reference's mode is part of the task (an eval task is another task)") {
  Json task = Json::parse(R"({"code":"class Model: pass","init_inputs":[1]})");
  Json train = task, eval = task, legacy_null = task;
  train["reference"] = {{"mode", "train"}, {"stochastic", false}};
  eval["reference"] = {{"mode", "eval"}};
  legacy_null["reference"] = {{"stochastic", true}};
  // train is the default: a record that states it keeps the id (and cache key) of one that does not
  CHECK(task_id_for(train) == task_id_for(task));
  CHECK(task_id_for(legacy_null) == task_id_for(task));
  CHECK(task_cache_key(train) == task_cache_key(task));
  CHECK(task_id_for(eval) != task_id_for(task));
  CHECK(task_cache_key(eval) != task_cache_key(task));
  // so a service with --accept-tasks takes an eval task only under its own id, never under the
  // train task's (whose verdicts are stored under candidate ids made from that id)
  const std::string id = task_id_for(task);
  Json rec = {{"task_id", id}, {"task", eval}, {"bundle", Json::object()}};
  CHECK_THROWS_AS(screen_client_task(rec, id, ClientTasks::verified), FieldError);
  rec["task_id"] = task_id_for(eval);
  CHECK_NOTHROW(screen_client_task(rec, task_id_for(eval), ClientTasks::verified));
}

TEST_CASE("candidate ids: a record's candidate_id must be the hash of its task_id and bundle") {
  Json bundle = Json::parse(R"({"kernels":{"a.cu":"x"},"plan":"forward: []"})");
  Json rec = {{"task_id", "t1"}, {"bundle", bundle}, {"candidate_id", candidate_id_for("t1", bundle)}};
  CHECK_NOTHROW(verify_candidate_id(rec));
  Json forged = rec;
  forged["bundle"]["kernels"]["a.cu"] = "y";  // another bundle under the first one's id
  try {
    verify_candidate_id(forged);
    FAIL("a forged id must throw");
  } catch (const FieldError& e) {
    CHECK(e.field == "candidate_id");
  }
  Json moved = rec;
  moved["task_id"] = "t2";  // the same bundle claimed for another task
  CHECK_THROWS_AS(verify_candidate_id(moved), FieldError);
  CHECK_NOTHROW(verify_candidate_id(Json{{"task_id", "t1"}, {"candidate_id", "c1"}}));  // no bundle: nothing to check
}

TEST_CASE("service bounds: the bearer secret compared whole, JSON values counted before a parse") {
  const std::string secret = "0123456789abcdef-secret";
  CHECK(http::bearer_matches("Bearer " + secret, secret));
  CHECK(http::bearer_matches("bearer " + secret, secret));
  CHECK_FALSE(http::bearer_matches("Bearer " + secret.substr(0, secret.size() - 1), secret));
  CHECK_FALSE(http::bearer_matches("Bearer " + secret + "x", secret));
  CHECK_FALSE(http::bearer_matches("Bearer ", secret));
  CHECK_FALSE(http::bearer_matches("", secret));
  CHECK_FALSE(http::bearer_matches(secret, secret));
  CHECK_FALSE(http::bearer_matches("Basic " + secret, secret));
  CHECK(http::bearer_matches("", ""));  // no secret: every request passes
  CHECK(count_json_values(R"({"a":"[{,,,}]","b":[1,2,3]})", 100) == 5);  // brackets and commas in strings don't count
  std::string flat = "[";
  for (int i = 0; i < 1000; ++i) flat += "{},";
  flat += "{}]";
  CHECK(count_json_values(flat, 1 << 20) == 2002);
  CHECK(count_json_values(flat, 10) == 11);  // stops past the limit
}
