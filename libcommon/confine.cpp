// Landlock confinement (see confine.hpp).
#include "libcommon/confine.hpp"

#include <fcntl.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/landlock.h>
#include <linux/seccomp.h>
#include <sched.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstddef>
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

// Landlock's remaining v1 rights (see fs_rights) and the rights a rule on a single file may carry.
constexpr uint64_t kFsWriteFile = 1ULL << 1, kFsMakeChar = 1ULL << 6, kFsMakeBlock = 1ULL << 11;
constexpr uint64_t kFsTruncate = 1ULL << 14, kFsIoctlDev = 1ULL << 15;
constexpr uint64_t kFileRights = kFsExecute | kFsWriteFile | kFsReadFile | kFsTruncate | kFsIoctlDev;

// A rule on `path` (a folder, or a single file with the file rights of `access`); a path that is
// not there grants nothing.
bool add_rule(int ruleset, const std::string& path, uint64_t access, int abi, std::string* why) {
  struct stat st {};
  if (stat(path.c_str(), &st) != 0) return true;
  if (!S_ISDIR(st.st_mode)) access &= kFileRights;
  access &= fs_rights(abi);
  if (access == 0) return true;
  return add_path(ruleset, path, access, why);
}

// A classic BPF program for seccomp, written with labels (the jumps are resolved at the end).
class Bpf {
 public:
  void load_arch() { emit(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, arch)); }
  void load_nr() { emit(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, nr)); }
  // The low 32 bits of argument i (little-endian: pids, flags and families fit in them).
  void load_arg_low(int i) { emit(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, args) + 8 * i); }
  void jeq(uint32_t k, const std::string& yes) { jump(BPF_JEQ, k, yes, ""); }
  void jne(uint32_t k, const std::string& yes) { jump(BPF_JEQ, k, "", yes); }
  void jge(uint32_t k, const std::string& yes) { jump(BPF_JGE, k, yes, ""); }
  void jset(uint32_t k, const std::string& yes) { jump(BPF_JSET, k, yes, ""); }
  void ret(uint32_t k) { emit(BPF_RET | BPF_K, k); }
  void label(const std::string& name) { labels_.push_back({name, code_.size()}); }
  void jump_to(const std::string& target) {
    fixups_.push_back({code_.size(), target, "", true});
    emit(BPF_JMP | BPF_JA, 0);
  }
  // The program, or empty (and `why`) when a jump does not fit in 8 bits.
  std::vector<sock_filter> finish(std::string* why) {
    for (const auto& f : fixups_) {
      auto at = [&](const std::string& name, size_t* to) {
        for (const auto& l : labels_)
          if (l.first == name) {
            *to = l.second;
            return true;
          }
        return false;
      };
      size_t t = 0, e = 0;
      sock_filter& ins = code_[f.index];
      if (f.always) {
        if (!at(f.yes, &t)) return fail(why, f.yes);
        ins.k = uint32_t(t - f.index - 1);
        continue;
      }
      if (!f.yes.empty()) {
        if (!at(f.yes, &t) || t - f.index - 1 > 255) return fail(why, f.yes);
        ins.jt = uint8_t(t - f.index - 1);
      }
      if (!f.no.empty()) {
        if (!at(f.no, &e) || e - f.index - 1 > 255) return fail(why, f.no);
        ins.jf = uint8_t(e - f.index - 1);
      }
    }
    return code_;
  }

 private:
  struct Fixup {
    size_t index;
    std::string yes, no;
    bool always;
  };
  void emit(uint16_t code, uint32_t k) { code_.push_back(sock_filter{code, 0, 0, k}); }
  void jump(uint16_t op, uint32_t k, const std::string& yes, const std::string& no) {
    fixups_.push_back({code_.size(), yes, no, false});
    emit(BPF_JMP | op | BPF_K, k);
  }
  std::vector<sock_filter> fail(std::string* why, const std::string& label) {
    if (why) *why = "seccomp program: jump to '" + label + "' out of range";
    return {};
  }
  std::vector<sock_filter> code_;
  std::vector<std::pair<std::string, size_t>> labels_;
  std::vector<Fixup> fixups_;
};

