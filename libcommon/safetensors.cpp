// safetensors implementation.
#include "libcommon/safetensors.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>

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
// The header of an open file: every tensor's dtype, shape and byte range, checked against the file's size.
SafetensorsHeader read_header(std::ifstream& in, const std::string& path) {
  uint64_t header_len = 0;
  in.read(reinterpret_cast<char*>(&header_len), 8);
  if (!in || header_len > (100ull << 20)) throw InputError("'" + path + "': not a safetensors file (bad header length)");
  std::string header(header_len, '\0');
  in.read(header.data(), static_cast<std::streamsize>(header_len));
  if (!in) throw InputError("'" + path + "': not a safetensors file (the header is cut short)");
  Json meta;
  try {
    meta = parse_json(header, "header");
  } catch (const std::exception& e) {
    throw InputError("'" + path + "': bad safetensors header: " + e.what());
  }
  if (!meta.is_object()) throw InputError("'" + path + "': bad safetensors header: not a JSON object");
  in.seekg(0, std::ios::end);
  const uint64_t file_size = static_cast<uint64_t>(in.tellg());
  SafetensorsHeader out;
  out.data_start = 8 + header_len;
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
        throw InputError("'" + path + "': tensor '" + name + "' has bad data_offsets");
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
  return out;
}
}  // namespace

SafetensorsHeader read_safetensors_header(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError("cannot open safetensors file '" + path + "'");
  return read_header(in, path);
}

SafetensorsFile read_safetensors(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError("cannot open safetensors file '" + path + "'");
  SafetensorsHeader header = read_header(in, path);
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

void write_safetensors(const std::string& path, const TensorMap& tensors, const std::map<std::string, std::string>& metadata) {
  Json header = Json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  uint64_t offset = 0;
  for (auto& [name, t] : tensors) {
    if (t.data.size() != static_cast<std::size_t>(t.numel()) * Tensor::dtype_size(t.dtype))
      throw InternalError("write_safetensors: tensor '" + name + "' data does not match its shape");
    header[name] = {{"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {offset, offset + t.data.size()}}};
    offset += t.data.size();
  }
  std::string text = header.dump();
  while ((text.size() + 8) % 8 != 0) text += ' ';  // align the data to 8 bytes, as the reference writer does
  AtomicFile out(path);  // every write, the fsync, close and rename checked; never a cut file in place
  uint64_t len = text.size();
  out.write(&len, 8);
  out.write(text);
  for (auto& [name, t] : tensors) out.write(t.data.data(), t.data.size());
  out.commit();
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

}  // namespace ca
