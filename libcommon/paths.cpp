// Run-time locations of shipped files.
#include "libcommon/paths.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

#include "libcommon/atomic_file.hpp"
#include "libcommon/errors.hpp"
#include "libcommon/file_identity.hpp"
#include "libcommon/ids.hpp"
#include "libcommon/jsonl.hpp"
#include "libcommon/signals.hpp"

namespace fs = std::filesystem;

namespace ca {

std::string executable_dir() {
  std::error_code ec;
  auto p = fs::read_symlink("/proc/self/exe", ec);
  return ec ? std::string(".") : p.parent_path().string();
}

static std::string first_existing(const std::initializer_list<std::string>& candidates) {
  for (auto& c : candidates)
    if (!c.empty() && fs::exists(c)) return c;
  return "";
}

std::string data_dir() {
  if (const char* e = std::getenv("CUDA_AGENT_DATA"); e && *e) return e;
  std::string found = first_existing({executable_dir() + "/../share/cuda-agent/datasets", CA_DATA_DIR_BUILD});
  if (found.empty()) throw EnvironmentError("cannot find the datasets directory (set CUDA_AGENT_DATA)");
  return fs::weakly_canonical(found).string();
}

std::string python_dir() {
  if (const char* e = std::getenv("CUDA_AGENT_PYTHONPATH"); e && *e) return e;
  std::string found = first_existing({executable_dir() + "/../share/cuda-agent/python", CA_PYTHON_DIR_BUILD});
  if (found.empty()) throw EnvironmentError("cannot find the cuda_agent_worker package (set CUDA_AGENT_PYTHONPATH)");
  return fs::weakly_canonical(found).string();
}

std::string build_identity() {
  static const std::string id = [] {
    Json worker = nullptr;
    try {
      const fs::path package = fs::path(python_dir()) / "cuda_agent_worker";
      std::vector<std::string> files;
      for (const auto& e : fs::directory_iterator(package))
        if (e.path().extension() == ".py") files.push_back(e.path().filename().string());
      std::sort(files.begin(), files.end());
      worker = Json::object();
      for (const auto& f : files) worker[f] = sha256_file_hex((package / f).string());
    } catch (const std::exception&) {
      worker = nullptr;  // no worker found: the tool says so when it needs one
    }
    return content_id(Json{{"executable", sha256_file_hex("/proc/self/exe")}, {"worker", worker}});
  }();
  return id;
}

PrivateTempDir::PrivateTempDir(const std::string& prefix) {
  std::string base = fs::exists("/dev/shm") && access("/dev/shm", W_OK) == 0 ? "/dev/shm"
                     : (std::getenv("TMPDIR") ? std::getenv("TMPDIR") : "/tmp");
  std::string templ = base + "/" + prefix + "-XXXXXX";
  std::vector<char> buf(templ.begin(), templ.end());
  buf.push_back('\0');
  if (!mkdtemp(buf.data())) throw EnvironmentError("cannot create a temp dir under " + base);
  path_ = buf.data();  // mkdtemp makes it 0700
  signals::add_temp_dir(path_);  // removed on SIGINT/SIGTERM too
}

PrivateTempDir::~PrivateTempDir() {
  signals::remove_temp_dir(path_);
  std::error_code ec;
  fs::remove_all(path_, ec);
}

bool file_exists(const std::string& path) { return fs::exists(path); }

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError("cannot read '" + path + "'");
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

namespace {
std::atomic<uint64_t> g_atomic_file_counter{0};
std::string parent_of(const std::string& path) {
  auto parent = fs::path(path).parent_path();
  return parent.empty() ? std::string(".") : parent.string();
}
}  // namespace

AtomicFile::AtomicFile(std::string path) : path_(std::move(path)) {
  // pid + a process-wide counter: two threads (or two processes) writing one target never share a temp file.
  tmp_ = path_ + ".tmp." + std::to_string(getpid()) + "." + std::to_string(g_atomic_file_counter++);
  fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
  if (fd_ < 0) {
    const int err = errno;
    tmp_.clear();
    fail("cannot create a temp file beside it", err);
  }
}

AtomicFile::~AtomicFile() {
  if (fd_ >= 0) ::close(fd_);
  if (!committed_ && !tmp_.empty()) ::unlink(tmp_.c_str());
}

void AtomicFile::fail(const std::string& what, int err) {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  if (!tmp_.empty()) ::unlink(tmp_.c_str());
  tmp_.clear();
  throw EnvironmentError("cannot write '" + path_ + "': " + what + ": " + std::strerror(err) +
                         " (nothing written; the file, if any, is as it was)");
}

void AtomicFile::write(const void* data, std::size_t n) {
  if (fd_ < 0) throw InternalError("AtomicFile: write after commit or failure ('" + path_ + "')");
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    ssize_t w = ::write(fd_, p, n < (std::size_t(1) << 30) ? n : (std::size_t(1) << 30));
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) fail("write failed", errno);
    if (w == 0) fail("write failed", EIO);
    p += w;
    n -= std::size_t(w);
  }
}

void AtomicFile::write_at(uint64_t offset, const void* data, std::size_t n) {
  if (fd_ < 0) throw InternalError("AtomicFile: write after commit or failure ('" + path_ + "')");
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    ssize_t w = ::pwrite(fd_, p, n < (std::size_t(1) << 30) ? n : (std::size_t(1) << 30), static_cast<off_t>(offset));
    if (w < 0 && errno == EINTR) continue;
    const int err = w < 0 ? errno : EIO;
    if (w <= 0)
      throw EnvironmentError("cannot write '" + path_ + "': write failed: " + std::strerror(err) +
                             " (nothing written; the file, if any, is as it was)");
    p += w;
    n -= std::size_t(w);
    offset += uint64_t(w);
  }
}

void AtomicFile::commit() {
  if (fd_ < 0) throw InternalError("AtomicFile: commit twice or after a failure ('" + path_ + "')");
  if (::fsync(fd_) != 0 && errno != EINVAL) fail("fsync failed", errno);
  const int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0 && errno != EINTR) fail("close failed", errno);
  if (::rename(tmp_.c_str(), path_.c_str()) != 0) fail("cannot rename the temp file into place", errno);
  committed_ = true;
  fsync_dir(parent_of(path_));
}

void fsync_dir(const std::string& dir) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0 && errno == EACCES) return;  // a folder we may write but not list (-wx): nothing to sync it by
  if (fd < 0) throw EnvironmentError("cannot open folder '" + dir + "' to sync it: " + std::strerror(errno));
  int rc = ::fsync(fd), err = errno;
  ::close(fd);
  if (rc != 0 && err != EINVAL && err != EROFS)
    throw EnvironmentError("cannot sync folder '" + dir + "': " + std::strerror(err));
}

void write_file_atomic(const std::string& path, const std::string& content) {
  AtomicFile f(path);
  f.write(content);
  f.commit();
}

bool same_file(const std::string& a, const std::string& b) {
  if (a.empty() || b.empty() || a == "-" || b == "-") return false;
  struct stat sa {}, sb {};
  if (::stat(a.c_str(), &sa) != 0 || ::stat(b.c_str(), &sb) != 0) return false;
  return sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
}

bool same_file(int fd, const std::string& path) {
  if (path.empty() || path == "-") return false;
  struct stat sf {}, sp {};
  if (::fstat(fd, &sf) != 0 || !S_ISREG(sf.st_mode) || ::stat(path.c_str(), &sp) != 0) return false;
  return sf.st_dev == sp.st_dev && sf.st_ino == sp.st_ino;
}

}  // namespace ca
