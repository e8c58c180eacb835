// Strided views: spans, aliasing and overlap, for the binder's checks of library steps.
#include "libcommon/bundle/layout.hpp"

#include <algorithm>
#include <numeric>

namespace ca::bundle {

namespace {
constexpr int64_t kLimit = int64_t(1) << 62;
}  // namespace

StridedView StridedView::packed(int64_t offset, std::vector<int64_t> sizes) {
  StridedView v;
  v.offset = offset;
  v.strides.assign(sizes.size(), 1);
  int64_t acc = 1;
  for (size_t i = sizes.size(); i-- > 0;) {
    v.strides[i] = acc;
    acc = sizes[i] > 0 && acc <= kLimit / sizes[i] ? acc * sizes[i] : kLimit;
  }
  v.sizes = std::move(sizes);
  return v;
}

std::optional<int64_t> StridedView::span() const {
  int64_t last = 0;
  for (size_t i = 0; i < sizes.size(); ++i) {
    if (sizes[i] == 0) return 0;
    if (sizes[i] < 0 || strides[i] < 0) return std::nullopt;
    __int128 reach = __int128(sizes[i] - 1) * strides[i];
    if (reach > kLimit || (last += int64_t(reach)) > kLimit) return std::nullopt;
  }
  return last + 1;
}

bool StridedView::aliases() const {
  // Dimensions of size > 1, by stride: each stride must pass everything the smaller ones reach.
  std::vector<size_t> order;
  for (size_t i = 0; i < sizes.size(); ++i)
    if (sizes[i] > 1) order.push_back(i);
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return strides[a] < strides[b]; });
  __int128 covered = 0;  // the largest offset the smaller dimensions reach
  for (size_t i : order) {
    if (strides[i] <= covered) return true;
    covered += __int128(sizes[i] - 1) * strides[i];
  }
  return false;
}

std::string StridedView::text() const {
  std::string s = "[" + std::to_string(offset) + "] sizes (";
  for (size_t i = 0; i < sizes.size(); ++i) s += (i ? ", " : "") + std::to_string(sizes[i]);
  s += ") strides (";
  for (size_t i = 0; i < strides.size(); ++i) s += (i ? ", " : "") + std::to_string(strides[i]);
  return s + ")";
}

bool may_overlap(const StridedView& a, const StridedView& b) {
  const auto sa = a.span(), sb = b.span();
  if (!sa || !sb) return true;
  if (*sa == 0 || *sb == 0) return false;
  if (a.offset + *sa <= b.offset || b.offset + *sb <= a.offset) return false;
  // The same period: both outermost dimensions of one stride P. Every element of a view is its start
  // plus a whole number of periods plus a place in its one-period footprint (the rest of the view);
  // footprints that stay inside one period and do not meet modulo P never share an element.
  if (a.sizes.size() < 2 || b.sizes.size() < 2 || a.strides[0] != b.strides[0]) return true;
  const int64_t period = a.strides[0];
  if (period <= 0) return true;
  auto inner = [](const StridedView& v) {
    StridedView in = v;
    in.sizes.erase(in.sizes.begin());
    in.strides.erase(in.strides.begin());
    return in.span();
  };
  const auto ia = inner(a), ib = inner(b);
  if (!ia || !ib) return true;
  // Whole periods between the two starts cancel: compare the starts within one period.
  const int64_t lo = std::min(a.offset, b.offset), hi = std::max(a.offset, b.offset);
  const int64_t lo_len = a.offset <= b.offset ? *ia : *ib, hi_len = a.offset <= b.offset ? *ib : *ia;
  const int64_t delta = (hi - lo) % period;
  // lo's footprint is [0, lo_len) in its period, hi's [delta, delta + hi_len); both must stay in [0, P).
  if (lo_len > period || delta + hi_len > period) return true;
  return delta < lo_len;
}

std::optional<RowRuns> row_runs(const StridedView& v) {
  if (v.sizes.empty() || v.sizes.size() != v.strides.size() || v.sizes[0] < 2) return std::nullopt;
  int64_t row = 1;
  for (size_t i = v.sizes.size(); i-- > 1;) {
    if (v.sizes[i] < 1) return std::nullopt;
    if (v.sizes[i] != 1 && v.strides[i] != row) return std::nullopt;  // an inner stride of its own
    row *= v.sizes[i];
  }
  if (v.strides[0] <= row) return std::nullopt;  // packed (==) or rows that overlap (<)
  return RowRuns{v.sizes[0], row, v.strides[0]};
}

}  // namespace ca::bundle
