// The per-arch launch limits: dynamic shared memory by architecture, the rest shared, bad archs refused.
#include <doctest/doctest.h>

#include "libcommon/bundle/launch_limits.hpp"
#include "libcommon/errors.hpp"

using ca::bundle::LaunchLimits;

TEST_CASE("launch limits: dynamic shared memory per arch, 1024 threads everywhere") {
  CHECK(LaunchLimits::for_arch("sm_90").dynamic_shared == 232448);
  CHECK(LaunchLimits::for_arch("sm_90a").dynamic_shared == 232448);
  CHECK(LaunchLimits::for_arch("sm_80").dynamic_shared == 166912);
  CHECK(LaunchLimits::for_arch("sm_86").dynamic_shared == 101376);
  CHECK(LaunchLimits::for_arch("sm_89").dynamic_shared == 101376);
  CHECK(LaunchLimits::for_arch("sm_75").dynamic_shared == 65536);
  CHECK(LaunchLimits::for_arch("sm_70").dynamic_shared == 98304);
  CHECK(LaunchLimits::for_arch("sm_100").dynamic_shared == 232448);
  CHECK(LaunchLimits::for_arch("sm_120").dynamic_shared == 101376);
  for (const char* a : {"sm_70", "sm_80", "sm_90", "sm_120"}) {
    CAPTURE(a);
    auto l = LaunchLimits::for_arch(a);
    CHECK(l.threads_per_block == 1024);
    CHECK(l.block[2] == 64);
    CHECK(l.grid[1] == 65535);
  }
  CHECK(LaunchLimits{}.dynamic_shared == LaunchLimits::for_arch("sm_90").dynamic_shared);
  CHECK_THROWS_AS(LaunchLimits::for_arch("sm_61"), ca::UsageError);
  CHECK_THROWS_AS(LaunchLimits::for_arch("hopper"), ca::UsageError);
  CHECK_THROWS_AS(LaunchLimits::for_arch("sm_9"), ca::UsageError);
}
