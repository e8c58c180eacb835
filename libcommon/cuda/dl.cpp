// dlopen helpers for the CUDA libraries.
#include "libcommon/cuda/dl.hpp"

#include <dlfcn.h>

#include <cstdlib>
#include <filesystem>

namespace ca::cuda {

static std::vector<std::string> extra_dirs() {
  std::vector<std::string> dirs;
  if (const char* home = std::getenv("CUDA_HOME"); home && *home) dirs.push_back(std::string(home) + "/lib64");
  dirs.push_back("/usr/local/cuda/lib64");
  // pip's nvidia-* wheels (torch brings cuDNN and cuBLAS this way): system site-packages and
  // virtual environments under /opt (/opt/<name>/.venv/lib/python3.X/...).
  std::vector<std::string> bases = {"/usr/local/lib", "/usr/lib"};
  std::error_code ec0;
  for (auto& opt : std::filesystem::directory_iterator("/opt", ec0))
    for (const char* sub : {"/.venv/lib", "/venv/lib", "/lib"})
      if (std::filesystem::exists(opt.path().string() + sub)) bases.push_back(opt.path().string() + sub);
  for (const auto& base : bases) {
    std::error_code ec;
    for (auto& py : std::filesystem::directory_iterator(base, ec)) {
      auto nv = py.path() / "dist-packages" / "nvidia";
      auto nv2 = py.path() / "site-packages" / "nvidia";
      for (auto& root : {nv, nv2}) {
        std::error_code ec2;
        for (auto& sub : std::filesystem::directory_iterator(root, ec2))
          if (std::filesystem::exists(sub.path() / "lib")) dirs.push_back((sub.path() / "lib").string());
      }
    }
  }
  return dirs;
}

LibraryMissing::LibraryMissing(const CudaLibrary& lib, const std::string& detail)
    : EnvironmentError(lib.what + " " + detail + (lib.install.empty() ? "" : "; install " + lib.install)),
      library(lib.what) {}

void* open_library(const CudaLibrary& lib) {
  std::string last_error;
  for (const auto& name : lib.names) {
    if (void* h = dlopen(name.c_str(), RTLD_NOW | RTLD_GLOBAL)) return h;
    if (const char* e = dlerror()) last_error = e;
  }
  for (const auto& dir : extra_dirs())
    for (const auto& name : lib.names) {
      std::string path = dir + "/" + name;
      if (!std::filesystem::exists(path)) continue;
      if (void* h = dlopen(path.c_str(), RTLD_NOW | RTLD_GLOBAL)) return h;
      if (const char* e = dlerror()) last_error = e;
    }
  std::string tried;
  for (const auto& n : lib.names) tried += (tried.empty() ? "" : ", ") + n;
  throw LibraryMissing(lib, "not available (tried " + tried + ")" + (last_error.empty() ? "" : ": " + last_error));
}

void* library_symbol(void* handle, const char* name, const CudaLibrary& lib) {
  void* p = dlsym(handle, name);
  if (!p) throw LibraryMissing(lib, std::string("symbol ") + name + " missing (library too old?)");
  return p;
}

void LoadOnce::run(void (*load)()) {
  std::call_once(once_, [&] {
    try {
      load();
    } catch (const Error& e) {
      failure_ = std::current_exception();
      why_ = e.what();
    }
  });
}

void LoadOnce::rethrow() const {
  if (failure_) std::rethrow_exception(failure_);
}

}  // namespace ca::cuda
