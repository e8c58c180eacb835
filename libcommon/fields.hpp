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
template <class T, class J> bool has_type(const J& v) {
  if constexpr (std::is_same_v<T, bool>) return v.is_boolean();
  else if constexpr (std::is_integral_v<T>) return v.is_number_integer();
  else if constexpr (std::is_floating_point_v<T>) return v.is_number();
  else if constexpr (std::is_same_v<T, std::string>) return v.is_string();
  else return true;
}
}  // namespace detail

// Whether `pointer` names a value in `j`: false, not the library's out_of_range, for an array index too
// large for any array ("/group/99999999999999999999999" in a user's --group-field).
template <class J> bool has_pointer(const J& j, const typename J::json_pointer& pointer) {
  try {
    return j.contains(pointer);
  } catch (const typename J::out_of_range&) {
    return false;
  }
}
// For an option that names a field by JSON pointer: "" when `text` is one, else why not (a CLI11 check,
// so a malformed pointer is a usage error at the start, not an error inside the first record).
std::string json_pointer_error(const std::string& text);

// The value at `pointer` if present (std::nullopt when absent or null); FieldError when mistyped. The
// error names the field by `name` when given (a value read from inside a record: "episode.turns[2]..."),
// else by the pointer.
// Any nlohmann JSON type: records are ordered, tokenizer.json is read sorted.
template <class T, class J = Json>
std::optional<T> get_optional(const J& record, const std::string& pointer, const std::string& name = "") {
  const auto ptr = typename J::json_pointer(pointer);
  if (!has_pointer(record, ptr) || record.at(ptr).is_null()) return std::nullopt;
  const J& v = record.at(ptr);
  if (!detail::has_type<T>(v))
    throw FieldError(name.empty() ? field_name(pointer) : name, std::string("expected ") + detail::type_name<T>() +
                                                                    ", got " + v.type_name() + " " + v.dump().substr(0, 40));
  if constexpr (std::is_same_v<T, J>) return v;
  else return v.template get<T>();
}

template <class T> T get_required(const Json& record, const std::string& pointer) {
  auto v = get_optional<T>(record, pointer);
  if (!v) throw FieldError(field_name(pointer), "missing");
  return *v;
}

// A setting read from a file (config.json, adapter_config.json, tokenizer.json): the value at `pointer`,
// `fallback` when absent or null (as Hugging Face and PEFT write unset settings); a mistyped one is an
// InputError naming the file and the setting (exit 2), since no record is there to carry a FieldError.
template <class T, class J = Json>
T get_setting(const J& file, const std::string& pointer, T fallback, const std::string& origin) {
  try {
    return get_optional<T>(file, pointer).value_or(std::move(fallback));
  } catch (const FieldError& e) {
    throw InputError(origin + ": " + e.what());
  }
}

// The string at `key`, or "" when `j` is not an object or the key is absent or holds another type. For
// reading the store's own rows leniently (a stored verdict that does not say is judged again, a report
// shows a blank), never a record's field: a record's mistyped field is a FieldError (get_optional).
std::string string_or_empty(const Json& j, const std::string& key);

// A number that must also be finite and > 0 (times, sizes).
double get_positive(const Json& record, const std::string& pointer);

}  // namespace ca
