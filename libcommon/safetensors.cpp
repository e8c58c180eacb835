// safetensors implementation.
#include "libcommon/safetensors.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "libcommon/atomic_file.hpp"
#include "libcommon/dtype.hpp"
#include "libcommon/errors.hpp"

namespace ca {

std::size_t Tensor::dtype_size(const std::string& d) {
  const DtypeInfo* info = dtype_info(d);
  if (!info) throw InputError("safetensors: unknown dtype '" + d + "'");
  return info->bytes;
}

int64_t Tensor::numel() const {
  int64_t n = 1;
  for (auto s : shape)
    if (s < 0 || __builtin_mul_overflow(n, s, &n))
      throw InputError("safetensors: shape " + Json(shape).dump() + " has a negative dimension or more than 2^63 elements");
  return n;
}

Tensor Tensor::zeros(const std::string& dtype, std::vector<int64_t> shape) {
  Tensor t{dtype, std::move(shape), {}};
  t.data.assign(static_cast<std::size_t>(t.numel()) * dtype_size(dtype), 0);
  return t;
}

namespace {
// The header as text: every tensor's dtype, shape and byte range, checked against the file's size;
// no two tensors share a byte (a tensor read through one name must not change under another).
SafetensorsHeader parse_header_text(const std::string& header, uint64_t file_size, const std::string& path) {
  Json meta;
  try {
    meta = parse_json(header, "header");
  } catch (const std::exception& e) {
    throw InputError("'" + path + "': bad safetensors header: " + e.what());
  }
  if (!meta.is_object()) throw InputError("'" + path + "': bad safetensors header: not a JSON object");
  SafetensorsHeader out;
  out.data_start = 8 + header.size();
  for (auto& [name, info] : meta.items()) {
    if (name == "__metadata__") {
      if (!info.is_object()) throw InputError("'" + path + "': __metadata__ is not an object");
      for (auto& [k, v] : info.items()) out.metadata[k] = v.is_string() ? v.get<std::string>() : v.dump();
      continue;
    }
    TensorInfo t;
    try {
      t.dtype = info.at("dtype").get<std::string>();
      t.shape = info.at("shape").get<std::vector<int64_t>>();
      auto offsets = info.at("data_offsets").get<std::vector<uint64_t>>();
      if (offsets.size() != 2 || offsets[1] < offsets[0] || offsets[1] > file_size - std::min(file_size, out.data_start))
        throw InputError("'" + path + "': tensor '" + name + "' has bad data_offsets (past the end of the file)");
      t.begin = offsets[0];
      t.bytes = offsets[1] - offsets[0];
    } catch (const Json::exception& e) {
      throw InputError("'" + path + "': tensor '" + name + "': bad entry: " + e.what());
    }
    int64_t numel = 0;
    try {
      numel = Tensor{t.dtype, t.shape, {}}.numel();
    } catch (const InputError&) {
      throw InputError("'" + path + "': tensor '" + name + "' has a bad shape " + Json(t.shape).dump());
    }
    uint64_t want = 0;
    if (__builtin_mul_overflow(static_cast<uint64_t>(numel), static_cast<uint64_t>(Tensor::dtype_size(t.dtype)), &want) ||
        t.bytes != want)
      throw InputError("'" + path + "': tensor '" + name + "' size does not match its shape and dtype");
    out.tensors.emplace(name, std::move(t));
  }
  std::vector<std::pair<const std::string*, const TensorInfo*>> by_offset;
  for (auto& [name, t] : out.tensors)
    if (t.bytes > 0) by_offset.emplace_back(&name, &t);
  std::sort(by_offset.begin(), by_offset.end(), [](auto& a, auto& b) { return a.second->begin < b.second->begin; });
  for (std::size_t i = 1; i < by_offset.size(); ++i)
    if (by_offset[i].second->begin < by_offset[i - 1].second->begin + by_offset[i - 1].second->bytes)
      throw InputError("'" + path + "': tensors '" + *by_offset[i - 1].first + "' and '" + *by_offset[i].first +
                       "' overlap in the file (bad data_offsets)");
  return out;
}

uint64_t header_length(const uint8_t* first8, uint64_t file_size, const std::string& path) {
  uint64_t header_len = 0;
  if (file_size < 8) throw InputError("'" + path + "': not a safetensors file (shorter than 8 bytes)");
  std::memcpy(&header_len, first8, 8);
  if (header_len > (100ull << 20)) throw InputError("'" + path + "': not a safetensors file (bad header length)");
  if (header_len > file_size - 8) throw InputError("'" + path + "': not a safetensors file (the header is cut short)");
  return header_len;
}
}  // namespace

SafetensorsHeader parse_safetensors_header(const uint8_t* bytes, uint64_t file_size, const std::string& path) {
  const uint64_t len = header_length(bytes, file_size, path);
  return parse_header_text(std::string(reinterpret_cast<const char*>(bytes) + 8, len), file_size, path);
}

SafetensorsHeader read_safetensors_header(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError("cannot open safetensors file '" + path + "'");
  in.seekg(0, std::ios::end);
  const uint64_t file_size = static_cast<uint64_t>(in.tellg());
  in.seekg(0);
  uint8_t first8[8] = {};
  in.read(reinterpret_cast<char*>(first8), 8);
  const uint64_t len = header_length(first8, in ? file_size : 0, path);
  std::string header(len, '\0');
  in.read(header.data(), static_cast<std::streamsize>(len));
  if (!in) throw InputError("'" + path + "': not a safetensors file (the header is cut short)");
  return parse_header_text(header, file_size, path);
}

SafetensorsFile read_safetensors(const std::string& path) {
  SafetensorsHeader header = read_safetensors_header(path);
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError("cannot open safetensors file '" + path + "'");
  SafetensorsFile out;
  out.metadata = std::move(header.metadata);
  for (auto& [name, info] : header.tensors) {
    Tensor t{info.dtype, info.shape, {}};
    t.data.resize(info.bytes);
    in.clear();
    in.seekg(static_cast<std::streamoff>(header.data_start + info.begin));
    in.read(reinterpret_cast<char*>(t.data.data()), static_cast<std::streamsize>(info.bytes));
    if (!in) throw InputError("'" + path + "': tensor '" + name + "' could not be read whole");
    out.tensors.emplace(name, std::move(t));
  }
  return out;
}

SafetensorsPlan plan_safetensors(std::vector<SafetensorsPlanEntry> entries, const std::map<std::string, std::string>& metadata) {
  std::sort(entries.begin(), entries.end(), [](auto& a, auto& b) { return a.name < b.name; });
  Json header = Json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  uint64_t offset = 0;
  for (auto& e : entries) {
    if (header.contains(e.name)) throw InternalError("plan_safetensors: tensor '" + e.name + "' twice");
    header[e.name] = {{"dtype", e.dtype}, {"shape", e.shape}, {"data_offsets", {offset, offset + e.bytes}}};
    e.file_offset = offset;
    offset += e.bytes;
  }
  std::string text = header.dump();
  while ((text.size() + 8) % 8 != 0) text += ' ';  // align the data to 8 bytes, as the reference writer does
  SafetensorsPlan plan;
  uint64_t len = text.size();
  plan.header.assign(reinterpret_cast<const char*>(&len), 8);
  plan.header += text;
  for (auto& e : entries) e.file_offset += plan.header.size();
  plan.file_size = plan.header.size() + offset;
  plan.entries = std::move(entries);
  return plan;
}

void write_safetensors(const std::string& path, const TensorMap& tensors, const std::map<std::string, std::string>& metadata) {
  std::vector<SafetensorsPlanEntry> entries;
  for (auto& [name, t] : tensors) {
    if (t.data.size() != static_cast<std::size_t>(t.numel()) * Tensor::dtype_size(t.dtype))
      throw InternalError("write_safetensors: tensor '" + name + "' data does not match its shape");
    entries.push_back({name, t.dtype, t.shape, t.data.size(), 0});
  }
  SafetensorsPlan plan = plan_safetensors(std::move(entries), metadata);
  AtomicFile out(path);  // every write, the fsync, close and rename checked; never a cut file in place
  out.write(plan.header);
  for (auto& e : plan.entries) out.write(tensors.at(e.name).data.data(), e.bytes);
  out.commit();
}

MappedFile::MappedFile(const std::string& path) : path_(path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) throw InputError("cannot open safetensors file '" + path + "': " + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    throw InputError("'" + path + "' is not a regular file");
  }
  size_ = static_cast<uint64_t>(st.st_size);
  if (size_ > 0) {
    void* p = ::mmap(nullptr, size_, PROT_READ, MAP_SHARED, fd, 0);
    const int err = errno;
    ::close(fd);
    if (p == MAP_FAILED) throw EnvironmentError("cannot map '" + path + "': " + std::strerror(err));
    data_ = static_cast<const uint8_t*>(p);
  } else {
    ::close(fd);
  }
}

