// Confining the current process with Landlock (Linux 5.13+, unprivileged): after confine_process()
// it can read only the folders it was given, execute only from the folders given for that, write
// nowhere, open no TCP connection (ABI 4+) and signal no process outside itself (ABI 6+). Used
// where attacker-controlled input drives a library that opens files: NVRTC resolving a candidate's
// #include lines (libcommon/bundle/compile.cpp). GPU nodes have no bubblewrap; Landlock needs none.
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

// "landlock" or "interpose" from CUDA_AGENT_CONFINE, else the best this kernel offers: Landlock
// when it has it, interposition otherwise.
std::string confinement_mode();

}  // namespace ca
