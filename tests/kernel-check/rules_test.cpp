// Units of kernel-check's own rules (tools/kernel-check/rules.*): comment stripping, the shipped
// default, unknown keys. The bundle library's units are in tests/unit/bundle.
#include <doctest/doctest.h>

#include <algorithm>
#include <string>

#include "libcommon/errors.hpp"
#include "tools/kernel-check/rules.hpp"

TEST_CASE("rules: comments stripped, lines kept; the default parses") {
  std::string s = "a // clock64()\n/* printf(\n */ b \"// kept\"";
  std::string t = ca::kc::strip_comments(s);
  CHECK(t.find("clock64") == std::string::npos);
  CHECK(t.find("printf") == std::string::npos);
  CHECK(std::count(t.begin(), t.end(), '\n') == 2);
  CHECK(t.find("\"// kept\"") != std::string::npos);
  ca::kc::Rules p = ca::kc::Rules::load("");
  CHECK(p.max_module_global_bytes == 65536);
  CHECK(p.forbidden.size() == 4);
  auto v = p.check_sources({{"k.cu", "__global__ void k() {\n  long t = clock64();\n}\n"}});
  REQUIRE(v);
  CHECK(v->rule == "clock");
  CHECK(v->line == 2);
  CHECK_FALSE(p.check_sources({{"k.cu", "#include <cuda_fp16.h>\n#include \"k.cuh\"\n"}, {"k.cuh", ""}}));
  CHECK_THROWS_AS(ca::kc::Rules::parse("bogus_key: 1\n", "x.yaml"), ca::UsageError);
}

TEST_CASE("rules: patterns run over bytes, in linear time, on text of any length") {
  // A byte that is not UTF-8 is a character like any other: it cannot split a rule's match.
  ca::kc::Rules p = ca::kc::Rules::parse("forbidden:\n  - rule: span\n    source: 'foo[^;]*bar'\n", "x.yaml");
  auto v = p.check_sources({{"k.cu", "int a;\nfoo \xff\xfe bar\n"}});
  REQUIRE(v);
  CHECK(v->rule == "span");
  CHECK(v->line == 2);
  // A 4 MiB run between a construct and its parenthesis: found, without the recursion that
  // overflowed the stack under std::regex.
  ca::kc::Rules d = ca::kc::Rules::load("");
  auto c = d.check_sources({{"k.cu", "long t = clock64" + std::string(4 << 20, ' ') + "();\n"}});
  REQUIRE(c);
  CHECK(c->rule == "clock");
  // RE2 syntax: a pattern RE2 cannot compile (a backreference) is a usage error naming the rule.
  CHECK_THROWS_WITH_AS(ca::kc::Rules::parse("forbidden:\n  - rule: back\n    source: '(a)\\1'\n", "x.yaml"),
                       doctest::Contains("rule back: bad regular expression (RE2 syntax)"), ca::UsageError);
}
