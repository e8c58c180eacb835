// Strided views (libcommon/bundle/layout): spans, aliasing, and when two views of one buffer can meet.
#include "libcommon/bundle/layout.hpp"

#include <doctest/doctest.h>

using ca::bundle::may_overlap;
using ca::bundle::row_runs;
using ca::bundle::StridedView;

namespace {
StridedView view(int64_t offset, std::vector<int64_t> sizes, std::vector<int64_t> strides) {
  StridedView v;
  v.offset = offset;
  v.sizes = std::move(sizes);
  v.strides = std::move(strides);
  return v;
}
}  // namespace

TEST_CASE("strided views: packed strides, spans, wrap-around refused") {
  const StridedView p = StridedView::packed(5, {2, 3, 4});
  CHECK(p.strides == std::vector<int64_t>{12, 4, 1});
  CHECK(p.span() == 24);
  // A column slice [m=4, 3 columns] of a [4, 10] matrix: last element at 3 * 10 + 2.
  CHECK(view(0, {4, 3}, {10, 1}).span() == 33);
  CHECK(view(0, {0, 3}, {10, 1}).span() == 0);
  CHECK_FALSE(view(0, {int64_t(1) << 40, int64_t(1) << 30}, {int64_t(1) << 30, 1}).span().has_value());
  CHECK_FALSE(view(0, {3}, {-1}).span().has_value());
}

TEST_CASE("strided views: an output's indices never share an element") {
  CHECK_FALSE(StridedView::packed(0, {2, 3, 4}).aliases());
  CHECK_FALSE(view(0, {4, 3}, {10, 1}).aliases());           // a column slice
  CHECK(view(0, {4, 3}, {2, 1}).aliases());                  // rows closer than their width
  CHECK(view(0, {2, 3}, {0, 1}).aliases());                  // a batch stride of 0
  CHECK_FALSE(view(0, {1, 3}, {0, 1}).aliases());            // a size of 1 may have any stride
  CHECK_FALSE(view(0, {3, 4}, {1, 3}).aliases());            // column-major is fine
  CHECK(view(0, {3, 4}, {1, 2}).aliases());
}

TEST_CASE("strided views: two views of one buffer meet or are proven apart") {
  // Two row ranges of one matrix: apart, then one row shared.
  CHECK_FALSE(may_overlap(view(0, {4, 8}, {8, 1}), view(32, {4, 8}, {8, 1})));
  CHECK(may_overlap(view(0, {5, 8}, {8, 1}), view(32, {4, 8}, {8, 1})));
  // A DenseNet step: per image (stride C*HW = 10*16), the conv reads channels [0, 6) and writes
  // channels [6, 8) of the same buffer for all 3 images: interleaved spans, disjoint elements.
  const int64_t hw = 16, period = 10 * hw;
  const StridedView reads = view(0, {3, 6, hw}, {period, hw, 1});
  const StridedView writes = view(6 * hw, {3, 2, hw}, {period, hw, 1});
  CHECK(may_overlap(writes, view(5 * hw, {3, 2, hw}, {period, hw, 1})));  // channels [5, 7) meet [6, 8)
  CHECK_FALSE(may_overlap(reads, writes));
  CHECK_FALSE(may_overlap(writes, reads));
  // Channels [6, 12) run past the image into the next one's [0, 2): they meet the reads.
  CHECK(may_overlap(reads, view(6 * hw, {3, 6, hw}, {period, hw, 1})));
  // Different outermost strides prove nothing: taken as meeting.
  CHECK(may_overlap(reads, view(6 * hw, {3, 2, hw}, {period + 1, hw, 1})));
}

TEST_CASE("strided views as rows: a concatenation's channel slice, and nothing else") {
  // The 64-channel slice of a [128, 128, 256, 256] concatenation (17_SqueezeNetFireModule's expand).
  auto r = row_runs(view(64 * 65536, {128, 64, 256, 256}, {128 * 65536, 65536, 256, 1}));
  REQUIRE(r.has_value());
  CHECK(r->rows == 128);
  CHECK(r->row == 64 * 65536);
  CHECK(r->pitch == 128 * 65536);
  // A 1-d conv's [N, C, 1, L] with the inserted height's stride anything: still rows.
  r = row_runs(view(0, {4, 3, 1, 10}, {50, 10, 999, 1}));
  REQUIRE(r.has_value());
  CHECK((r->rows == 4 && r->row == 30 && r->pitch == 50));
  CHECK_FALSE(row_runs(view(0, {4, 3, 10}, {30, 10, 1})).has_value());      // packed: used in place
  CHECK_FALSE(row_runs(view(0, {4, 3, 10}, {20, 10, 1})).has_value());      // rows would overlap
  CHECK_FALSE(row_runs(view(0, {4, 3, 10}, {60, 20, 1})).has_value());      // an inner stride of its own
  CHECK_FALSE(row_runs(view(0, {4, 3, 10}, {60, 10, 2})).has_value());
  CHECK_FALSE(row_runs(view(0, {1, 3, 10}, {60, 10, 1})).has_value());      // one row
  CHECK_FALSE(row_runs(view(0, {4, 0, 10}, {60, 10, 1})).has_value());      // empty
  CHECK_FALSE(row_runs(view(0, {}, {})).has_value());
}
