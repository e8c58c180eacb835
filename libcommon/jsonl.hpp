// JSON Lines streams: records keep every key in arrival order; errors name the line.
#pragma once
#include <cstdint>
#include <fstream>
#include <iosfwd>
#include <memory>
// A broken precondition inside the JSON library throws instead of reading past an object: const
// operator[] on an absent key is undefined behaviour under NDEBUG (a garbage read a record could
// steer). The throw is an InternalError naming the check (exit 4), which the tests see; inside the
// library's noexcept functions it ends the process, as an abort() would. This header is the one that
// includes the library, so every translation unit gets the same definition.
namespace ca {
[[noreturn]] void json_precondition_failed(const char* check);
}
#define JSON_ASSERT(x) ((x) ? static_cast<void>(0) : ::ca::json_precondition_failed(#x))
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

namespace ca {

// The one JSON type, for records, messages, plans and configs. ordered_json keeps the keys in the
// order they arrived (a record's sections, a YAML map's entries); tools only add sections. Its
// objects are small vectors: a lookup is linear, so a map of thousands of keys (a tokenizer's
// vocabulary) is read with nlohmann::json where it is read. Content ids hash canonical_json
// (ids.hpp), which sorts the keys, so an id never depends on the order keys arrived in.
using Json = nlohmann::ordered_json;

// The readers' limits: a line longer, or nested deeper, is bad input for every tool.
inline constexpr std::size_t kMaxLineBytes = 64ull << 20;
inline constexpr int kMaxJsonDepth = 512;
// What a tool that makes records from outside text (agent-run) writes at most per record: half the
// readers' line, so the tools after it can add their sections and stay under kMaxLineBytes.
inline constexpr std::size_t kMaxRecordBytes = kMaxLineBytes / 2;

// Which parts of a JSON text parse_json builds. A pattern is a path of object keys and array
// indices ("0"), "*" matching any; a value whose path a pattern names is kept whole, its ancestors
// as far as needed, and everything else is skipped while parsing, never built: the memory a parse
// takes is that of what it keeps, whatever the text holds besides.
struct JsonSelection {
  std::vector<std::vector<std::string>> keep;  // at most 64 patterns; none: everything is kept
  std::size_t max_array_items = static_cast<std::size_t>(-1);  // per array built; more is an error naming it
};

// The one JSON parser of the project: every JSON text a tool takes from outside (records, server
// answers, replay files, tool arguments, tokenizer files) goes through it. It builds the value
// itself (nlohmann's SAX events), so the depth limit holds by construction: nesting deeper than
// kMaxJsonDepth, text that is not JSON, ill-formed UTF-8, a number a double cannot hold (1e999) are
// all InputError("<where>: ..."), never a crash, and nothing deeper is ever built (a value nested
// 100,000 deep would overflow the stack of whatever recursed over it later: dump, copy, compare).
Json parse_json(std::string_view text, const std::string& where, const JsonSelection& select = {});
// The same into nlohmann::json (sorted maps: a vocabulary of 150,000 keys in n log n, not n^2).
nlohmann::json parse_json_sorted(std::string_view text, const std::string& where);
// The deepest nesting of a value (0 for a scalar), counted without recursion.
int json_depth(const Json& value);

class RecordReader {
 public:
  // path "-" is stdin. `name` is used in messages ("line 17" or "tasks.jsonl line 17").
  explicit RecordReader(const std::string& path);
  // Reads the next non-blank line. Returns false at end of input. A line that is not a JSON object,
  // or longer than kMaxLineBytes, throws InputError naming the line (a broken stream is fatal); a
  // longer line is refused once kMaxLineBytes of it are read, never held whole.
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
  // A record already dumped by dump_record (a tool that measured it first need not dump it twice).
  void write_line(std::string line);
  int64_t count() const { return count_; }

 private:
  std::unique_ptr<std::ofstream> file_;
  std::ostream* out_;
  int64_t count_ = 0;
};

// The length of dump_record(value), counted as it would be written, without holding the text.
std::size_t dumped_size(const Json& value);

// A record as one line of text, without the newline (invalid UTF-8 replaced, never an exception).
std::string dump_record(const Json& record);

// Parse one line into a record (parse_json, and it must be an object), or throw InputError("<where>: ...").
Json parse_record_line(const std::string& line, const std::string& where);

// The value with every string and key made valid UTF-8 (a broken sequence becomes U+FFFD), so it
// dumps anywhere without a replace handler: what a model or a compiler wrote may be any bytes.
Json with_valid_utf8(Json value);

}  // namespace ca
