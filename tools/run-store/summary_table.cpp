// Aligned text table of per-run summary rows (what a person reads; scripts get JSON).
#include "tools/run-store/summary_table.hpp"

#include <cstdio>
#include <vector>

namespace ca {

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
        line.push_back(s);
      } else line.push_back(v.dump());
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

}  // namespace ca
