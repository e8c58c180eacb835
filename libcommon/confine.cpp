// Landlock confinement (see confine.hpp).
#include "libcommon/confine.hpp"

#include <fcntl.h>
#include <linux/landlock.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

namespace ca {

namespace {

// glibc has no wrappers for the Landlock system calls.
long ll_create_ruleset(const void* attr, size_t size, uint32_t flags) {
  return syscall(SYS_landlock_create_ruleset, attr, size, flags);
}
long ll_add_rule(int fd, int type, const void* attr, uint32_t flags) {
  return syscall(SYS_landlock_add_rule, fd, type, attr, flags);
}
long ll_restrict_self(int fd, uint32_t flags) { return syscall(SYS_landlock_restrict_self, fd, flags); }

// Landlock's own structs, spelled out: the installed <linux/landlock.h> may predate the ABI the
// running kernel has (the device's headers are not this machine's).
struct RulesetAttr {
  uint64_t handled_access_fs;
  uint64_t handled_access_net;
  uint64_t scoped;
};
struct PathBeneathAttr {
  uint64_t allowed_access;
  int32_t parent_fd;
} __attribute__((packed));

constexpr uint64_t kFsExecute = 1ULL << 0, kFsReadFile = 1ULL << 2, kFsReadDir = 1ULL << 3;
// Every filesystem right of an ABI: v1 has bits 0-12, v2 adds REFER (13), v3 TRUNCATE (14),
// v5 IOCTL_DEV (15).
uint64_t fs_rights(int abi) {
  uint64_t rights = (1ULL << 13) - 1;
  if (abi >= 2) rights |= 1ULL << 13;
  if (abi >= 3) rights |= 1ULL << 14;
  if (abi >= 5) rights |= 1ULL << 15;
  return rights;
}
constexpr uint64_t kNetBindTcp = 1ULL << 0, kNetConnectTcp = 1ULL << 1;
constexpr uint64_t kScopeAbstractUnixSocket = 1ULL << 0, kScopeSignal = 1ULL << 1;
constexpr int kRulePathBeneath = 1;

bool add_path(int ruleset, const std::string& dir, uint64_t access, std::string* why) {
  int fd = open(dir.c_str(), O_PATH | O_CLOEXEC);
  if (fd < 0) return true;  // a folder that is not there grants nothing
  PathBeneathAttr rule{access, fd};
  long r = ll_add_rule(ruleset, kRulePathBeneath, &rule, 0);
  int e = errno;
  close(fd);
  if (r != 0) {
    if (why) *why = "landlock_add_rule(" + dir + "): " + std::strerror(e);
    return false;
  }
  return true;
}

}  // namespace

std::string confinement_mode() {
  if (const char* m = std::getenv("CUDA_AGENT_CONFINE"); m && *m) return m;
  return landlock_abi() >= 1 ? "landlock" : "interpose";
}

int landlock_abi() {
  long v = ll_create_ruleset(nullptr, 0, LANDLOCK_CREATE_RULESET_VERSION);
  return v < 0 ? 0 : int(v);
}

bool confine_process(const Confinement& c, std::string* why) {
  const int abi = landlock_abi();
  if (abi < 1) {
    if (why) *why = "the kernel has no Landlock (Linux 5.13+ with landlock in the lsm= list)";
    return false;
  }
  RulesetAttr attr{};
  attr.handled_access_fs = fs_rights(abi);
  size_t size = sizeof(uint64_t);  // v1-v3: the fs field only
  if (abi >= 4) {
    attr.handled_access_net = kNetBindTcp | kNetConnectTcp;
    size = 2 * sizeof(uint64_t);
  }
  if (abi >= 6) {
    attr.scoped = kScopeAbstractUnixSocket | kScopeSignal;
    size = 3 * sizeof(uint64_t);
  }
  int ruleset = int(ll_create_ruleset(&attr, size, 0));
  if (ruleset < 0) {
    if (why) *why = std::string("landlock_create_ruleset: ") + std::strerror(errno);
    return false;
  }
  bool ok = true;
  for (const auto& d : c.read_dirs) ok = ok && add_path(ruleset, d, kFsReadFile | kFsReadDir, why);
  for (const auto& d : c.exec_dirs) ok = ok && add_path(ruleset, d, kFsReadFile | kFsReadDir | kFsExecute, why);
  if (ok && prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) {
    if (why) *why = std::string("prctl(PR_SET_NO_NEW_PRIVS): ") + std::strerror(errno);
    ok = false;
  }
  if (ok && ll_restrict_self(ruleset, 0) != 0) {
    if (why) *why = std::string("landlock_restrict_self: ") + std::strerror(errno);
    ok = false;
  }
  close(ruleset);
  return ok;
}

}  // namespace ca
