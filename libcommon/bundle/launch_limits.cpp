// Per-architecture launch limits (CUDA C++ Programming Guide, "Technical Specifications per Compute
// Capability"): block and grid dimensions and 1024 threads are the same from sm_70 on; the dynamic
// shared memory a block may opt into is what differs.
#include "libcommon/bundle/launch_limits.hpp"

#include <cctype>
#include <string>

#include "libcommon/errors.hpp"

namespace ca::bundle {

LaunchLimits LaunchLimits::for_arch(const std::string& arch) {
  // (sm|compute)_NN[N][a-z]
  const std::size_t us = arch.find('_');
  const std::string prefix = us == std::string::npos ? "" : arch.substr(0, us);
  std::size_t digits = 0;
  while (us != std::string::npos && us + 1 + digits < arch.size() && std::isdigit(static_cast<unsigned char>(arch[us + 1 + digits])))
    ++digits;
  const std::size_t rest = us == std::string::npos ? 0 : arch.size() - (us + 1 + digits);
  const bool ok = (prefix == "sm" || prefix == "compute") && digits >= 2 && digits <= 3 &&
                  (rest == 0 || (rest == 1 && std::islower(static_cast<unsigned char>(arch.back()))));
  if (!ok) throw UsageError("arch '" + arch + "' is not of the form sm_NN (e.g. sm_90)");
  const int cc = std::stoi(arch.substr(us + 1, digits));
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
