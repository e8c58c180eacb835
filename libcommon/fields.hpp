// Typed access to record fields by JSON pointer ("/check/correct"); a missing or mistyped field
// throws FieldError naming the field, which the record loop turns into an `error` section.
#pragma once
#include <optional>
#include <string>

#include "libcommon/errors.hpp"
#include "libcommon/jsonl.hpp"

namespace ca {

// "/check/correct" -> "check.correct" for messages.
std::string field_name(const std::string& pointer);

namespace detail {
template <class T> constexpr const char* type_name() {
  if constexpr (std::is_same_v<T, bool>) return "a boolean";
  else if constexpr (std::is_integral_v<T>) return "an integer";
  else if constexpr (std::is_floating_point_v<T>) return "a number";
  else if constexpr (std::is_same_v<T, std::string>) return "a string";
  else return "a JSON value";
}
template <class T> bool has_type(const Json& v) {
  if constexpr (std::is_same_v<T, bool>) return v.is_boolean();
  else if constexpr (std::is_integral_v<T>) return v.is_number_integer();
  else if constexpr (std::is_floating_point_v<T>) return v.is_number();
  else if constexpr (std::is_same_v<T, std::string>) return v.is_string();
  else return true;
}
}  // namespace detail

// The value at `pointer` if present (std::nullopt when absent or null); FieldError when mistyped. The
// error names the field by `name` when given (a value read from inside a record: "episode.turns[2]..."),
// else by the pointer.
template <class T>
std::optional<T> get_optional(const Json& record, const std::string& pointer, const std::string& name = "") {
  const auto ptr = Json::json_pointer(pointer);
  if (!record.contains(ptr) || record.at(ptr).is_null()) return std::nullopt;
  const Json& v = record.at(ptr);
  if (!detail::has_type<T>(v))
    throw FieldError(name.empty() ? field_name(pointer) : name, std::string("expected ") + detail::type_name<T>() +
                                                                    ", got " + v.type_name() + " " + v.dump().substr(0, 40));
  if constexpr (std::is_same_v<T, Json>) return v;
  else return v.template get<T>();
}

template <class T> T get_required(const Json& record, const std::string& pointer) {
  auto v = get_optional<T>(record, pointer);
  if (!v) throw FieldError(field_name(pointer), "missing");
  return *v;
}

// A number that must also be finite and > 0 (times, sizes).
double get_positive(const Json& record, const std::string& pointer);

}  // namespace ca
