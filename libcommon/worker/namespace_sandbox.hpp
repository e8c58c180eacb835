// Task code's filesystem where the kernel has no Landlock (worker_client.hpp's confinement): the
// reference worker starts in mount namespaces of its own (and a user namespace when the tool is not
// root) whose root holds only what a TaskConfinement opens: read_exec_dirs and read_paths bound read-
// only, device_paths and write_dirs writable, the worker's own /proc/<pid> as /proc/self. Nothing
// else of the host's files exists for it: /etc/shadow, the home folder, the store, other processes'
// /proc entries. The launcher is this program again (a registered child main): it sets the
// namespaces up, then execs the worker, which keeps its pid. Landlock is preferred where it exists
// (it needs no namespaces, which some nodes forbid unprivileged users).
#pragma once
#include <string>
#include <vector>

#include "libcommon/confine.hpp"

namespace ca::worker {

// The argv that starts `argv` (the worker's) inside the sandbox for `c`, its new root mounted at
// `root_dir` (an empty folder the caller made; a tmpfs in the namespace, nothing on the host).
// `clean_dir` (the tool's private folder; may be empty) is removed, and the worker's process group
// ended, by a helper outside the sandbox once the tool is gone (a kill -9 of the tool).
std::vector<std::string> namespace_sandbox_argv(const TaskConfinement& c, const std::string& root_dir,
                                                const std::string& clean_dir, const std::vector<std::string>& argv);
// Whether a child can make the namespaces here (a probe: a fork that unshares and exits); `why`
// when not (unprivileged user namespaces disabled, seccomp of a container, ...).
bool namespace_sandbox_available(std::string* why);

}  // namespace ca::worker
