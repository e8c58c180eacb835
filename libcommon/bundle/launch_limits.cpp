// Per-architecture launch limits (CUDA C++ Programming Guide, "Technical Specifications per Compute
// Capability"): block and grid dimensions and 1024 threads are the same from sm_70 on; the dynamic
// shared memory a block may opt into is what differs.
#include "libcommon/bundle/launch_limits.hpp"

#include <regex>

#include "libcommon/errors.hpp"

namespace ca::bundle {

LaunchLimits LaunchLimits::for_arch(const std::string& arch) {
  static const std::regex form(R"(^(sm|compute)_([0-9]{2,3})[a-z]?$)");
  std::smatch m;
  if (!std::regex_match(arch, m, form)) throw UsageError("arch '" + arch + "' is not of the form sm_NN (e.g. sm_90)");
  const int cc = std::stoi(m[2].str());
  if (cc < 70) throw UsageError("arch '" + arch + "': architectures before sm_70 are not supported");
  LaunchLimits l;
  l.arch = arch;
  const int major = cc / 10;
  if (cc == 75) l.dynamic_shared = 64 * 1024;                       // Turing
  else if (major == 7) l.dynamic_shared = 96 * 1024;                // Volta (sm_70, sm_72)
  else if (cc == 80 || cc == 87) l.dynamic_shared = 163 * 1024;     // A100, Orin
  else if (major == 8) l.dynamic_shared = 99 * 1024;                // sm_86, sm_89
  else if (major == 12) l.dynamic_shared = 99 * 1024;               // consumer Blackwell
  else l.dynamic_shared = 227 * 1024;                               // Hopper, datacenter Blackwell
  return l;
}

}  // namespace ca::bundle
