// The cubin cache on disk: an entry per key (base.cubin, base.ptx, and base.json with the log,
// lowered names and resources), written atomically with its .json last.
#include <filesystem>

#include "libcommon/bundle/compile.hpp"
#include "libcommon/bundle/compile_detail.hpp"
#include "libcommon/paths.hpp"

namespace fs = std::filesystem;

namespace ca::bundle {

std::string default_cache_dir() {
  if (const char* e = std::getenv("CUDA_AGENT_CACHE"); e && *e) return std::string(e) + "/cubin";
  if (const char* e = std::getenv("XDG_CACHE_HOME"); e && *e) return std::string(e) + "/cuda-agent/cubin";
  if (const char* e = std::getenv("HOME"); e && *e) return std::string(e) + "/.cache/cuda-agent/cubin";
  return "/tmp/cuda-agent-cache/cubin";
}

namespace {

Json meta_json(const CompileResult& r) {
  Json lowered = r.lowered;
  Json res = Json::object();
  for (auto& [k, v] : r.resources) res[k] = v.to_json();
  return Json{{"log", r.log}, {"lowered", lowered}, {"resources", res}, {"flags", r.flags}, {"nvrtc", r.nvrtc_version}};
}

}  // namespace

namespace detail {

bool load_cached(const std::string& base, CompileResult& r) {
  if (!file_exists(base + ".json") || !file_exists(base + ".cubin") || !file_exists(base + ".ptx")) return false;
  try {
    Json meta = parse_json(read_file(base + ".json"), base + ".json");
    r.cubin = read_file(base + ".cubin");
    r.ptx = read_file(base + ".ptx");
    r.log = meta.value("log", "");
    for (auto& [k, v] : meta["lowered"].items()) r.lowered[k] = v.get<std::string>();
    for (auto& [k, v] : meta["resources"].items()) {
      KernelResources kr;
      kr.mangled = k;
      kr.registers = v.value("registers", 0);
      kr.static_shared_bytes = v.value("static_shared_bytes", 0);
      kr.stack_bytes = v.value("stack_bytes", 0);
      kr.spill_store_bytes = v.value("spill_store_bytes", 0);
      kr.spill_load_bytes = v.value("spill_load_bytes", 0);
      r.resources[k] = kr;
    }
    return !r.cubin.empty();
  } catch (const std::exception&) {
    return false;  // a damaged entry is recompiled and rewritten
  }
}

void store_cached(const std::string& base, const CompileResult& r) {
  std::error_code ec;
  fs::create_directories(fs::path(base).parent_path(), ec);
  try {
    // The .json is written last: an entry without it is incomplete and ignored.
    write_file_atomic(base + ".cubin", r.cubin);
    write_file_atomic(base + ".ptx", r.ptx);
    write_file_atomic(base + ".json", meta_json(r).dump());
  } catch (const std::exception&) {
    // A read-only cache is not fatal: the next run compiles again.
  }
}

}  // namespace detail
}  // namespace ca::bundle
