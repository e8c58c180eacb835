// The per-GPU lock (flock) shared by every process of a node.
#include "libcommon/measure/gpu_lock.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <thread>

#include "libcommon/errors.hpp"
#include "libcommon/log.hpp"

namespace ca::measure {

std::string lock_dir() {
  const char* env = std::getenv("CUDA_AGENT_LOCK_DIR");
  std::string dir = env && *env ? env : "/tmp/cuda-agent-locks";
  if (::mkdir(dir.c_str(), 01777) == 0) ::chmod(dir.c_str(), 01777);  // umask would drop the bits
  return dir;
}

std::string lock_path_for(const std::string& gpu_uuid) {
  std::string name;
  for (char c : gpu_uuid) name += (std::isalnum(static_cast<unsigned char>(c)) || c == '-') ? c : '_';
  if (name.empty()) name = "unknown";
  return lock_dir() + "/gpu-" + name + ".lock";
}

namespace {
int open_lock_file(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0666);
  if (fd < 0)
    throw EnvironmentError("GPU lock: cannot open " + path + ": " + std::strerror(errno) +
                           " (set CUDA_AGENT_LOCK_DIR to a writable directory)");
  ::fchmod(fd, 0666);  // others of the node must be able to lock it too; fails harmlessly if not ours
  return fd;
}
std::string holder_of(int fd) {
  char buf[64] = {0};
  ssize_t n = ::pread(fd, buf, sizeof buf - 1, 0);
  return n > 0 ? std::string(buf, std::size_t(n)) : std::string("unknown");
}
void write_holder(int fd) {
  std::string pid = std::to_string(::getpid());
  if (::ftruncate(fd, 0) == 0) (void)!::pwrite(fd, pid.data(), pid.size(), 0);
}
}  // namespace

namespace {
// Polls flock(fd, op | LOCK_NB) until it is taken (true) or the deadline passes (false); `waiting`
// is called after each miss with the seconds waited so far.
bool poll_flock(int fd, int op, const std::string& path, double timeout_s, std::chrono::steady_clock::time_point start,
                const std::function<void(double)>& waiting) {
  for (;;) {
    if (::flock(fd, op | LOCK_NB) == 0) return true;
    if (errno != EWOULDBLOCK && errno != EINTR) throw EnvironmentError("GPU lock: flock " + path + ": " + std::strerror(errno));
    double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    waiting(waited);
    if (timeout_s >= 0 && waited >= timeout_s) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}
}  // namespace

GpuLock::GpuLock(const std::string& gpu_uuid, double timeout_s, Mode mode) {
  path_ = lock_path_for(gpu_uuid);
  const std::string gate_path = path_.substr(0, path_.size() - 5) + ".gate";
  fd_ = open_lock_file(path_);
  int gate = -1;
  try {
    gate = open_lock_file(gate_path);
  } catch (...) {
    ::close(fd_);
    fd_ = -1;
    throw;
  }
  const auto start = std::chrono::steady_clock::now();
  bool said = false;
  auto waiting = [&](double waited) {
    waited_s_ = waited;
    if (!said && waited > 1.0) {
      log::info("waiting for GPU ", gpu_uuid, " (", path_, " held by pid ", holder_of(fd_), ")");
      said = true;
    }
  };
  auto give_up = [&](const char* why) {
    std::string holder = holder_of(fd_);
    ::close(gate);
    ::close(fd_);
    fd_ = -1;
    throw EnvironmentError(log::cat("GPU lock: ", path_, " still held by pid ", holder, " after ", timeout_s, " s (", why,
                                    ")"));
  };
  try {
    // The gate first: an exclusive taker holds it until it has the lock, so verifies arriving
    // meanwhile wait behind it instead of overtaking it for ever.
    if (!poll_flock(gate, LOCK_EX, gate_path, timeout_s, start, waiting)) give_up("another job is waiting for this GPU");
    if (!poll_flock(fd_, mode == Mode::shared ? LOCK_SH : LOCK_EX, path_, timeout_s, start, waiting))
      give_up(mode == Mode::shared ? "a timing job on this GPU" : "another job on this GPU");
  } catch (const EnvironmentError&) {
    if (fd_ >= 0) {
      ::close(gate);
      ::close(fd_);
      fd_ = -1;
    }
    throw;
  }
  ::close(gate);  // drops the gate's flock
  waited_s_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (mode == Mode::exclusive) write_holder(fd_);
}

bool GpuLock::try_acquire(const std::string& gpu_uuid) {
  release();
  path_ = lock_path_for(gpu_uuid);
  fd_ = open_lock_file(path_);
  if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    ::close(fd_);
    fd_ = -1;
    return false;
  }
  write_holder(fd_);
  return true;
}

void GpuLock::release() {
  if (fd_ >= 0) {
    ::flock(fd_, LOCK_UN);
    ::close(fd_);
    fd_ = -1;
  }
}

GpuLock::~GpuLock() { release(); }

GpuLock::GpuLock(GpuLock&& other) noexcept : fd_(other.fd_), waited_s_(other.waited_s_), path_(std::move(other.path_)) {
  other.fd_ = -1;
}

GpuLock& GpuLock::operator=(GpuLock&& other) noexcept {
  if (this != &other) {
    release();
    fd_ = other.fd_;
    waited_s_ = other.waited_s_;
    path_ = std::move(other.path_);
    other.fd_ = -1;
  }
  return *this;
}

}  // namespace ca::measure