MappedFile::~MappedFile() {
  if (data_) ::munmap(const_cast<uint8_t*>(data_), size_);
}

namespace {
// Whole pages inside [offset, offset + bytes) of a mapping (`inner`), or every page it touches.
std::pair<uintptr_t, std::size_t> pages(const uint8_t* base, uint64_t size, uint64_t offset, uint64_t bytes, bool inner) {
  static const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGE_SIZE));
  if (offset >= size) return {0, 0};
  bytes = std::min(bytes, size - offset);
  uintptr_t b = reinterpret_cast<uintptr_t>(base + offset), e = b + bytes;
  b = inner ? (b + page - 1) / page * page : b / page * page;
  e = inner ? e / page * page : (e + page - 1) / page * page;
  const uintptr_t map_end = reinterpret_cast<uintptr_t>(base) + (size + page - 1) / page * page;
  e = std::min(e, map_end);
  return e > b ? std::pair{b, std::size_t(e - b)} : std::pair{uintptr_t(0), std::size_t(0)};
}
}  // namespace

void MappedFile::will_need(uint64_t offset, uint64_t bytes) const {
  auto [b, n] = pages(data_, size_, offset, bytes, false);
  if (n) ::madvise(reinterpret_cast<void*>(b), n, MADV_WILLNEED);
}

