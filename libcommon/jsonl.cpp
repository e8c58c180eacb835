// JSON Lines reader and writer.
#include "libcommon/jsonl.hpp"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <iostream>
#include <mutex>

#include "libcommon/errors.hpp"
#include "libcommon/signals.hpp"
#include "libcommon/utf8.hpp"

namespace ca {

void json_precondition_failed(const char* check) {
  throw InternalError(std::string("JSON library precondition failed: ") + check + " (a read of a key or index that is not there)");
}

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

// "[json.exception.out_of_range.406] number overflow parsing '1e999'" -> "number overflow parsing '1e999'"
std::string without_prefix(const std::string& msg) {
  auto pos = msg.find("] ");
  return pos == std::string::npos ? msg : msg.substr(pos + 2);
}

// nlohmann's SAX events into a value: only what the selection keeps is built, and the nesting is
// counted as it opens, so a text deeper than kMaxJsonDepth stops the parse at that bracket. J is
// Json (ordered) or nlohmann::json (sorted).
template <class J>
class Builder {
 public:
  using number_integer_t = typename J::number_integer_t;
  using number_unsigned_t = typename J::number_unsigned_t;
  using number_float_t = typename J::number_float_t;
  using string_t = typename J::string_t;
  using binary_t = typename J::binary_t;

  Builder(J& root, const JsonSelection& select) : root_(root), select_(select) {
    if (select.keep.size() > 64) throw std::logic_error("parse_json: more than 64 patterns");
  }
  std::string error;  // why the parse stopped

  bool null() { return value(J(nullptr)); }
  bool boolean(bool v) { return value(J(v)); }
  bool number_integer(number_integer_t v) { return value(J(v)); }
  bool number_unsigned(number_unsigned_t v) { return value(J(v)); }
  bool number_float(number_float_t v, const string_t&) { return value(J(v)); }
  bool string(string_t& v) { return value(J(std::move(v))); }
  bool binary(binary_t& v) { return value(J::binary(std::move(v))); }
  bool start_object(std::size_t) { return open(false); }
  bool start_array(std::size_t) { return open(true); }
  bool end_object() { return close(); }
  bool end_array() { return close(); }
  bool key(string_t& k) {
    frames_.back().key = std::move(k);
    return true;
  }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception& e) {
    const std::string msg = e.what();
    if (e.id >= 100 && e.id < 200) {  // a syntax error: "parse error at line 1, column 5: ..."
      auto pos = msg.find("parse error");
      error = "not JSON: " + (pos == std::string::npos ? msg : msg.substr(pos));
    } else {  // out_of_range 406: a number a double cannot hold
      error = "not usable JSON: " + without_prefix(msg);
    }
    return false;
  }

 private:
  struct Frame {
    J* node;              // the container being built; null: skipped (and all inside it)
    bool array;
    std::size_t items = 0;
    string_t key;         // an object's key of the value to come
    uint64_t mask = 0;    // the patterns that still match this path
    bool whole = false;   // a pattern matched: everything inside is kept
  };

  // Where the next value goes, whether it is kept, and the selection state of its path.
  struct Place {
    bool keep;
    uint64_t mask;
    bool whole;
  };
  Place place() {
    if (frames_.empty()) return {true, select_.keep.empty() ? 0 : ~uint64_t{0} >> (64 - select_.keep.size()),
                                 select_.keep.empty()};
    Frame& f = frames_.back();
    if (!f.node) return {false, 0, false};
    if (f.whole) return {true, 0, true};
    const std::size_t level = frames_.size() - 1;  // the index of this value's path element
    const std::string elem = f.array ? std::to_string(f.items) : std::string(f.key);
    uint64_t mask = 0;
    bool whole = false;
    for (std::size_t p = 0; p < select_.keep.size(); ++p) {
      if (!(f.mask >> p & 1)) continue;
      const auto& pat = select_.keep[p];
      if (pat[level] != "*" && pat[level] != elem) continue;
      if (pat.size() == level + 1) whole = true;
      else mask |= uint64_t{1} << p;
    }
    return {whole || mask != 0, mask, whole};
  }

  // Puts v where it belongs; returns where it is (null when skipped), or sets `error`.
  bool put(J&& v, J** where) {
    *where = nullptr;
    if (frames_.empty()) {
      root_ = std::move(v);
      *where = &root_;
      return true;
    }
    Frame& f = frames_.back();
    if (f.array) {
      if (f.items >= select_.max_array_items) {
        error = "more than " + std::to_string(select_.max_array_items) + " items in the array at " + path();
        return false;
      }
      f.node->push_back(std::move(v));
      *where = &f.node->back();
    } else {
      *where = &((*f.node)[f.key] = std::move(v));
    }
    return true;
  }

  bool value(J&& v) {
    Place p = frames_.empty() ? Place{true, 0, true} : place();
    if (p.keep) {
      J* where;
      if (!put(std::move(v), &where)) return false;
    }
    if (!frames_.empty()) ++frames_.back().items;
    return true;
  }

  bool open(bool array) {
    if (frames_.size() >= static_cast<std::size_t>(kMaxJsonDepth)) {
      error = "nested deeper than " + std::to_string(kMaxJsonDepth) + " levels";
      return false;
    }
    Place p = place();
    J* where = nullptr;
    if (p.keep && !put(array ? J::array() : J::object(), &where)) return false;
    if (!frames_.empty()) ++frames_.back().items;
    frames_.push_back(Frame{where, array, 0, string_t(), p.mask, p.whole});
    return true;
  }

