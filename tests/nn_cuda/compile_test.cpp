// The native transformer's kernels compile with NVRTC for sm_90 (no GPU needed, only NVRTC), every
// instantiation the host code launches resolves, and the attention kernels do not spill badly.
#include <doctest/doctest.h>

#include <algorithm>
#include <iostream>

#include "libcommon/bundle/compile.hpp"
#include "libcommon/nn_cuda/kernels.hpp"
#include "libcommon/nn_cuda/ops/attention.hpp"

TEST_CASE("nn_cuda kernels compile for sm_90 and every launched name resolves") {
  ca::bundle::CompileOptions opt;
  opt.confined = false;  // the project's own kernels
  opt.arch = "sm_90";
  auto names = ca::nn_cuda::kernel_names();
  auto r = ca::bundle::compile_bundle(ca::nn_cuda::kernel_sources(), names, opt);
  INFO(r.first_error);
  REQUIRE(r.ok);
  for (auto& n : names) {
    CAPTURE(n);
    REQUIRE(r.lowered.count(n) == 1);
    auto it = r.resources.find(r.lowered[n]);
    REQUIRE(it != r.resources.end());
    if (n.rfind("attention", 0) == 0)
      std::cerr << n << ": " << it->second.registers << " registers, " << it->second.static_shared_bytes << " B smem, "
                << it->second.spill_store_bytes << " B spill stores\n";
    // The tensor-core attention kernels add dynamic shared memory; without an opt-in a block gets 48 KiB.
    std::size_t dynamic = 0;
    for (int D : ca::nn_cuda::kTensorCoreHeadDims)
      if (n.find("_tc<" + std::to_string(D) + ",") != std::string::npos) dynamic = ca::nn_cuda::attention_tc_dynamic_smem(D);
    CHECK(it->second.static_shared_bytes + dynamic <= 48 * 1024);
  }
}

TEST_CASE("an NVRTC error in the kernels names the repository's .cu file and line") {
  auto sources = ca::nn_cuda::kernel_sources();
  const std::string file = "libcommon/nn_cuda/ops/attention.cu";
  REQUIRE(sources.count(file) == 1);
  REQUIRE(sources.count("libcommon/nn_cuda/ops/common.cuh") == 1);
  auto& src = sources[file];
  REQUIRE(!src.empty());
  REQUIRE(src.back() == '\n');
  const long line = std::count(src.begin(), src.end(), '\n') + 1;  // the appended line
  src += "this_is_not_cuda here;\n";
  ca::bundle::CompileOptions opt;
  opt.confined = false;
  opt.arch = "sm_90";
  opt.use_cache = false;
  auto r = ca::bundle::compile_bundle(sources, ca::nn_cuda::kernel_names(), opt);
  REQUIRE_FALSE(r.ok);
  INFO(r.first_error);
  CHECK(r.first_error.find(file + "(" + std::to_string(line) + ")") != std::string::npos);
}
