// Content ids through OpenSSL's SHA-256 (linked statically).
#include "libcommon/ids.hpp"

#include <sys/stat.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include <openssl/evp.h>

#include "libcommon/errors.hpp"

namespace ca {

namespace {
std::string hex_of(const unsigned char* digest, unsigned length) {
  static const char* hex = "0123456789abcdef";
  std::string out;
  out.reserve(length * 2);
  for (unsigned i = 0; i < length; ++i) {
    out += hex[digest[i] >> 4];
    out += hex[digest[i] & 15];
  }
  return out;
}
}  // namespace

std::string sha256_hex(std::string_view bytes) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  if (EVP_Digest(bytes.data(), bytes.size(), digest, &length, EVP_sha256(), nullptr) != 1)
    throw InternalError("sha256 failed");
  return hex_of(digest, length);
}

std::string sha256_file_hex(const std::string& path) {
  std::unique_ptr<FILE, int (*)(FILE*)> f(std::fopen(path.c_str(), "rb"), &std::fclose);
  if (!f) throw InputError("'" + path + "': cannot open: " + std::strerror(errno));
  struct stat st {};
  if (::fstat(::fileno(f.get()), &st) != 0 || !S_ISREG(st.st_mode)) throw InputError("'" + path + "': not a regular file");
  std::unique_ptr<EVP_MD_CTX, void (*)(EVP_MD_CTX*)> ctx(EVP_MD_CTX_new(), &EVP_MD_CTX_free);
  if (!ctx || EVP_DigestInit_ex(ctx.get(), EVP_sha256(), nullptr) != 1) throw InternalError("sha256 failed");
  std::vector<char> block(1 << 20);
  for (;;) {
    const std::size_t n = std::fread(block.data(), 1, block.size(), f.get());
    if (n > 0 && EVP_DigestUpdate(ctx.get(), block.data(), n) != 1) throw InternalError("sha256 failed");
    if (n < block.size()) break;
  }
  if (std::ferror(f.get())) throw InputError("'" + path + "': read error");
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  if (EVP_DigestFinal_ex(ctx.get(), digest, &length) != 1) throw InternalError("sha256 failed");
  return hex_of(digest, length);
}

// nlohmann::json keeps objects in sorted maps: converting to it sorts the keys of every object, at
// every depth. This is the one place the sorted type is used for records.
std::string canonical_json(const Json& value) {
  return nlohmann::json(value).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

std::string content_id(const Json& value) { return sha256_hex(canonical_json(value)).substr(0, 16); }

std::string task_id_for(const Json& task) {
  Json key = Json::object();
  for (const char* field : {"code", "init_inputs", "inputs"}) {
    if (task.contains(field)) key[field] = task[field];
  }
  if (task.contains("reference") && task["reference"].is_object()) {
    const Json& ref = task["reference"];
    if (ref.contains("mode") && ref["mode"].is_string() && ref["mode"] != "train") key["reference_mode"] = ref["mode"];
  }
  return content_id(key);
}

std::string candidate_id_for(const std::string& task_id, const Json& bundle) {
  Json key = {{"task_id", task_id}, {"bundle", bundle}};
  return content_id(key);
}

uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

uint64_t unpredictable_seed() {
  std::random_device rd;
  const uint64_t hi = rd(), lo = rd();
  return ((hi << 32) ^ lo) & ((uint64_t(1) << 53) - 1);
}

}  // namespace ca
