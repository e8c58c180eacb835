// One timing job per GPU at a time across all processes of a node: an flock on a file named for
// the GPU's UUID under $CUDA_AGENT_LOCK_DIR (default /tmp/cuda-agent-locks). The kernel drops the
// lock when the holder dies, so a killed profiler never leaves a GPU locked.
// kernel-prof's timed loops take it exclusive; kernel-check's runs take it shared, so a verify
// never runs on a GPU while a profile is being timed there, and verifies run beside each other.
// A second file (<lock>.gate, taken exclusive for a moment by both kinds, and held by an exclusive
// taker while it waits for the shared holders to drain) keeps a stream of verifies from starving
// a profile: once a profile waits, no new verify starts before it.
#pragma once
#include <string>

namespace ca::measure {

// The lock directory ($CUDA_AGENT_LOCK_DIR, else /tmp/cuda-agent-locks), created world-writable
// with the sticky bit so users of one node share it.
std::string lock_dir();
// The lock file of a GPU: <dir>/gpu-<uuid with anything but [A-Za-z0-9-] replaced by '_'>.lock
std::string lock_path_for(const std::string& gpu_uuid);

class GpuLock {
 public:
  enum class Mode { exclusive, shared };
  GpuLock() = default;
  // Waits up to timeout_s (< 0: forever) for the lock; throws EnvironmentError naming the file and
  // the holder's pid (written into the file by an exclusive holder) on timeout.
  GpuLock(const std::string& gpu_uuid, double timeout_s, Mode mode = Mode::exclusive);
  ~GpuLock();
  GpuLock(GpuLock&& other) noexcept;
  GpuLock& operator=(GpuLock&& other) noexcept;
  GpuLock(const GpuLock&) = delete;
  GpuLock& operator=(const GpuLock&) = delete;

  // Non-blocking attempt (exclusive): true when taken.
  bool try_acquire(const std::string& gpu_uuid);
  void release();
  bool held() const { return fd_ >= 0; }
  double waited_s() const { return waited_s_; }
  const std::string& path() const { return path_; }

 private:
  int fd_ = -1;
  double waited_s_ = 0;
  std::string path_;
};

}  // namespace ca::measure
