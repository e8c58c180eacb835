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

double get_positive(const Json& record, const std::string& pointer) {
  double v = get_required<double>(record, pointer);
  if (!std::isfinite(v) || v <= 0) throw FieldError(field_name(pointer), "expected a finite number > 0, got " + std::to_string(v));
  return v;
}

}  // namespace ca
