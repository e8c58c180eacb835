// Field access helpers.
#include "libcommon/fields.hpp"

#include <cmath>

namespace ca {

std::string field_name(const std::string& pointer) {
  std::string out;
  for (char c : pointer) out += (c == '/') ? '.' : c;
  if (!out.empty() && out[0] == '.') out.erase(0, 1);
  return out;
}

std::string string_or_empty(const Json& j, const std::string& key) {
  if (!j.is_object()) return "";
  const auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
}

std::string json_pointer_error(const std::string& text) {
  try {
    (void)Json::json_pointer(text);
    return "";
  } catch (const Json::exception&) {
    return "'" + text + "' is not a JSON pointer (RFC 6901: empty, or '/' before each key: /task_id, /reward/value)";
  }
}

double get_positive(const Json& record, const std::string& pointer) {
  double v = get_required<double>(record, pointer);
  if (!std::isfinite(v) || v <= 0) throw FieldError(field_name(pointer), "expected a finite number > 0, got " + std::to_string(v));
  return v;
}

}  // namespace ca
