// JSON Lines streams: records keep every key in arrival order; errors name the line.
#pragma once
#include <cstdint>
#include <fstream>
#include <iosfwd>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

namespace ca {

// The one JSON type, for records, messages, plans and configs. ordered_json keeps the keys in the
// order they arrived (a record's sections, a YAML map's entries); tools only add sections. Its
// objects are small vectors: a lookup is linear, so a map of thousands of keys (a tokenizer's
// vocabulary) is read with nlohmann::json where it is read. Content ids hash canonical_json
// (ids.hpp), which sorts the keys, so an id never depends on the order keys arrived in.
using Json = nlohmann::ordered_json;

inline constexpr std::size_t kMaxLineBytes = 64ull << 20;

class RecordReader {
 public:
  // path "-" is stdin. `name` is used in messages ("line 17" or "tasks.jsonl line 17").
  explicit RecordReader(const std::string& path);
  // Reads the next non-blank line. Returns false at end of input. A line that is not a JSON object,
  // or longer than kMaxLineBytes, throws InputError naming the line (a broken stream is fatal).
  bool next(Json& record);
  int64_t line_number() const { return line_number_; }
  const std::string& path() const { return path_; }
  std::string where() const;  // "line N" or "FILE line N"

 private:
  std::string path_;
  std::unique_ptr<std::ifstream> file_;
  std::istream* in_;
  int64_t line_number_ = 0;
  std::string buffer_;
};

class RecordWriter {
 public:
  explicit RecordWriter(const std::string& path);  // "-" is stdout; a file is created/truncated
  // One line per record, flushed at once so a killed pipeline keeps every record already written.
  void write(const Json& record);
  int64_t count() const { return count_; }

 private:
  std::unique_ptr<std::ofstream> file_;
  std::ostream* out_;
  int64_t count_ = 0;
};

// Parse one line into a record, or throw InputError("<where>: not JSON: ...").
Json parse_record_line(const std::string& line, const std::string& where);

// The value with every string and key made valid UTF-8 (a broken sequence becomes U+FFFD), so it
// dumps anywhere without a replace handler: what a model or a compiler wrote may be any bytes.
Json with_valid_utf8(Json value);

}  // namespace ca
