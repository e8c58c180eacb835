// The launch limits a plan's grid, block and dynamic shared memory are checked against: the target
// architecture's (compile-only, --arch) or the device's (a GPU check).
//
//   auto limits = LaunchLimits::for_arch("sm_80");      // 163 KiB of dynamic shared memory
//   check_plan(plan, sigs, &io, limits);
#pragma once
#include <cstdint>
#include <string>

namespace ca::bundle {

struct LaunchLimits {
  std::string arch = "sm_90";
  int64_t block[3] = {1024, 1024, 64};
  int64_t grid[3] = {2147483647LL, 65535, 65535};
  int64_t threads_per_block = 1024;
  // The most dynamic shared memory one block may opt into (cudaFuncAttributeMaxDynamicSharedMemorySize).
  int64_t dynamic_shared = 232448;

  // sm_70 and later (CUDA 13's range); an arch that is not "sm_NN" or is older is a UsageError.
  static LaunchLimits for_arch(const std::string& arch);
};

}  // namespace ca::bundle
