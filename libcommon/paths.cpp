// Run-time locations of shipped files.
#include "libcommon/paths.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "libcommon/errors.hpp"
#include "libcommon/file_identity.hpp"
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

void write_file_atomic(const std::string& path, const std::string& content) {
  std::string tmp = path + ".tmp." + std::to_string(getpid());
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) throw EnvironmentError("cannot write '" + tmp + "'");
    out << content;
    if (!out) throw EnvironmentError("write failed for '" + tmp + "'");
  }
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) throw EnvironmentError("cannot rename '" + tmp + "' to '" + path + "': " + ec.message());
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
