// Confining the current process with Landlock (Linux 5.13+, unprivileged): after confine_process()
// it can read only the folders it was given, execute only from the folders given for that, write
// nowhere, open no TCP connection (ABI 4+) and signal no process outside itself (ABI 6+). Used
// where attacker-controlled input drives a library that opens files: NVRTC resolving a candidate's
// #include lines (libcommon/bundle/compile_child.cpp). GPU nodes have no bubblewrap; Landlock needs none.
//
//   ca::Confinement c;
//   c.read_dirs = {"/usr/local/cuda/include"};
//   c.exec_dirs = {"/usr/local/cuda/lib64"};
//   std::string why;
//   if (!ca::confine_process(c, &why)) ... refuse to go on ...
#pragma once
#include <string>
#include <vector>

namespace ca {

struct Confinement {
  std::vector<std::string> read_dirs;  // read files and list folders beneath
  std::vector<std::string> exec_dirs;  // read and map executable (shared libraries loaded later)
};

// The Landlock ABI version the kernel offers (0: none, or disabled).
int landlock_abi();
// Applies the confinement to this process and every child it will have; irreversible. False (and
// `why`) when the kernel cannot: the caller must then refuse the work, not run it unconfined.
bool confine_process(const Confinement& c, std::string* why);
// Where the kernel has no Landlock: from now on this process's open/fopen/fopen64/opendir (its own
// definitions, exported to the libraries it loads: libcommon/confine_interpose.cpp) refuse paths
// outside c's folders, and refuse writing anywhere. Weaker than Landlock (a library making system
// calls directly is not stopped) but enough for NVRTC resolving #include lines.
bool confine_by_interposition(const Confinement& c, std::string* why);

// Task code's confinement (the reference worker): prepared here by the worker's client, applied by
// the worker itself (cuda_agent_worker/confine.py) once torch and the device are up and before it
// reads its first request, so the driver's own start-up needs no allowance but no task code ever
// runs outside it. Landlock: read, list and execute beneath read_exec_dirs; read beneath
// read_paths; read, write and ioctl on device_paths; everything but execute and device nodes
// beneath write_dirs; no TCP (ABI 4+); no signal or abstract socket outside (ABI 6+). Seccomp: no
// socket but AF_UNIX (and that only with allow_unix_sockets), no setsid/setpgid (its processes stay
// in the worker's process group, which its client kills), no ptrace, namespaces, io_uring, mount,
// module or key calls, no device nodes made.
struct TaskConfinement {
  std::vector<std::string> read_exec_dirs;
  std::vector<std::string> read_paths;    // folders or single files
  std::vector<std::string> device_paths;  // folders or single files
  std::vector<std::string> write_dirs;
  bool allow_unix_sockets = false;
};
struct PreparedTaskConfinement {
  PreparedTaskConfinement() = default;
  PreparedTaskConfinement(const PreparedTaskConfinement&) = delete;
  PreparedTaskConfinement& operator=(const PreparedTaskConfinement&) = delete;
  ~PreparedTaskConfinement();
  int landlock_fd = -1;              // a Landlock ruleset (close-on-exec here); -1 without Landlock
  int landlock_abi = 0;
  std::string seccomp_hex;           // the filter: struct sock_filter[] as hex; empty when not built
  std::vector<std::string> warnings; // what could not be prepared, for the worker's hello
};
// Never throws: what the kernel lacks is left out and named in `warnings`.
void prepare_task_confinement(const TaskConfinement& c, PreparedTaskConfinement* out);

// "landlock" or "interpose" from CUDA_AGENT_CONFINE, else the best this kernel offers: Landlock
// when it has it, interposition otherwise.
std::string confinement_mode();

}  // namespace ca