void MappedFile::release(uint64_t offset, uint64_t bytes) const {
  auto [b, n] = pages(data_, size_, offset, bytes, true);
  if (n) ::madvise(reinterpret_cast<void*>(b), n, MADV_DONTNEED);  // file pages stay in the page cache
}

float bf16_to_float(uint16_t v) {
  uint32_t bits = static_cast<uint32_t>(v) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

uint16_t float_to_bf16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  if (std::isnan(f)) return 0x7fc0;
  uint32_t rounding = 0x7fff + ((bits >> 16) & 1);
  return static_cast<uint16_t>((bits + rounding) >> 16);
}

float fp16_to_float(uint16_t h) {
  uint32_t sign = (h >> 15) & 1, exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
  float value;
  if (exp == 0) value = std::ldexp(static_cast<float>(mant), -24);
  else if (exp == 31) value = mant ? NAN : INFINITY;
  else value = std::ldexp(static_cast<float>(mant | 0x400), static_cast<int>(exp) - 25);
  return sign ? -value : value;
}

uint16_t float_to_fp16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  uint32_t sign = (bits >> 16) & 0x8000;
  if (std::isnan(f)) return static_cast<uint16_t>(sign | 0x7e00);
  float a = std::fabs(f);
  if (a >= 65520.0f) return static_cast<uint16_t>(sign | 0x7c00);
  if (a < 6.103515625e-05f) {  // subnormal: multiples of 2^-24, round to nearest even
    float q = std::nearbyint(a * 16777216.0f);
    return static_cast<uint16_t>(sign | static_cast<uint32_t>(q));
  }
  int e;
  float m = std::frexp(a, &e);                    // a = m * 2^e, m in [0.5, 1)
  float scaled = std::nearbyint(m * 2048.0f);     // 11 significant bits
  if (scaled >= 2048.0f) { scaled /= 2; ++e; }
  uint32_t exp = static_cast<uint32_t>(e + 14);
  uint32_t mant = static_cast<uint32_t>(scaled) - 1024;
  return static_cast<uint16_t>(sign | (exp << 10) | mant);
}

