// What a compile tells the policy from NVRTC's log: its warnings (a compile that succeeded may still
// have turned a statement into a trap), and only messages located in the bundle's own files.
#include <doctest/doctest.h>

#include <string>

#include "libcommon/bundle/compile.hpp"
#include "libcommon/bundle/compile_detail.hpp"

using ca::bundle::compile_warnings;
using ca::bundle::detail::quote_only_bundle;

TEST_CASE("compile warnings: the front end's and NVVM's, never ptxas's resource lines") {
  const std::string log =
      "fused.cu(3): warning #177-D: variable \"t\" was declared but never referenced\n"
      "warning: fused.cu(2): Warning: Cannot store to pointer that points to constant memory space\n"
      "ptxas info    : Compiling entry function '_Z9scale_addPKfS0_Pfif' for 'sm_90'\n"
      "ptxas info    : Used 8 registers, used 0 barriers, 388 bytes cmem[0]\n"
      "fused.cu(9): error: not a warning\n";
  const auto w = compile_warnings(log);
  REQUIRE(w.size() == 2);
  CHECK(w[0].find("#177-D") != std::string::npos);
  CHECK(w[1].find("constant memory space") != std::string::npos);
  CHECK(compile_warnings("ptxas info    : Used 8 registers\n").empty());
  CHECK(compile_warnings("").empty());
  // At most 20, each cut at 300 characters: a bundle cannot flood its record.
  std::string many;
  for (int i = 0; i < 50; ++i) many += "fused.cu(" + std::to_string(i + 1) + "): warning #1: " + std::string(400, 'x') + "\n";
  const auto capped = compile_warnings(many);
  CHECK(capped.size() == 20);
  CHECK(capped.front().size() == 303);
}

TEST_CASE("quote_only_bundle: messages from the bundle's files kept, others withheld, NVVM's prefix seen through") {
  const std::map<std::string, std::string> kernels{{"fused.cu", ""}};
  const std::vector<std::string> includes{"/usr/local/cuda/include"};
  const std::string kept =
      quote_only_bundle("warning: fused.cu(2): Warning: Cannot store to pointer that points to constant memory space", kernels, includes);
  CHECK(kept.find("constant memory space") != std::string::npos);
  CHECK(quote_only_bundle("fused.cu(6): error: expected a \";\"", kernels, includes).find("expected a") != std::string::npos);
  CHECK(quote_only_bundle("/usr/local/cuda/include/cuda_fp16.h(10): warning: x", kernels, includes).find("warning: x") != std::string::npos);
  // A message located anywhere else is withheld, with the source lines quoted under it, whatever
  // prefix it carries.
  for (const char* line : {"/etc/shadow(1): error: root:$6$secret", "warning: /etc/shadow(1): Warning: root:$6$secret",
                           "error: /home/judge/key.cu(3): error: root:$6$secret",
                           "/usr/local/cuda/include/../../../etc/shadow(1): error: root:$6$secret"}) {
    const std::string out = quote_only_bundle(std::string(line) + "\n  root:$6$secret quoted\n\nfused.cu(1): error: next", kernels, includes);
    CHECK_MESSAGE(out.find("secret") == std::string::npos, line);
    CHECK(out.find("was withheld") != std::string::npos);
    CHECK(out.find("fused.cu(1): error: next") != std::string::npos);
  }
}
