// CUDA IPC: descriptions of shared device tensors, and their mappings.
#include "libcommon/cuda/ipc.hpp"

#include <cstring>

#include "libcommon/cuda/driver.hpp"
#include "libcommon/errors.hpp"

namespace ca::cuda {

namespace {

std::string hex_of(const unsigned char* p, size_t n) {
  static const char* digits = "0123456789abcdef";
  std::string s;
  for (size_t i = 0; i < n; ++i) {
    s += digits[p[i] >> 4];
    s += digits[p[i] & 15];
  }
  return s;
}

CUipcMemHandle handle_of(const std::string& hex) {
  CUipcMemHandle h;
  static_assert(sizeof h.reserved == 64, "CUipcMemHandle is 64 bytes");
  if (hex.size() != 2 * sizeof h.reserved) throw InputError("IPC handle: expected 128 hex digits, got " + std::to_string(hex.size()));
  auto nibble = [&](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    throw InputError("IPC handle: '" + std::string(1, c) + "' is not a hex digit");
  };
  for (size_t i = 0; i < sizeof h.reserved; ++i) h.reserved[i] = static_cast<char>(nibble(hex[2 * i]) * 16 + nibble(hex[2 * i + 1]));
  return h;
}

}  // namespace

Json SharedTensor::to_json() const {
  Json j = {{"dtype", dtype}, {"shape", shape}, {"bytes", bytes}};
  if (!handle.empty()) {
    j["handle"] = handle;
    j["offset"] = offset;
  }
  return j;
}

std::map<std::string, SharedTensor> shared_tensors(const Json& descriptions, const std::string& where) {
  if (!descriptions.is_object()) throw FieldError(where, "expected an object of tensor descriptions");
  std::map<std::string, SharedTensor> out;
  for (const auto& [name, d] : descriptions.items()) {
    const std::string at = where + "." + name;
    if (!d.is_object()) throw FieldError(at, "expected an object");
    SharedTensor t;
    if (!d.contains("dtype") || !d["dtype"].is_string()) throw FieldError(at + ".dtype", "missing or not a string");
    t.dtype = d["dtype"].get<std::string>();
    if (!d.contains("shape") || !d["shape"].is_array()) throw FieldError(at + ".shape", "missing or not an array");
    for (const auto& x : d["shape"]) {
      if (!x.is_number_integer() || x.get<int64_t>() < 0) throw FieldError(at + ".shape", "expected non-negative integers");
      t.shape.push_back(x.get<int64_t>());
    }
    if (!d.contains("bytes") || !d["bytes"].is_number_unsigned()) throw FieldError(at + ".bytes", "missing or not a byte count");
    t.bytes = d["bytes"].get<size_t>();
    if (t.bytes > 0) {
      if (!d.contains("handle") || !d["handle"].is_string()) throw FieldError(at + ".handle", "missing or not a string");
      t.handle = d["handle"].get<std::string>();
      if (!d.contains("offset") || !d["offset"].is_number_unsigned()) throw FieldError(at + ".offset", "missing or not an offset");
      t.offset = d["offset"].get<size_t>();
    }
    out[name] = std::move(t);
  }
  return out;
}

std::string export_handle(CUdeviceptr base) {
  auto& d = Driver::get();
  CUipcMemHandle h;
  d.check(d.cuIpcGetMemHandle(&h, base), "cuIpcGetMemHandle");
  return hex_of(reinterpret_cast<const unsigned char*>(h.reserved), sizeof h.reserved);
}

IpcMaps::~IpcMaps() { close(); }

CUdeviceptr IpcMaps::map(const SharedTensor& t) {
  if (t.bytes == 0) return 0;
  auto it = open_.find(t.handle);
  if (it == open_.end()) {
    auto& d = Driver::get();
    CUdeviceptr base = 0;
    d.check(d.cuIpcOpenMemHandle(&base, handle_of(t.handle), CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS), "cuIpcOpenMemHandle");
    it = open_.emplace(t.handle, base).first;
  }
  return it->second + t.offset;
}

void IpcMaps::close() {
  auto& d = Driver::get();
  for (auto& [h, base] : open_) d.cuIpcCloseMemHandle(base);
  open_.clear();
}

}  // namespace ca::cuda