  bool close() {
    frames_.pop_back();
    return true;
  }

  // "/choices/0/message" of the innermost open container, for messages.
  std::string path() const {
    std::string s;
    for (std::size_t i = 1; i < frames_.size(); ++i)
      s += "/" + (frames_[i - 1].array ? std::to_string(frames_[i - 1].items - 1) : std::string(frames_[i - 1].key));
    return s.empty() ? "the top" : s;
  }

  J& root_;
  const JsonSelection& select_;
  std::vector<Frame> frames_;
};

template <class J>
J parse_with_limit(std::string_view text, const std::string& where, const JsonSelection& select) {
  J root;
  Builder<J> b(root, select);
  bool ok = false;
  try {
    ok = J::sax_parse(text.begin(), text.end(), &b, J::input_format_t::json, true);
  } catch (const nlohmann::json::exception& e) {  // what the builder itself could not do
    throw InputError(where + ": not usable JSON: " + without_prefix(e.what()));
  }
  if (!ok) throw InputError(where + ": " + (b.error.empty() ? std::string("not JSON") : b.error));
  return root;
}

}  // namespace

Json parse_json(std::string_view text, const std::string& where, const JsonSelection& select) {
  return parse_with_limit<Json>(text, where, select);
}

nlohmann::json parse_json_sorted(std::string_view text, const std::string& where) {
  return parse_with_limit<nlohmann::json>(text, where, JsonSelection{});
}

int json_depth(const Json& value) {
  int deepest = 0;
  std::vector<std::pair<const Json*, int>> todo = {{&value, 0}};
  while (!todo.empty()) {
    auto [v, d] = todo.back();
    todo.pop_back();
    if (!v->is_structured()) continue;
    deepest = std::max(deepest, d + 1);
    for (const auto& child : *v) todo.push_back({&child, d + 1});
  }
  return deepest;
}

// Every parse failure is bad input (exit 2) naming the line, never an internal error.
Json parse_record_line(const std::string& line, const std::string& where) {
  Json record = parse_json(line, where);
  if (!record.is_object()) throw InputError(where + ": not a JSON object (a record must be {...})");
  return record;
}

namespace {

// std::getline that stops holding a line once it is past `max` bytes (the rest of it is read and
// dropped): a 10 GB line costs max bytes, not 10 GB. Returns false at the end of the input.
bool bounded_getline(std::istream& in, std::string& line, std::size_t max, bool& too_long) {
  line.clear();
  too_long = false;
  bool any = false;
  char buf[1 << 16];
  for (;;) {
    in.getline(buf, sizeof buf);
    const std::streamsize got = in.gcount();
    if (got > 0) any = true;
    std::size_t n = static_cast<std::size_t>(got);
    bool end_of_line = false;
    if (in.eof()) {
      end_of_line = true;  // the last line, without a newline (or nothing)
    } else if (in.fail()) {
      if (in.bad()) return any;
      in.clear();  // the buffer filled up: the line goes on
    } else {
      --n;  // the newline was counted
      end_of_line = true;
    }
    if (!too_long) {
      if (line.size() + n > max) too_long = true;
      else line.append(buf, n);
    }
    if (end_of_line) return any;
  }
}

}  // namespace

bool RecordReader::next(Json& record) {
  bool too_long = false;
  while (bounded_getline(*in_, buffer_, kMaxLineBytes, too_long)) {
    ++line_number_;
    if (too_long) {
      buffer_ = std::string();
      throw InputError(where() + ": line longer than 64 MiB");
    }
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

namespace {
struct CountingOutput : nlohmann::detail::output_adapter_protocol<char> {
  std::size_t n = 0;
  void write_character(char) override { ++n; }
  void write_characters(const char*, std::size_t length) override { n += length; }
};
}  // namespace

std::size_t dumped_size(const Json& value) {
  auto out = std::make_shared<CountingOutput>();
  nlohmann::detail::serializer<Json> s(out, ' ', nlohmann::json::error_handler_t::replace);
  s.dump(value, false, false, 0);
  return out->n;
}

std::string dump_record(const Json& record) {
  return record.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

void RecordWriter::write(const Json& record) { write_line(dump_record(record)); }

void RecordWriter::write_line(std::string line) {
  // A signal ends the process between lines, never inside one.
  std::lock_guard<std::timed_mutex> lock(signals::output_mutex());
  errno = 0;
  out_->write(line.data(), static_cast<std::streamsize>(line.size()));
  out_->put('\n');  // not appended to the line: a 32 MiB line is not copied to grow by one byte
  out_->flush();
  if (!*out_) {
    if (errno == EPIPE)
      throw OutputClosed("output closed by its reader after " + std::to_string(count_) + " records: stopping");
    throw EnvironmentError(std::string("write failed: ") + (errno ? std::strerror(errno) : "stream error"));
  }
  ++count_;
}

Json with_valid_utf8(Json value) {
  if (value.is_string()) {
    std::string& text = value.get_ref<std::string&>();
    if (!is_valid_utf8(text)) text = valid_utf8(text);
    return value;  // a valid string is moved, never copied
  }
  if (value.is_array()) {
    for (auto& v : value) v = with_valid_utf8(std::move(v));
    return value;
  }
  if (!value.is_object()) return value;
  Json out = Json::object();
  for (auto& [k, v] : value.items())
    out[is_valid_utf8(k) ? k : valid_utf8(k)] = with_valid_utf8(std::move(v));
  return out;
}

}  // namespace ca
