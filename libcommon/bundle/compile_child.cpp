// The confined compiler child and its protocol: `<self> --nvrtc-child` started in a clean
// environment, bounded by rlimits and confined (Landlock or interposition) to CUDA's headers before
// NVRTC runs; the request a JSON line on stdin, the answer a JSON line then the cubin and PTX bytes.
#include <dlfcn.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "libcommon/bundle/compile.hpp"
#include "libcommon/child_main.hpp"
#include "libcommon/bundle/compile_detail.hpp"
#include "libcommon/confine.hpp"
#include "libcommon/cuda/nvrtc.hpp"
#include "libcommon/errors.hpp"
#include "libcommon/process.hpp"

namespace fs = std::filesystem;

namespace ca::bundle {

using detail::nvrtc_compile;

namespace {

// Where NVRTC lives (its builtins library is loaded from the same folder at the first compile).
std::string nvrtc_library_dir() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(cuda::Nvrtc::get().version), &info) == 0 || !info.dli_fname) return "";
  std::error_code ec;
  auto real = fs::canonical(info.dli_fname, ec);
  return (ec ? fs::path(info.dli_fname) : real).parent_path().string();
}

std::string read_all(int fd) {
  std::string s;
  char buf[65536];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    s.append(buf, size_t(n));
  }
  return s;
}

void write_all(int fd, const std::string& s) {
  size_t done = 0;
  while (done < s.size()) {
    ssize_t n = ::write(fd, s.data() + done, s.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    done += size_t(n);
  }
}

constexpr int kChildConfineFailed = 3;

// Linked wherever the child is launched (confined_compile below), so every program that can start it
// answers it.
[[maybe_unused]] const bool kChildRegistered = register_child_main(kCompileChildFlag, compile_child_main);

}  // namespace

namespace detail {

// The confined compile: this program again, as `<self> --nvrtc-child`, in a clean environment; the
// request on stdin, the answer (a JSON line, then the cubin and PTX bytes) on stdout.
CompileResult confined_compile(const std::map<std::string, std::string>& kernels, const std::vector<std::string>& names,
                               const std::vector<std::string>& flags, const std::vector<std::string>& include_dirs) {
  Json req = {{"kernels", kernels}, {"names", names}, {"flags", flags}, {"read_dirs", include_dirs}};
  SpawnOptions so;
  // /proc/self/exe itself, not the path it names: the same file as the running tool even after the
  // path is replaced (a rebuild or an upgrade under a running service), so the child is never another
  // version, and never "(deleted)".
  so.argv = {"/proc/self/exe", kCompileChildFlag};
  so.clear_env = true;  // nothing of ours for the compiler to quote (/proc/self/environ)
  for (const char* keep : {"LD_LIBRARY_PATH", "CUDA_HOME", "PATH", "CUDA_AGENT_CONFINE", "CUDA_AGENT_UNCONFINED_COMPILE"})
    if (const char* v = std::getenv(keep)) so.env_overrides[keep] = v;
  so.capture_stderr = true;
  CommandResult res = run_command(so, req.dump(-1, ' ', false, Json::error_handler_t::replace), std::chrono::seconds(180),
                                  size_t(1) << 30);
  CompileResult r;
  r.flags = flags;
  if (res.timed_out) {
    r.log = "the compiler ran for more than 180 s and was stopped";
    return r;
  }
  size_t nl = res.out.find('\n');
  Json head;
  try {
    if (nl == std::string::npos) throw std::runtime_error("no answer");
    head = parse_json(std::string_view(res.out).substr(0, nl), "compiler child answer");
  } catch (const std::exception&) {
    if (res.exit_status == kChildConfineFailed) throw EnvironmentError("compile: " + res.err.substr(0, 500));
    // Killed from outside (the OOM killer, kill -9, a stop's SIGTERM): the environment failed, not
    // the candidate; never its compile_error. (Its own CPU limit ends it with SIGXCPU, a verdict.)
    // The signal is read from the wait status (an exit(137) is not a SIGKILL).
    if (const int sig = res.term_signal; sig == SIGKILL || sig == SIGTERM || sig == SIGINT || sig == SIGHUP)
      throw EnvironmentError("compile: the compiler was killed from outside (" + std::string(strsignal(sig)) +
                             "): not the candidate's verdict; judge it again");
    r.log = res.term_signal ? "the compiler crashed (" + std::string(strsignal(res.term_signal)) + ")"
                              : "the compiler stopped without an answer (exit " + std::to_string(res.exit_status) + ")";
    return r;
  }
  if (head.contains("confine_error"))
    throw EnvironmentError("compile: NVRTC cannot be confined to CUDA's headers: " + head["confine_error"].get<std::string>() +
                           " (set CUDA_AGENT_UNCONFINED_COMPILE=1 only for trusted bundles)");
  if (head.contains("internal_error")) throw InternalError("compile child: " + head["internal_error"].get<std::string>());
  r.ok = head.value("ok", false);
  r.log = head.value("log", "");
  r.confinement = head.value("confinement", "");
  const Json lowered = head.value("lowered", Json::object());
  for (auto& [k, v] : lowered.items()) r.lowered[k] = v.get<std::string>();
  const size_t cubin_bytes = head.value("cubin_bytes", size_t(0)), ptx_bytes = head.value("ptx_bytes", size_t(0));
  if (res.out.size() < nl + 1 + cubin_bytes + ptx_bytes) throw InternalError("compile child: answer truncated");
  r.cubin = res.out.substr(nl + 1, cubin_bytes);
  r.ptx = res.out.substr(nl + 1 + cubin_bytes, ptx_bytes);
  return r;
}

}  // namespace detail

