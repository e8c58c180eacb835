// Who owns a workspace across processes: the folder's name carries the host, the pid namespace, the
// pid and its start time, so a later run removes the leftovers of a process that is gone (kill -9)
// and never those of one still running.
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "libcommon/errors.hpp"
#include "libcommon/log.hpp"
#include "tools/agent-run/confined_io.hpp"
#include "tools/agent-run/workspace.hpp"

namespace fs = std::filesystem;

namespace ca::agent_run {

using detail::entries_of;
using detail::Fd;
using detail::remove_at;

namespace {

std::string g_base;  // set once at start-up, before any thread

std::string this_host_prefix() {
  char host[256] = {0};
  gethostname(host, sizeof host - 1);
  std::string h;
  for (const char* c = host; *c; ++c) h += std::isalnum(static_cast<unsigned char>(*c)) ? *c : '_';
  std::error_code ec;
  std::string ns = fs::read_symlink("/proc/self/ns/pid", ec).string();  // "pid:[4026531836]"
  std::string n;
  for (char c : ns)
    if (std::isdigit(static_cast<unsigned char>(c))) n += c;
  return "agent-run." + (h.empty() ? std::string("host") : h) + "." + (n.empty() ? std::string("0") : n) + ".";
}

// The start time of a process (clock ticks since boot, /proc/PID/stat field 22), or "" if it is
// gone or unreadable. With its pid it names one process: a reused pid has another start time.
std::string process_start(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string stat;
  if (!in || !std::getline(in, stat)) return "";
  std::size_t close = stat.rfind(')');  // the name before it may hold spaces and parentheses
  if (close == std::string::npos) return "";
  std::istringstream rest(stat.substr(close + 1));
  std::string field;
  for (int i = 3; i <= 22 && rest >> field; ++i)
    if (i == 22) return field;
  return "";
}

// Whether the process that made a workspace (its pid and start time, from the folder's name; ""
// for an older agent-run's folder, which has none) is still running. Any program may own
// workspaces (agent-run, its unit tests, a library user), so the running program's name is not
// asked; the start time tells a reused pid apart.
bool owner_alive(pid_t pid, const std::string& start) {
  if (pid == getpid()) return true;
  if (::kill(pid, 0) != 0 && errno == ESRCH) return false;
  if (start.empty()) return true;  // no start time in the name: a live pid may be its owner, leave it
  std::string now = process_start(pid);
  if (now.empty()) return true;  // cannot tell: leave it
  return now == start;
}

}  // namespace

void set_workspace_base(const std::string& dir) {
  std::error_code ec;
  if (dir.empty() || !fs::is_directory(dir, ec))
    throw EnvironmentError("workspace folder '" + dir + "' is not a directory (--workspace-dir)");
  if (access(dir.c_str(), W_OK | X_OK) != 0)
    throw EnvironmentError("workspace folder '" + dir + "' is not writable (--workspace-dir)");
  g_base = fs::absolute(dir, ec).lexically_normal().string();
  while (g_base.size() > 1 && g_base.back() == '/') g_base.pop_back();
}

const std::string& workspace_base() {
  if (g_base.empty()) {
    const char* t = std::getenv("TMPDIR");
    set_workspace_base(t && *t ? t : "/tmp");
  }
  return g_base;
}

std::string make_owned_dir(const std::string& tag) {
  const std::string start = process_start(getpid());  // not cached: a forked child is another process
  std::string templ = workspace_base() + "/" + this_host_prefix() + std::to_string(getpid()) + "." +
                      (start.empty() ? std::string("0") : start) + "." + tag + "XXXXXX";
  std::vector<char> buf(templ.begin(), templ.end());
  buf.push_back('\0');
  if (!mkdtemp(buf.data()))
    throw EnvironmentError("cannot create a workspace under " + workspace_base() + ": " + std::strerror(errno));
  return buf.data();  // mkdtemp makes it 0700
}

int clean_stale_workspaces() {
  const std::string prefix = this_host_prefix();
  int removed = 0;
  Fd base(open(workspace_base().c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!base) return 0;
  for (const std::string& name : entries_of(base.fd)) {
    if (name.rfind(prefix, 0) != 0) continue;
    // PREFIX PID.START.TAG+random; an older agent-run's folders have no START (PID.TAG+random).
    std::string rest = name.substr(prefix.size());
    std::size_t dot = rest.find('.');
    if (dot == 0 || dot == std::string::npos || rest.find_first_not_of("0123456789") != dot) continue;
    pid_t pid = static_cast<pid_t>(std::stol(rest.substr(0, dot)));
    std::size_t dot2 = rest.find('.', dot + 1);
    std::string start;
    if (dot2 != std::string::npos && dot2 > dot + 1 && rest.find_first_not_of("0123456789", dot + 1) == dot2)
      start = rest.substr(dot + 1, dot2 - dot - 1);
    if (owner_alive(pid, start)) continue;
    struct stat st {};
    if (fstatat(base.fd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISDIR(st.st_mode)) continue;
    if (st.st_uid != geteuid() && geteuid() != 0) continue;  // another user's: theirs to clean
    if (remove_at(base.fd, name)) ++removed;
    else log::warn("cannot remove the stale workspace ", workspace_base(), "/", name);
  }
  return removed;
}

}  // namespace ca::agent_run
