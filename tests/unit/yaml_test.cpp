// Units of the one YAML reader (libcommon/yaml.hpp): the JSON form, flow collections, key order,
// the bounds on hostile text, YAML's scalar rules, and the shipped YAML files reading as yaml-cpp reads them.
#include <doctest/doctest.h>

#include <yaml-cpp/yaml.h>

#include <cstdlib>
#include <string>

#include "libcommon/paths.hpp"
#include "libcommon/yaml.hpp"

using namespace ca;

TEST_CASE("yaml reader: scalars stay strings, maps keep their order") {
  Json j = yaml_to_json("b: 2.0\na: [x, y]\nc:\n  z: ~\n  y: 'q'\n");
  CHECK(j["b"] == "2.0");
  CHECK(j["a"] == Json::array({"x", "y"}));
  CHECK(j["c"]["z"].is_null());
  CHECK(j["c"]["y"] == "q");
  CHECK(yaml_keys(j) == std::vector<std::string>{"b", "a", "c"});
  CHECK(yaml_keys(j["c"]) == std::vector<std::string>{"z", "y"});
  CHECK(yaml_to_json("").is_null());
}

TEST_CASE("yaml reader: flow collections keep expressions whole") {
  Json j = yaml_to_json("grid: [cdiv(N, 256), 1]\ndims: {N: inputs.0.shape[0], M: max(N, 2)}\n");
  CHECK(j["grid"] == Json::array({"cdiv(N, 256)", "1"}));
  CHECK(j["dims"]["N"] == "inputs.0.shape[0]");
  CHECK(j["dims"]["M"] == "max(N, 2)");
  CHECK(yaml_keys(j["dims"]) == std::vector<std::string>{"N", "M"});
}

TEST_CASE("yaml reader: bad and hostile text is refused with the label and the limit") {
  CHECK_THROWS_AS(yaml_to_json("a: [1, 2\n", "x.yaml"), YamlError);
  try {
    yaml_to_json("a: [1, 2\nb: }\n", "x.yaml");
    FAIL("no error");
  } catch (const YamlError& e) {
    CHECK(e.syntax);
    CHECK(std::string(e.what()).rfind("x.yaml: not valid YAML: ", 0) == 0);
    CHECK(e.detail.find("line") != std::string::npos);  // yaml-cpp's position is kept
  }
  YamlLimits small;
  small.kind = "plan";
  small.max_bytes = 10;
  CHECK_THROWS_WITH_AS(yaml_to_json("a: 1234567890\n", "plan", small),
                       "plan: 14 bytes of text, over the 10 a plan may have (limit: plan size)", YamlError);
  std::string deep(100, '[');
  CHECK_THROWS_WITH_AS(yaml_to_json("a: " + deep, "plan"),
                       "plan: nested more than 64 levels deep: refused (limit: yaml depth)", YamlError);
  // An alias bomb: each level doubles the values; counted at every use.
  std::string bomb = "a: &a [x, x, x, x, x, x, x, x, x, x]\n";
  for (char c = 'b'; c <= 'h'; ++c)
    bomb += std::string(1, c) + ": &" + c + " [*" + char(c - 1) + ", *" + char(c - 1) + ", *" + char(c - 1) + ", *" +
            char(c - 1) + ", *" + char(c - 1) + ", *" + char(c - 1) + ", *" + char(c - 1) + ", *" + char(c - 1) + "]\n";
  try {
    yaml_to_json(bomb, "--config b.yaml");
    FAIL("no error");
  } catch (const YamlError& e) {
    CHECK_FALSE(e.syntax);
    CHECK(std::string(e.what()).find("--config b.yaml: more than 100000 values") == 0);
  }
  CHECK_THROWS_WITH_AS(yaml_to_json("? [a, b]\n: c\n", "k"), "k: a map key is not a plain name", YamlError);
}