int compile_child_main() {
  // Bounded like any untrusted job: memory, CPU, no files written, no core dumps.
  auto limit = [](int resource, rlim_t value) {
    struct rlimit rl{value, value};
    setrlimit(resource, &rl);
  };
  limit(RLIMIT_AS, rlim_t(8) << 30);
  {
    // Soft below hard: past 150 s of CPU it ends with SIGXCPU (the candidate's verdict); SIGKILL is
    // then always someone else's (an equal hard limit would send SIGKILL itself).
    struct rlimit cpu{150, 160};
    setrlimit(RLIMIT_CPU, &cpu);
  }
  limit(RLIMIT_FSIZE, 0);
  limit(RLIMIT_CORE, 0);
  auto answer = [](const Json& head, const std::string& tail = "") {
    write_all(1, head.dump(-1, ' ', false, Json::error_handler_t::replace) + "\n" + tail);
  };
  try {
    Json req = parse_json(read_all(0), "compiler child request");
    std::map<std::string, std::string> kernels = req.at("kernels").get<std::map<std::string, std::string>>();
    std::vector<std::string> names = req.at("names").get<std::vector<std::string>>();
    std::vector<std::string> flags = req.at("flags").get<std::vector<std::string>>();
    // NVRTC and its builtins are loaded before the confinement; reading is then allowed beneath
    // CUDA's include folders, and mapping code beneath NVRTC's own.
    cuda::Nvrtc::get();
    const std::string lib_dir = nvrtc_library_dir();
    Confinement c;
    for (const auto& d : req.at("read_dirs")) {
      c.read_dirs.push_back(d.get<std::string>());
      std::error_code ec;
      auto real = fs::canonical(d.get<std::string>(), ec);
      if (!ec) c.read_dirs.push_back(real.string());
    }
    if (!lib_dir.empty()) {
      c.exec_dirs.push_back(lib_dir);
      std::error_code ec;
      for (const auto& e : fs::directory_iterator(lib_dir, ec)) {
        std::string f = e.path().filename().string();
        if (f.rfind("libnvrtc-builtins.so", 0) == 0) dlopen(e.path().c_str(), RTLD_NOW | RTLD_GLOBAL);
      }
    }
    std::string why, mode = confinement_mode();
    const char* opt_out = std::getenv("CUDA_AGENT_UNCONFINED_COMPILE");
    bool confined = mode == "landlock"    ? confine_process(c, &why)
                    : mode == "interpose" ? confine_by_interposition(c, &why)
                                          : (why = "CUDA_AGENT_CONFINE=" + mode + ": expected landlock or interpose", false);
    if (!confined) {
      if (!(opt_out && std::string(opt_out) == "1")) {
        answer({{"confine_error", mode + ": " + why}});
        return kChildConfineFailed;
      }
      mode = "none (CUDA_AGENT_UNCONFINED_COMPILE=1)";
    }
    CompileResult r = nvrtc_compile(kernels, names, flags);
    answer({{"ok", r.ok}, {"log", r.log}, {"lowered", r.lowered}, {"cubin_bytes", r.cubin.size()}, {"ptx_bytes", r.ptx.size()},
            {"confinement", mode}},
           r.cubin + r.ptx);
    return 0;
  } catch (const std::exception& e) {
    answer({{"internal_error", e.what()}});
    return kExitInternal;
  }
}

}  // namespace ca::bundle