#if defined(__x86_64__)
constexpr uint32_t kAuditArch = AUDIT_ARCH_X86_64;
#elif defined(__aarch64__)
constexpr uint32_t kAuditArch = AUDIT_ARCH_AARCH64;
#else
constexpr uint32_t kAuditArch = 0;
#endif

// The system calls task code never needs: leaving the process group or the namespaces, reaching
// another process's memory, kernel surfaces that bypass the rest (io_uring opens sockets and files
// itself), and what root could use to get out (mounts, modules, device nodes, keys).
const std::vector<long>& denied_syscalls() {
  static const std::vector<long> list = {
    SYS_setsid, SYS_setpgid, SYS_ptrace, SYS_process_vm_readv, SYS_process_vm_writev, SYS_unshare, SYS_setns,
    SYS_mount, SYS_umount2, SYS_pivot_root, SYS_chroot, SYS_open_by_handle_at, SYS_name_to_handle_at, SYS_bpf,
    SYS_keyctl, SYS_add_key, SYS_request_key, SYS_init_module, SYS_finit_module, SYS_delete_module,
    SYS_kexec_load, SYS_reboot, SYS_swapon, SYS_swapoff, SYS_mknodat, SYS_userfaultfd, SYS_acct,
    SYS_settimeofday, SYS_clock_settime, SYS_adjtimex, SYS_sethostname, SYS_setdomainname, SYS_syslog,
#ifdef SYS_mknod
    SYS_mknod,
#endif
#ifdef SYS_iopl
    SYS_iopl, SYS_ioperm,
#endif
#ifdef SYS_kexec_file_load
    SYS_kexec_file_load,
#endif
#ifdef SYS_io_uring_setup
    SYS_io_uring_setup, SYS_io_uring_enter, SYS_io_uring_register,
#endif
#ifdef SYS_pidfd_open
    SYS_pidfd_open, SYS_pidfd_send_signal, SYS_pidfd_getfd,
#endif
#ifdef SYS_fsopen
    SYS_fsopen, SYS_fsconfig, SYS_fsmount, SYS_move_mount, SYS_open_tree, SYS_fspick,
#endif
  };
  return list;
}

std::string seccomp_program(bool allow_unix, pid_t protect_pid, std::string* why) {
  if (kAuditArch == 0) {
    if (why) *why = "seccomp: no filter for this architecture";
    return "";
  }
  const uint32_t eperm = SECCOMP_RET_ERRNO | (EPERM & SECCOMP_RET_DATA);
  const uint32_t enosys = SECCOMP_RET_ERRNO | (ENOSYS & SECCOMP_RET_DATA);
  const uint32_t namespaces = CLONE_NEWNS | CLONE_NEWUSER | CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWUTS | CLONE_NEWIPC |
                              CLONE_NEWCGROUP;
  Bpf b;
  b.load_arch();
  b.jne(kAuditArch, "deny");  // another ABI's numbers (int 0x80 on x86_64) mean other calls
  b.load_nr();
#if defined(__x86_64__)
  b.jge(0x40000000u, "deny");  // the x32 ABI
#endif
  for (long nr : denied_syscalls()) b.jeq(uint32_t(nr), "deny");
  b.jeq(SYS_socket, "socket");
  b.jeq(SYS_clone, "clone");
#ifdef SYS_clone3
  b.jeq(SYS_clone3, "nosys");  // its flags are in memory BPF cannot read; libc falls back to clone
#endif
  for (long nr : {long(SYS_kill), long(SYS_tkill), long(SYS_tgkill), long(SYS_rt_sigqueueinfo), long(SYS_rt_tgsigqueueinfo)})
    b.jeq(uint32_t(nr), "signal");
  b.ret(SECCOMP_RET_ALLOW);
  b.label("socket");
  b.load_arg_low(0);
  if (allow_unix) b.jeq(AF_UNIX, "allow");
  b.jump_to("deny");
  b.label("clone");
  b.load_arg_low(0);
  b.jset(namespaces, "deny");
  b.jump_to("allow");
  b.label("signal");  // not its client, not a process group, not every process
  b.load_arg_low(0);
  b.jset(0x80000000u, "deny");
  b.jeq(uint32_t(protect_pid), "deny");
  b.jump_to("allow");
  b.label("allow");
  b.ret(SECCOMP_RET_ALLOW);
  b.label("nosys");
  b.ret(enosys);
  b.label("deny");
  b.ret(eperm);
  std::vector<sock_filter> prog = b.finish(why);
  static const char* hex = "0123456789abcdef";
  std::string out;
  const auto* bytes = reinterpret_cast<const unsigned char*>(prog.data());
  for (size_t i = 0; i < prog.size() * sizeof(sock_filter); ++i) {
    out += hex[bytes[i] >> 4];
    out += hex[bytes[i] & 15];
  }
  return out;
}