TEST_CASE("yaml reader: a syntax error names the line yaml-cpp names in the text as written") {
  for (std::string text : {"margin: [1, 2\n", "actor:\n  lr: [\n", "a: {b: 1,\n  c: 2\n"}) {
    INFO(text);
    std::string direct;
    try {
      YAML::Load(text);
    } catch (const YAML::Exception& e) {
      direct = e.what();
    }
    REQUIRE_FALSE(direct.empty());
    try {
      yaml_to_json(text, "x.yaml");
      FAIL("no error");
    } catch (const YamlError& e) {
      CHECK(e.detail == direct);
    }
  }
}

TEST_CASE("yaml reader: a JSON object takes the same shape and bounds") {
  Json j = bounded_json(Json::parse(R"({"z": 1, "a": {"y": [1, 2.5], "b": true}})"));
  CHECK(yaml_keys(j) == std::vector<std::string>{"z", "a"});
  CHECK(j.dump() == R"({"z":1,"a":{"y":[1,2.5],"b":true}})");  // nothing added: no "__order" list
  CHECK(yaml_keys(j["a"]) == std::vector<std::string>{"y", "b"});
  CHECK(j["a"]["y"][1] == 2.5);
  YamlLimits shallow;
  shallow.max_depth = 1;
  CHECK_THROWS_AS(bounded_json(Json::parse(R"({"a": {"b": {"c": 1}}})"), "plan", shallow), YamlError);
}

TEST_CASE("yaml reader: scalars convert by YAML's rules") {
  CHECK(yaml_double(Json("0.01")) == doctest::Approx(0.01));
  CHECK(yaml_double(Json("1e-6")) == doctest::Approx(1e-6));
  CHECK(yaml_double(Json(2.5)) == 2.5);
  CHECK(yaml_int64(Json("65536")) == 65536);
  CHECK(yaml_int(Json("16")) == 16);
  CHECK(yaml_bool(Json("true")));
  CHECK(yaml_bool(Json("yes")));
  CHECK_FALSE(yaml_bool(Json("off")));
  CHECK(yaml_string(Json("k3")) == "k3");
  CHECK(yaml_string(Json(nullptr)) == "null");
  CHECK(yaml_strings(yaml_to_json("[launch, gemm]")) == std::vector<std::string>{"launch", "gemm"});
  CHECK(yaml_int64s(yaml_to_json("[1, 2, 3]")) == std::vector<int64_t>{1, 2, 3});
  CHECK_THROWS_WITH_AS(yaml_double(Json("fast")), "bad conversion", YamlError);
  CHECK_THROWS_AS(yaml_int(Json("1.5")), YamlError);
  CHECK_THROWS_AS(yaml_bool(Json("maybe")), YamlError);
  CHECK_THROWS_AS(yaml_double(Json::array({1})), YamlError);
  CHECK_THROWS_AS(yaml_strings(Json("a")), YamlError);
  CHECK(yaml_text(yaml_to_json("{a: [1, x], b: ~}")) == "{a: [1, x], b: ~}");
}

// The reader's JSON form of a yaml-cpp node, built the plain way, for comparing with the shipped files.
static Json plain(const YAML::Node& n) {
  switch (n.Type()) {
    case YAML::NodeType::Scalar: return n.Scalar();
    case YAML::NodeType::Sequence: {
      Json a = Json::array();
      for (const auto& x : n) a.push_back(plain(x));
      return a;
    }
    case YAML::NodeType::Map: {
      Json o = Json::object();
      for (const auto& kv : n) o[kv.first.Scalar()] = plain(kv.second);
      return o;
    }
    default: return nullptr;
  }
}

TEST_CASE("yaml reader: the shipped bundle rules and configs read as yaml-cpp reads them") {
  const char* src = std::getenv("CA_SRC");
  REQUIRE(src != nullptr);
  for (const char* rel : {"datasets/skill/rules.yaml", "tests/ppo-step/toy_ppo.yaml"}) {
    std::string path = std::string(src) + "/" + rel;
    if (!file_exists(path)) continue;
    INFO(rel);
    std::string text = read_file(path);
    CHECK(yaml_to_json(text, rel) == plain(YAML::Load(text)));
  }
}
