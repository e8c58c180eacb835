// JSON Lines reader and writer.
#include "libcommon/jsonl.hpp"

#include <cerrno>
#include <cstring>
#include <iostream>

#include "libcommon/errors.hpp"

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

Record parse_record_line(const std::string& line, const std::string& where) {
  Record record;
  try {
    record = Record::parse(line);
  } catch (const nlohmann::json::parse_error& e) {
    std::string msg = e.what();
    auto pos = msg.find("parse error");
    throw InputError(where + ": not JSON: " + (pos == std::string::npos ? msg : msg.substr(pos)));
  }
  if (!record.is_object()) throw InputError(where + ": not a JSON object (a record must be {...})");
  return record;
}

bool RecordReader::next(Record& record) {
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

void RecordWriter::write(const Record& record) {
  std::string line = record.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  line += '\n';
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

}  // namespace ca
