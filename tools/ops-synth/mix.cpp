// The mix of task categories (1..5 ops, standalone modules): --mix parsed into weights per 10,000, and
// the category of each task index.
#include <algorithm>
#include <sstream>

#include "libcommon/errors.hpp"
#include "tools/ops-synth/generate.hpp"

namespace ca::ops_synth {

std::string category_name(int c) { return c == kCategories - 1 ? "module" : std::to_string(c + 1); }

Mix parse_mix(const std::string& text) {
  Mix mix{};
  std::stringstream ss(text);
  std::string item;
  double total = 0;
  std::array<double, kCategories> w{};
  while (std::getline(ss, item, ',')) {
    auto eq = item.find('=');
    if (eq == std::string::npos) throw ca::UsageError("--mix: expected K=WEIGHT items, got '" + item + "'");
    std::string key = item.substr(0, eq);
    int c = -1;
    for (int i = 0; i < kCategories; ++i)
      if (category_name(i) == key) c = i;
    if (c < 0) throw ca::UsageError("--mix: unknown category '" + key + "' (1..5 or module)");
    try {
      w[static_cast<std::size_t>(c)] = std::stod(item.substr(eq + 1));
    } catch (const std::exception&) {
      throw ca::UsageError("--mix: bad weight in '" + item + "'");
    }
    if (w[static_cast<std::size_t>(c)] < 0) throw ca::UsageError("--mix: negative weight in '" + item + "'");
    total += w[static_cast<std::size_t>(c)];
  }
  if (total <= 0) throw ca::UsageError("--mix: weights sum to zero");
  uint32_t assigned = 0;
  for (int i = 0; i < kCategories; ++i) {
    mix[static_cast<std::size_t>(i)] = static_cast<uint32_t>(w[static_cast<std::size_t>(i)] / total * 10000 + 0.5);
    assigned += mix[static_cast<std::size_t>(i)];
  }
  // Rounding slack goes to the heaviest category so the weights sum to 10,000.
  auto heaviest = std::max_element(mix.begin(), mix.end());
  *heaviest = *heaviest + 10000 - assigned;
  return mix;
}

int Generator::category_of(int64_t index) const {
  // A golden-ratio (Weyl) sequence instead of independent draws: every prefix of the output
  // follows the mix to within a fraction of a task, as a 2,000-task test can check at 2 points.
  uint64_t u = weyl_offset_ + static_cast<uint64_t>(index + 1) * 0x9E3779B97F4A7C15ull;
  unsigned __int128 scaled = static_cast<unsigned __int128>(u) * 10000;
  uint64_t bucket = static_cast<uint64_t>(scaled >> 64);  // in [0, 10000)
  uint64_t cum = 0;
  for (int c = 0; c < kCategories; ++c) {
    cum += opt_.mix[static_cast<std::size_t>(c)];
    if (bucket < cum) return c;
  }
  return 1;
}

}  // namespace ca::ops_synth
