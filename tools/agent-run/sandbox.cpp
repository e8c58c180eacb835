// bubblewrap command lines and the limits around them.
#include "tools/agent-run/sandbox.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <mutex>

#include "libcommon/log.hpp"
#include "libcommon/errors.hpp"
#include "libcommon/process.hpp"
#include "tools/agent-run/workspace.hpp"

namespace fs = std::filesystem;

namespace ca::agent_run {

Json SandboxLimits::to_json() const {
  return {{"wall_s", wall_s},           {"cpu_s", cpu_s},
          {"memory_mib", memory_mib},   {"processes", processes},
          {"file_size_mib", file_size_mib}, {"output_bytes", output_bytes},
          {"workspace_mib", workspace_mib}, {"network", false}};
}

std::string SandboxResult::report(const SandboxLimits& limits) const {
  if (!refused.empty()) return "[not run: " + refused + "]";
  if (sandbox_failed) return "[sandbox error: the sandbox could not start; the command did not run]";
  std::string r;
  if (!stopped.empty())
    r = "[killed: " + stopped + "; the command and every process it started were killed]";
  else if (timed_out)
    r = "[killed: wall-time limit of " + std::to_string(limits.wall_s) +
        " s reached; the command and every process it started were killed]";
  else if (exit_status == 128 + SIGXCPU || exit_status == 128 + SIGKILL)
    r = exit_status == 128 + SIGXCPU
            ? "[killed: CPU-time limit of " + std::to_string(limits.cpu_s) + " s reached (SIGXCPU)]"
            : "[killed by SIGKILL (CPU-time hard limit of " + std::to_string(limits.cpu_s + 1) +
                  " s, or out of memory)]";
  else if (exit_status == 128 + SIGXFSZ)
    r = "[killed: file-size limit of " + std::to_string(limits.file_size_mib) + " MiB reached (SIGXFSZ)]";
  else if (exit_status > 128 && exit_status <= 128 + 64)
    r = "[killed by signal " + std::to_string(exit_status - 128) + " (" + strsignal(exit_status - 128) + ")]";
  else
    r = "[exit status " + std::to_string(exit_status) + "]";
  if (output_truncated) r += " [output cut at " + std::to_string(limits.output_bytes) + " bytes]";
  return r;
}

Sandbox::Sandbox(std::string workspace, std::string tmp, SandboxLimits limits, int uid)
    : workspace_(std::move(workspace)), tmp_(std::move(tmp)), limits_(limits), uid_(geteuid() == 0 ? uid : -1) {
  if (geteuid() == 0 && uid <= 0) throw InternalError("sandbox: uid " + std::to_string(uid) + " (root) refused");
}

std::vector<std::string> Sandbox::bwrap_prefix() const {
  std::vector<std::string> a = {"bwrap", "--die-with-parent", "--new-session", "--unshare-net", "--unshare-pid",
                                "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try", "--hostname", "sandbox"};
  // System folders read-only; on merged-/usr systems /bin, /lib... are symlinks into /usr.
  for (const char* dir : {"/usr", "/etc", "/opt"}) {
    if (fs::exists(dir)) a.insert(a.end(), {"--ro-bind", dir, dir});
  }
  for (const char* dir : {"/bin", "/sbin", "/lib", "/lib32", "/lib64"}) {
    std::error_code ec;
    if (fs::is_symlink(dir, ec)) {
      a.insert(a.end(), {"--symlink", fs::read_symlink(dir, ec).string(), dir});
    } else if (fs::exists(dir, ec)) {
      a.insert(a.end(), {"--ro-bind", dir, dir});
    }
  }
  a.insert(a.end(), {"--proc", "/proc", "--dev", "/dev", "--bind", tmp_, "/tmp", "--bind", workspace_, "/workspace",
                     "--chdir", "/workspace", "--clearenv", "--setenv", "PATH",
                     "/usr/local/cuda/bin:/usr/local/bin:/usr/bin:/bin", "--setenv", "HOME", "/workspace",
                     "--setenv", "TMPDIR", "/tmp", "--setenv", "LANG", "C.UTF-8", "--setenv", "TERM", "dumb"});
  if (uid_ >= 0) {
    std::string id = std::to_string(uid_);
    a.insert(a.end(), {"/usr/bin/setpriv", "--reuid=" + id, "--regid=" + id, "--clear-groups", "--no-new-privs"});
  }
  return a;
}

// The workspace belongs to the sandbox's user, so the agent can change what the file tools wrote.
static void hand_over(const std::string& root, int uid) {
  if (uid < 0) return;
  std::error_code ec;
  if (lchown(root.c_str(), uid, uid) != 0) log::debug("lchown ", root, ": ", std::strerror(errno));
  for (auto it = fs::recursive_directory_iterator(root, ec); !ec && it != fs::recursive_directory_iterator();
       it.increment(ec))
    (void)!lchown(it->path().c_str(), uid, uid);
}

// Why ARGV cannot be exec'd ("" when it can): the kernel refuses one argument of 32 pages or more
// (MAX_ARG_STRLEN, with its NUL) and an argument list past ARG_MAX with E2BIG, which would end the
// whole episode as an error. A model's command or pattern is bounded here instead, and told why.
static std::string too_long_to_exec(const std::vector<std::string>& argv) {
  const std::size_t max_arg = 32 * static_cast<std::size_t>(sysconf(_SC_PAGESIZE)) - 1;
  const long arg_max = sysconf(_SC_ARG_MAX);
  // Half of ARG_MAX: the environment and bwrap's own arguments share it.
  const std::size_t max_total = arg_max > 0 ? static_cast<std::size_t>(arg_max) / 2 : 128 * 1024;
  std::size_t total = 0;
  for (const auto& a : argv) {
    if (a.size() > max_arg)
      return "the command (or pattern) is " + std::to_string(a.size()) + " bytes, more than the " +
             std::to_string(max_arg) + " one argument may be; write it to a file with write_file and run the file";
    total += a.size() + 1 + sizeof(char*);
  }
  if (total > max_total)
    return "the command's arguments are " + std::to_string(total) + " bytes, more than the " + std::to_string(max_total) +
           " allowed; write them to a file with write_file and run the file";
  return "";
}

SandboxResult Sandbox::run(const std::vector<std::string>& inner_argv, const SandboxWatch& watch) const {
  if (std::string why = too_long_to_exec(inner_argv); !why.empty()) {
    SandboxResult res;
    res.refused = why;
    return res;
  }
  hand_over(workspace_, uid_);
  hand_over(tmp_, uid_);
  // Limits are set by the shell inside the sandbox (hard limits, so the command cannot raise them);
  // output is cut by head inside the sandbox so a flood never reaches our memory.
  // CPU: soft limit N (SIGXCPU, reported as such), hard N+1 (SIGKILL if SIGXCPU is caught).
  const std::string limits = "ulimit -t " + std::to_string(limits_.cpu_s + 1) + " && ulimit -S -t " +
                             std::to_string(limits_.cpu_s) + " && ulimit -v " +
                             std::to_string(limits_.memory_mib * 1024) + " -u " + std::to_string(limits_.processes) +
                             " -f " + std::to_string(limits_.file_size_mib * 1024) + " || exit 125; ";
  const std::string script = limits + "\"$@\" </dev/null 2>&1 | head -c " + std::to_string(limits_.output_bytes + 1) +
                             "; exit ${PIPESTATUS[0]}";
  SpawnOptions so;
  so.argv = bwrap_prefix();
  so.argv.insert(so.argv.end(), {"/bin/bash", "-c", script, "sandbox"});
  so.argv.insert(so.argv.end(), inner_argv.begin(), inner_argv.end());
  auto start = std::chrono::steady_clock::now();
  SandboxResult res;
  // A little more than the wall limit: bwrap's start and teardown are not the command's time.
  std::string stopped;
  StopCheck stop = [&] {
    if (watch) stopped = watch();
    return !stopped.empty();
  };
  // No grace on a stop: bwrap's death takes the whole sandbox with it (--die-with-parent).
  CommandResult r = run_command(so, "", std::chrono::milliseconds(limits_.wall_s * 1000LL + 500),
                                static_cast<std::size_t>(limits_.output_bytes + 1), stop, std::chrono::milliseconds(0));
  res.stopped = r.stopped ? stopped : "";
  res.elapsed_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  res.timed_out = r.timed_out;
  res.exit_status = r.exit_status;
  res.output = r.out;
  if (static_cast<int64_t>(res.output.size()) > limits_.output_bytes) {
    res.output.resize(static_cast<std::size_t>(limits_.output_bytes));
    res.output_truncated = true;
  }
  // bwrap's own failures ("bwrap: ...") arrive on its stderr with exit status 1 and no output.
  if (!r.timed_out && r.err.rfind("bwrap:", 0) == 0) {
    res.sandbox_failed = true;
    res.output = r.err;
    log::warn("sandbox: ", r.err);
  }
  return res;
}

SandboxResult Sandbox::run_shell(const std::string& command, const SandboxWatch& watch) const {
  return run({"/bin/bash", "-c", command}, watch);
}

SandboxResult Sandbox::run_argv(const std::vector<std::string>& argv, const SandboxWatch& watch) const {
  return run(argv, watch);
}

std::string Sandbox::availability() {
  static std::once_flag once;
  static std::string why;
  std::call_once(once, [] {
    if (find_on_path("bwrap").empty()) {
      why = "bubblewrap (bwrap) is not installed";
      return;
    }
    std::string dir;
    try {
      dir = make_owned_dir("probe");
    } catch (const std::exception& e) {
      why = e.what();
      return;
    }
    SandboxLimits l;
    l.wall_s = 20;
    Sandbox probe(dir, dir, l, 65534);
    SandboxResult r = probe.run_shell("echo ok");
    remove_tree(dir);
    if (r.sandbox_failed || r.exit_status != 0 || r.output.find("ok") == std::string::npos)
      why = "bubblewrap does not work here: " + r.output.substr(0, 300);
  });
  return why;
}

}  // namespace ca::agent_run
