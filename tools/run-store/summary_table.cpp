// Aligned text table of per-run summary rows (what a person reads; scripts get JSON).
#include "tools/run-store/summary_table.hpp"

#include <cstdint>
#include <cstdio>
#include <vector>

namespace ca::run_store {

std::string terminal_safe(const std::string& s) {
  std::string out;
  auto hex = [&](const char* format, unsigned v) {
    char buf[8];
    std::snprintf(buf, sizeof buf, format, v);
    out += buf;
  };
  for (std::size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x20 || c == 0x7f) {
      hex("\\x%02x", c);
      ++i;
      continue;
    }
    if (c < 0x80) {
      out += s[i++];
      continue;
    }
    // A whole, shortest-form UTF-8 sequence passes (C1 controls escaped); any other byte is escaped alone.
    const std::size_t n = c >= 0xf0 && c <= 0xf4 ? 4 : c >= 0xe0 ? 3 : c >= 0xc2 && c < 0xe0 ? 2 : 0;
    bool ok = n > 0 && i + n <= s.size();
    uint32_t cp = n == 2 ? c & 0x1f : n == 3 ? c & 0x0f : c & 0x07;
    for (std::size_t k = 1; ok && k < n; ++k) {
      const auto b = static_cast<unsigned char>(s[i + k]);
      ok = (b & 0xc0) == 0x80;
      cp = (cp << 6) | (b & 0x3f);
    }
    ok = ok && !(n == 3 && (cp < 0x800 || (cp >= 0xd800 && cp <= 0xdfff))) && !(n == 4 && (cp < 0x10000 || cp > 0x10ffff));
    if (!ok) {
      hex("\\x%02x", c);
      ++i;
    } else if (cp >= 0x80 && cp <= 0x9f) {
      hex("\\u%04x", cp);
      i += n;
    } else {
      out.append(s, i, n);
      i += n;
    }
  }
  return out;
}

std::string render_summary_table(const Json& runs) {
  const std::vector<std::pair<std::string, std::string>> columns = {
      {"run_id", "run"}, {"tool", "tool"}, {"started_at", "started"}, {"tasks", "tasks"},
      {"candidates", "cands"}, {"checks", "checks"}, {"pass_rate", "pass"}, {"profiles", "profs"},
      {"faster_than_eager", ">eager"}, {"faster_than_compile", ">compile"},
      {"geomean_speedup_vs_eager", "gm/eager"}, {"geomean_speedup_vs_compile", "gm/compile"},
      {"rewards", "rewards"}, {"reward_mean", "r_mean"}, {"episodes", "eps"}, {"locked_calls", "locked"}};
  std::vector<std::vector<std::string>> cells;
  std::vector<std::string> header;
  for (auto& c : columns) header.push_back(c.second);
  cells.push_back(header);
  for (const auto& row : runs) {
    std::vector<std::string> line;
    for (auto& c : columns) {
      const Json& v = row.contains(c.first) ? row[c.first] : Json();
      char buf[64];
      if (v.is_null()) line.push_back("-");
      else if (v.is_number_float()) {
        bool rate = c.first == "pass_rate" || c.first.rfind("faster", 0) == 0;
        std::snprintf(buf, sizeof buf, rate ? "%.1f%%" : "%.3f", rate ? v.get<double>() * 100 : v.get<double>());
        line.push_back(buf);
      } else if (v.is_string()) {
        std::string s = v.get<std::string>();
        if (c.first == "started_at" && s.size() > 19) s = s.substr(0, 19);
        if (c.first == "run_id" && s.size() > 8) s = s.substr(0, 8);
        line.push_back(terminal_safe(s));
      } else line.push_back(terminal_safe(v.dump()));
    }
    cells.push_back(line);
  }
  std::vector<std::size_t> width(columns.size(), 0);
  for (auto& line : cells)
    for (std::size_t i = 0; i < line.size(); ++i) width[i] = std::max(width[i], line[i].size());
  std::string out;
  for (auto& line : cells) {
    for (std::size_t i = 0; i < line.size(); ++i) {
      out += line[i];
      if (i + 1 < line.size()) out += std::string(width[i] - line[i].size() + 2, ' ');
    }
    out += '\n';
  }
  return out;
}

}  // namespace ca::run_store
