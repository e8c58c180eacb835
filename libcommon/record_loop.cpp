// The shared record loop.
#include "libcommon/record_loop.hpp"

#include <sys/stat.h>

#include <cstdio>

#include "libcommon/ids.hpp"
#include "libcommon/log.hpp"
#include "libcommon/record_path.hpp"

namespace ca {

Json Counts::to_json() const {
  return Json{{"read", read}, {"done", done}, {"failed", failed}, {"skipped", skipped},
              {"passed", passed}, {"bad", bad}, {"other_shard", other_shard}};
}

std::string Counts::text() const {
  std::string s = log::cat(read, " read, ", done, " done, ", failed, " failed, ", skipped, " skipped, ", passed,
                           " passed through, ", bad, bad == 1 ? " bad record" : " bad records");
  if (other_shard) s += log::cat(", ", other_shard, " in other shards");
  return s;
}

void mark_bad_record(Json& record, const FieldError& error, const std::string& tool, const std::string& where,
                     bool strict) {
  if (strict) throw InputError(where + ": " + error.field + ": " + error.reason);
  log::warn(where, ": ", error.field, ": ", error.reason, " (record passed on with an error section)");
  record["error"] = Json{{"tool", tool}, {"field", error.field}, {"reason", error.reason}, {"where", where}};
}

void check_record_ids(const Json& record) {
  for (const char* key : {"candidate_id", "task_id"}) {
    if (!record.contains(key)) continue;
    const Json& id = record[key];
    if (!id.is_string()) throw FieldError(key, std::string("expected a string id, got ") + id.type_name());
    if (id.get_ref<const std::string&>().empty()) throw FieldError(key, "empty id");
  }
}

std::string record_key(const Json& record) {
  for (const char* key : {"candidate_id", "task_id", "id"})
    if (record.contains(key) && record[key].is_string()) return record[key].get<std::string>();
  return content_id(record);
}

Counts& Counts::operator+=(const Counts& o) {
  read += o.read;
  done += o.done;
  failed += o.failed;
  skipped += o.skipped;
  passed += o.passed;
  bad += o.bad;
  other_shard += o.other_shard;
  return *this;
}

std::vector<Line> parse_lines(const std::string& text) {
  std::vector<Line> lines;
  std::size_t pos = 0;
  int64_t number = 0;
  while (pos < text.size()) {
    std::size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    std::string line = text.substr(pos, end - pos);
    pos = end + 1;
    ++number;
    const std::string where = "line " + std::to_string(number);
    if (line.size() > kMaxLineBytes) throw InputError(where + ": line longer than 64 MiB");
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.find_first_not_of(" \t") == std::string::npos) continue;
    lines.push_back(Line{parse_record_line(line, where), where});
  }
  return lines;
}

std::string dump_lines(const std::vector<Json>& records) {
  std::string out;
  for (const Json& r : records) out += r.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
  return out;
}

int64_t count_lines(const std::string& path) {
  if (path.empty() || path == "-") return -1;
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return -1;
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) return -1;
  int64_t lines = 0;
  char last = '\n';
  char buf[1 << 16];
  for (std::size_t n; (n = std::fread(buf, 1, sizeof buf, f)) > 0;) {
    for (std::size_t i = 0; i < n; ++i) lines += buf[i] == '\n';
    last = buf[n - 1];
  }
  std::fclose(f);
  return lines + (last != '\n');
}

RecordLoop::RecordLoop(const CommonOptions& options) : options_(options) {}

int RecordLoop::run(const std::function<Outcome(Json&)>& job, bool drop_skipped) {
  RecordPathOptions o;
  o.store = store_;
  o.section = section_;
  RecordPath path(options_, o);
  RecordJob<RecordItem> one;
  one.work = [&](int, RecordItem& item) {
    const Outcome outcome = job(item.record);
    item.write = !(drop_skipped && outcome == Outcome::skipped);
    return outcome;
  };
  const int status = path.stream(one);
  counts_ = path.totals();
  log::info(counts_.text());
  return status;
}

}  // namespace ca
