// The confinement where the kernel has no Landlock (gVisor's GPU machines report Linux 4.4): this
// program's own definitions of the libc calls through which a library opens files (open, fopen,
// fopen64, opendir), exported from the executable (libcommon/confine.dynlist) so that a library
// loaded later, such as NVRTC, binds to them. Until confine_by_interposition() they pass straight
// through to libc; after it, a path that does not resolve beneath an allowed folder fails with
// EACCES. It guards against what the attacker controls here, the paths a candidate's #include lines
// make NVRTC open; NVRTC itself is not hostile. Landlock, where the kernel has it, is used instead
// (libcommon/confine.cpp), and the compiler's messages are filtered either way.
#include <dirent.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <string>
#include <vector>

#include "libcommon/confine.hpp"

namespace {

std::atomic<bool> g_confined{false};
std::vector<std::string>* g_allowed = nullptr;  // canonical folders, each ending in '/'

template <class F> F real(const char* name) {
  static_assert(sizeof(F) == sizeof(void*));
  void* p = dlsym(RTLD_NEXT, name);
  F f;
  std::memcpy(&f, &p, sizeof f);
  return f;
}

bool allowed(const char* path) {
  if (!g_confined.load(std::memory_order_acquire)) return true;
  if (!path) return false;
  char resolved[PATH_MAX];
  // realpath() resolves symlinks and "..": what is opened is what is checked. A path that does not
  // exist is refused too (NVRTC then says it cannot open it, as for any missing file).
  if (!::realpath(path, resolved)) return false;
  std::string p = std::string(resolved) + "/";
  for (const auto& dir : *g_allowed)
    if (p.compare(0, dir.size(), dir) == 0) return true;
  return false;
}

}  // namespace

namespace ca {

bool confine_by_interposition(const Confinement& c, std::string* why) {
  auto* dirs = new std::vector<std::string>();
  for (const auto* list : {&c.read_dirs, &c.exec_dirs})
    for (const auto& d : *list) {
      char resolved[PATH_MAX];
      if (::realpath(d.c_str(), resolved)) dirs->push_back(std::string(resolved) + "/");
    }
  if (dirs->empty()) {
    if (why) *why = "no allowed folder exists";
    delete dirs;
    return false;
  }
  // The executable must export these definitions, or a library would bind to libc's.
  void* self = dlopen(nullptr, RTLD_NOW);
  void* ours = self ? dlsym(self, "fopen") : nullptr;
  if (ours != reinterpret_cast<void*>(&::fopen)) {
    if (why) *why = "this program does not export its libc wrappers (link with libcommon/confine.dynlist)";
    delete dirs;
    return false;
  }
  g_allowed = dirs;
  g_confined.store(true, std::memory_order_release);
  return true;
}

}  // namespace ca

extern "C" {

// open and open64, fopen and fopen64: one check each, the real function looked up by name.
static int guarded_open(const char* name, const char* path, int flags, va_list ap) {
  using Open = int (*)(const char*, int, ...);
  static Open real_open = real<Open>("open"), real_open64 = real<Open>("open64");
  Open next = std::strcmp(name, "open64") == 0 ? real_open64 : real_open;
  // A mode follows only with O_CREAT or the whole of O_TMPFILE (which shares a bit with O_DIRECTORY).
  const mode_t mode = ((flags & O_CREAT) || (flags & O_TMPFILE) == O_TMPFILE) ? va_arg(ap, mode_t) : 0;
  if (!allowed(path) || (g_confined.load() && (flags & (O_WRONLY | O_RDWR | O_CREAT)))) {
    errno = EACCES;
    return -1;
  }
  return next(path, flags, mode);
}

static FILE* guarded_fopen(const char* name, const char* path, const char* mode) {
  using Fopen = FILE* (*)(const char*, const char*);
  static Fopen real_fopen = real<Fopen>("fopen"), real_fopen64 = real<Fopen>("fopen64");
  Fopen next = std::strcmp(name, "fopen64") == 0 ? real_fopen64 : real_fopen;
  if (!allowed(path) || (g_confined.load() && mode && std::strpbrk(mode, "wa+"))) {
    errno = EACCES;
    return nullptr;
  }
  return next(path, mode);
}

int open(const char* path, int flags, ...) {
  va_list ap;
  va_start(ap, flags);
  int fd = guarded_open("open", path, flags, ap);
  va_end(ap);
  return fd;
}

int open64(const char* path, int flags, ...) {
  va_list ap;
  va_start(ap, flags);
  int fd = guarded_open("open64", path, flags, ap);
  va_end(ap);
  return fd;
}

FILE* fopen(const char* path, const char* mode) { return guarded_fopen("fopen", path, mode); }
FILE* fopen64(const char* path, const char* mode) { return guarded_fopen("fopen64", path, mode); }

DIR* opendir(const char* path) {
  static auto next = real<DIR* (*)(const char*)>("opendir");
  if (!allowed(path)) {
    errno = EACCES;
    return nullptr;
  }
  return next(path);
}

}  // extern "C"
