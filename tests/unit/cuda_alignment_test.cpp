// The alignment the executor reports to cuBLASLt's heuristic for each gemm operand
// (libcommon/cuda/cublaslt.hpp, pointer_alignment): the largest power of two dividing the address,
// at most 256 (CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_*_BYTES' default, which a view at an element offset
// does not have).
#include <doctest/doctest.h>

#include "libcommon/cuda/cublaslt.hpp"

using ca::cuda::pointer_alignment;

TEST_CASE("cublaslt: pointer_alignment is the largest power of two dividing the address, at most 256") {
  const uint64_t base = uint64_t(0x7f3a00000000);  // an allocation: 2 MiB aligned and more
  CHECK(pointer_alignment(base) == 256);
  CHECK(pointer_alignment(0) == 256);
  CHECK(pointer_alignment(base + 4096) == 256);  // past the executor's guard zone
  CHECK(pointer_alignment(base + 4096 + 4) == 4);    // one float in: x[:, 1:]
  CHECK(pointer_alignment(base + 4096 + 2) == 2);    // one half in
  CHECK(pointer_alignment(base + 4096 + 1) == 1);
  CHECK(pointer_alignment(base + 4096 + 16) == 16);
  CHECK(pointer_alignment(base + 4096 + 48) == 16);
  CHECK(pointer_alignment(base + 4096 + 64) == 64);
  CHECK(pointer_alignment(base + 4096 + 384) == 128);
  CHECK(pointer_alignment(base + 4096 + 511 * 4) == 4);  // params.w[511]: a weight's second half
  // Every answer divides the address and is a power of two no larger than 256.
  for (uint64_t off = 0; off < 4096; ++off) {
    const uint32_t a = pointer_alignment(base + off);
    CHECK((a & (a - 1)) == 0);
    CHECK(a <= 256);
    CHECK((base + off) % a == 0);
    if (a < 256) CHECK((base + off) % (2 * a) != 0);
  }
}
