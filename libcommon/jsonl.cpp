// JSON Lines reader and writer.
#include "libcommon/jsonl.hpp"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <iostream>
#include <mutex>

#include "libcommon/errors.hpp"
#include "libcommon/signals.hpp"
#include "libcommon/tokenizer/unicode.hpp"

namespace ca {

RecordReader::RecordReader(const std::string& path) : path_(path) {
  if (path == "-" || path.empty()) {
    in_ = &std::cin;
    path_ = "-";
  } else {
    file_ = std::make_unique<std::ifstream>(path, std::ios::binary);
    if (!*file_) throw InputError("cannot open input '" + path + "'");
    in_ = file_.get();
  }
}

std::string RecordReader::where() const {
  return (path_ == "-" ? std::string() : path_ + " ") + "line " + std::to_string(line_number_);
}

namespace {

// Deeper nesting is refused as bad input: every later step (dump, the store, the fields) recurses
// over a record, and a line a million brackets deep would overflow the stack there.
constexpr int kMaxDepth = 512;

// The deepest nesting of [ and { outside strings, stopping once past `limit`.
int nesting_depth(const std::string& line, int limit) {
  int depth = 0, deepest = 0;
  bool in_string = false, escaped = false;
  for (char c : line) {
    if (in_string) {
      if (escaped) escaped = false;
      else if (c == '\\') escaped = true;
      else if (c == '"') in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      deepest = std::max(deepest, ++depth);
      if (deepest > limit) break;
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return deepest;
}

// "[json.exception.out_of_range.406] number overflow parsing '1e999'" -> "number overflow parsing '1e999'"
std::string without_prefix(const std::string& msg) {
  auto pos = msg.find("] ");
  return pos == std::string::npos ? msg : msg.substr(pos + 2);
}

}  // namespace

// Every parse failure is bad input (exit 2) naming the line, never an internal error: not JSON,
// ill-formed UTF-8, a number a double cannot hold (1e999), nesting deeper than kMaxDepth.
Json parse_record_line(const std::string& line, const std::string& where) {
  if (nesting_depth(line, kMaxDepth) > kMaxDepth)
    throw InputError(where + ": nested deeper than " + std::to_string(kMaxDepth) + " levels");
  Json record;
  try {
    record = Json::parse(line);
  } catch (const nlohmann::json::parse_error& e) {
    std::string msg = e.what();
    auto pos = msg.find("parse error");
    throw InputError(where + ": not JSON: " + (pos == std::string::npos ? msg : msg.substr(pos)));
  } catch (const nlohmann::json::exception& e) {
    // out_of_range 406 (a number a double cannot hold) and anything else the parser refuses.
    throw InputError(where + ": not a usable JSON record: " + without_prefix(e.what()));
  }
  if (!record.is_object()) throw InputError(where + ": not a JSON object (a record must be {...})");
  return record;
}

bool RecordReader::next(Json& record) {
  while (std::getline(*in_, buffer_)) {
    ++line_number_;
    if (buffer_.size() > kMaxLineBytes)
      throw InputError(where() + ": line longer than 64 MiB");
    if (!buffer_.empty() && buffer_.back() == '\r') buffer_.pop_back();
    if (buffer_.find_first_not_of(" \t") == std::string::npos) continue;
    record = parse_record_line(buffer_, where());
    return true;
  }
  if (in_->bad()) throw InputError("read error on input '" + path_ + "'");
  return false;
}

RecordWriter::RecordWriter(const std::string& path) {
  if (path == "-" || path.empty()) {
    out_ = &std::cout;
  } else {
    file_ = std::make_unique<std::ofstream>(path, std::ios::binary | std::ios::trunc);
    if (!*file_) throw InputError("cannot open output '" + path + "'");
    out_ = file_.get();
  }
}

void RecordWriter::write(const Json& record) {
  std::string line = record.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  line += '\n';
  // A signal ends the process between lines, never inside one.
  std::lock_guard<std::timed_mutex> lock(signals::output_mutex());
  errno = 0;
  out_->write(line.data(), static_cast<std::streamsize>(line.size()));
  out_->flush();
  if (!*out_) {
    if (errno == EPIPE)
      throw OutputClosed("output closed by its reader after " + std::to_string(count_) + " records: stopping");
    throw EnvironmentError(std::string("write failed: ") + (errno ? std::strerror(errno) : "stream error"));
  }
  ++count_;
}

Json with_valid_utf8(Json value) {
  if (value.is_string()) return tokenizer::valid_utf8(value.get_ref<const std::string&>());
  if (value.is_array()) {
    for (auto& v : value) v = with_valid_utf8(std::move(v));
    return value;
  }
  if (!value.is_object()) return value;
  Json out = Json::object();
  for (auto& [k, v] : value.items()) out[tokenizer::valid_utf8(k)] = with_valid_utf8(std::move(v));
  return out;
}

}  // namespace ca
