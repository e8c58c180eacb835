// Content ids through OpenSSL's SHA-256 (linked statically).
#include "libcommon/ids.hpp"

#include <random>

#include <openssl/evp.h>

#include "libcommon/errors.hpp"

namespace ca {

std::string sha256_hex(std::string_view bytes) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  if (EVP_Digest(bytes.data(), bytes.size(), digest, &length, EVP_sha256(), nullptr) != 1)
    throw InternalError("sha256 failed");
  static const char* hex = "0123456789abcdef";
  std::string out;
  out.reserve(length * 2);
  for (unsigned i = 0; i < length; ++i) {
    out += hex[digest[i] >> 4];
    out += hex[digest[i] & 15];
  }
  return out;
}

std::string canonical_json(const Json& value) { return value.dump(-1, ' ', false, Json::error_handler_t::replace); }
// Converting ordered_json to json sorts the keys of every object.
std::string canonical_json(const Record& value) { return canonical_json(Json(value)); }

std::string content_id(const Json& value) { return sha256_hex(canonical_json(value)).substr(0, 16); }
std::string content_id(const Record& value) { return sha256_hex(canonical_json(value)).substr(0, 16); }

std::string task_id_for(const Record& task) {
  Json key = Json::object();
  for (const char* field : {"code", "init_inputs", "inputs"}) {
    if (task.contains(field)) key[field] = Json(task[field]);
  }
  return content_id(key);
}

std::string candidate_id_for(const std::string& task_id, const Record& bundle) {
  Json key = {{"task_id", task_id}, {"bundle", Json(bundle)}};
  return content_id(key);
}

uint64_t unpredictable_seed() {
  std::random_device rd;
  const uint64_t hi = rd(), lo = rd();
  return ((hi << 32) ^ lo) & ((uint64_t(1) << 53) - 1);
}

}  // namespace ca