// A ruleset handling every right this ABI knows: files (v1-v3: the fs field only), TCP bind and
// connect (v4+), abstract unix sockets and signals scoped to the domain (v6+). -1 with errno set.
int create_ruleset(int abi) {
  RulesetAttr attr{};
  attr.handled_access_fs = fs_rights(abi);
  size_t size = sizeof(uint64_t);
  if (abi >= 4) {
    attr.handled_access_net = kNetBindTcp | kNetConnectTcp;
    size = 2 * sizeof(uint64_t);
  }
  if (abi >= 6) {
    attr.scoped = kScopeAbstractUnixSocket | kScopeSignal;
    size = 3 * sizeof(uint64_t);
  }
  return int(ll_create_ruleset(&attr, size, 0));
}

}  // namespace

PreparedTaskConfinement::~PreparedTaskConfinement() {
  if (landlock_fd >= 0) close(landlock_fd);
}

void prepare_task_confinement(const TaskConfinement& c, PreparedTaskConfinement* out) {
  std::string why;
  out->seccomp_hex = seccomp_program(c.allow_unix_sockets, getpid(), &why);
  if (out->seccomp_hex.empty()) out->warnings.push_back(why);

  const int abi = landlock_abi();
  out->landlock_abi = abi;
  if (abi < 1) {
    out->warnings.push_back("landlock: the kernel has none (Linux 5.13+ with landlock in the lsm= list): "
                            "task code can read and write every file the tool can");
    return;
  }
  int ruleset = create_ruleset(abi);
  if (ruleset < 0) {
    out->warnings.push_back(std::string("landlock_create_ruleset: ") + std::strerror(errno));
    return;
  }
  fcntl(ruleset, F_SETFD, FD_CLOEXEC);
  const uint64_t read = kFsReadFile | kFsReadDir;
  const uint64_t write_all = fs_rights(abi) & ~(kFsExecute | kFsMakeChar | kFsMakeBlock);
  bool ok = true;
  for (const auto& d : c.read_exec_dirs) ok = ok && add_rule(ruleset, d, read | kFsExecute, abi, &why);
  for (const auto& d : c.read_paths) ok = ok && add_rule(ruleset, d, read, abi, &why);
  for (const auto& d : c.device_paths) ok = ok && add_rule(ruleset, d, read | kFsWriteFile | kFsIoctlDev, abi, &why);
  for (const auto& d : c.write_dirs) ok = ok && add_rule(ruleset, d, write_all, abi, &why);
  if (!ok) {
    close(ruleset);
    out->warnings.push_back(why);
    return;
  }
  out->landlock_fd = ruleset;
}

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
  int ruleset = create_ruleset(abi);
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
