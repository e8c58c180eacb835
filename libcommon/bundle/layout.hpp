// Strided views of a buffer, as library steps read and write them: an element offset and, per
// dimension (outermost first), a size and a stride in elements (cuBLASLt's leading dimensions and
// batch strides, cuDNN's N-d tensor strides). What the binder checks with them: how far a view
// reaches (its span), whether two of its indices share an element (an output must not), and whether
// two views of one buffer can touch the same element (an output and an input of one step must not).
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace ca::bundle {

struct StridedView {
  int64_t offset = 0;             // elements from the buffer's start
  std::vector<int64_t> sizes;     // outermost first
  std::vector<int64_t> strides;   // elements; the same length as sizes

  // Packed row-major strides for `sizes` (the innermost 1).
  static StridedView packed(int64_t offset, std::vector<int64_t> sizes);
  // Elements from `offset` to one past the last element reached: sum (size - 1) * stride + 1, or 0
  // when a size is 0. nullopt when it passes 2^62 (the policy's numbers must not wrap into a fit).
  std::optional<int64_t> span() const;
  // Does some element belong to two index tuples? Sizes of 1 and stride 0 of a size-1 dimension are
  // fine; any other stride 0 aliases. Decided exactly for strides that each reach past what the
  // smaller ones cover (every layout cuBLASLt and cuDNN describe); others are taken as aliasing.
  bool aliases() const;
  std::string text() const;  // "[offset] sizes (strides)", for messages
};

// Can two views of one buffer reach the same element? false only when proven disjoint: their spans
// do not meet, or both repeat with the same outermost stride and their footprints within
// one period do not meet (channel slices of one concatenation, image by image).
bool may_overlap(const StridedView& a, const StridedView& b);

// A view as rows: `rows` contiguous runs of `row` elements, `pitch` elements apart (the outermost
// index picks the row). Only for a view whose inner dimensions are packed and whose outermost stride
// is wider than packed: a channel slice of a concatenation, image by image ([C_total*H*W, H*W, W, 1]
// for [N, C, H, W]). nullopt for any other layout: packed already, inner strides of their own, rows
// that would overlap, or one row. (The executor runs cuDNN on a packed copy of such a view.)
struct RowRuns {
  int64_t rows = 0, row = 0, pitch = 0;
};
std::optional<RowRuns> row_runs(const StridedView& v);

}  // namespace ca::bundle
