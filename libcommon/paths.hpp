// Where shipped files are found at run time: in the source tree (build tree runs), or installed
// under PREFIX/share/cuda-agent; environment variables override both.
#pragma once
#include <string>

namespace ca {

// Directory of the running executable.
std::string executable_dir();
// $CUDA_AGENT_DATA, else PREFIX/share/cuda-agent/datasets next to the binary, else the source tree's datasets/.
std::string data_dir();
// The directory holding the Python package cuda_agent_worker ($CUDA_AGENT_PYTHONPATH overrides).
std::string python_dir();
// What this build judges with, by content: the sha256 of the running executable's bytes and of the
// reference worker's Python sources (every *.py of the cuda_agent_worker package python_dir() finds),
// as a content id. Any rebuild that changes the code, or any edit of the worker, changes it; a
// version string or a git revision (fixed at configure time, blind to local edits) would not. The
// judges' --resume keys (judged_by, timed_by) hold it. Computed once per process (about 70 ms for a
// 36 MB binary).
std::string build_identity();
// A temp dir private to this process (mode 0700) under /dev/shm when present, else $TMPDIR or /tmp;
// removed with everything in it when the returned object dies.
class PrivateTempDir {
 public:
  explicit PrivateTempDir(const std::string& prefix = "cuda-agent");
  ~PrivateTempDir();
  PrivateTempDir(const PrivateTempDir&) = delete;
  PrivateTempDir& operator=(const PrivateTempDir&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

bool file_exists(const std::string& path);
std::string read_file(const std::string& path);  // throws InputError
// Writes via a temp file and rename, so readers never see half a file.
void write_file_atomic(const std::string& path, const std::string& content);

}  // namespace ca
