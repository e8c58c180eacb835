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