void to_doubles(const Tensor& t, std::size_t begin, std::size_t count, double* out) {
  const auto* p = t.data.data();
  const std::string& d = t.dtype;
  auto convert = [&](auto read) {
    for (std::size_t i = 0; i < count; ++i) out[i] = read(begin + i);
  };
  if (d == "F32") convert([&](std::size_t i) { return double(reinterpret_cast<const float*>(p)[i]); });
  else if (d == "F64") convert([&](std::size_t i) { return reinterpret_cast<const double*>(p)[i]; });
  else if (d == "F16") convert([&](std::size_t i) { return double(fp16_to_float(reinterpret_cast<const uint16_t*>(p)[i])); });
  else if (d == "BF16") convert([&](std::size_t i) { return double(bf16_to_float(reinterpret_cast<const uint16_t*>(p)[i])); });
  else if (d == "I64") convert([&](std::size_t i) { return double(reinterpret_cast<const int64_t*>(p)[i]); });
  else if (d == "I32") convert([&](std::size_t i) { return double(reinterpret_cast<const int32_t*>(p)[i]); });
  else if (d == "I16") convert([&](std::size_t i) { return double(reinterpret_cast<const int16_t*>(p)[i]); });
  else if (d == "I8") convert([&](std::size_t i) { return double(reinterpret_cast<const int8_t*>(p)[i]); });
  else if (d == "U8" || d == "BOOL") convert([&](std::size_t i) { return double(p[i]); });
  else throw InputError("to_doubles: unsupported dtype " + d);
}

std::vector<double> to_doubles(const Tensor& t) {
  std::vector<double> out(static_cast<std::size_t>(t.numel()));
  to_doubles(t, 0, out.size(), out.data());
  return out;
}

namespace {
template <class T> void convert_any(const void* src, const std::string& d, std::size_t n, T* out) {
  const auto* p = static_cast<const uint8_t*>(src);
  if (d == "F32") {
    for (std::size_t i = 0; i < n; ++i) {
      float v;
      std::memcpy(&v, p + 4 * i, 4);
      out[i] = T(v);
    }
  } else if (d == "BF16" || d == "F16") {
    const bool bf = d == "BF16";
    for (std::size_t i = 0; i < n; ++i) {
      uint16_t v;
      std::memcpy(&v, p + 2 * i, 2);
      out[i] = T(bf ? bf16_to_float(v) : fp16_to_float(v));
    }
  } else if (d == "F64") {
    for (std::size_t i = 0; i < n; ++i) {
      double v;
      std::memcpy(&v, p + 8 * i, 8);
      out[i] = T(v);
    }
  } else {
    throw InputError("dtype " + d + " is not a float type (F32, F64, BF16 or F16 expected)");
  }
}
}  // namespace

void convert_elements(const void* src, const std::string& dtype, std::size_t count, float* out) { convert_any(src, dtype, count, out); }
void convert_elements(const void* src, const std::string& dtype, std::size_t count, double* out) { convert_any(src, dtype, count, out); }

void convert_floats(const float* src, std::size_t count, const std::string& dtype, void* dst) {
  auto* q = static_cast<uint8_t*>(dst);
  if (dtype == "F32") {
    std::memcpy(q, src, count * 4);
  } else if (dtype == "BF16" || dtype == "F16") {
    const bool bf = dtype == "BF16";
    for (std::size_t i = 0; i < count; ++i) {
      const uint16_t v = bf ? float_to_bf16(src[i]) : float_to_fp16(src[i]);
      std::memcpy(q + 2 * i, &v, 2);
    }
  } else {
    throw InputError("cannot write dtype " + dtype + " (F32, BF16 or F16)");
  }
}

}  // namespace ca
