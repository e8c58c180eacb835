// Units of the worker's request spellings that carry an integrity property: task_key names a task by
// its id and the content the worker runs, so caches keyed by it never mix two tasks that share an id.
#include <doctest/doctest.h>

#include "libcommon/errors.hpp"
#include "libcommon/worker/requests.hpp"

using ca::Json;

TEST_CASE("task_key: the id and the content; same content same key, other code or init another key") {
  Json a{{"task_id", "t1"}, {"code", "import torch\nclass Model: pass\n"}};
  const std::string ka = ca::worker::request::task_key(a, "t1");
  CHECK(ka.rfind("t1@", 0) == 0);
  CHECK(ka.size() == 3 + 16);
  CHECK(ca::worker::request::task_key(a, "t1") == ka);  // deterministic
  Json same = a;
  same["name"] = "a label the worker never reads";
  CHECK(ca::worker::request::task_key(same, "t1") == ka);
  Json other_code = a;
  other_code["code"] = "import torch\nclass Model: pass  # edited\n";
  CHECK(ca::worker::request::task_key(other_code, "t1") != ka);  // an id reused for other code
  Json other_init = a;
  other_init["init_inputs"] = Json::array({3});
  CHECK(ca::worker::request::task_key(other_init, "t1") != ka);
  CHECK(ca::worker::request::task_key(a, "t2") != ka);
  CHECK_THROWS_AS(ca::worker::request::task_key(Json{{"task_id", "t"}}, "t"), ca::FieldError);  // no code
}
