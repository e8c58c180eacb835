// The CUDA library loaders' one error (libcommon/cuda/dl.hpp): a missing library or symbol is a
// LibraryMissing, an EnvironmentError (exit 3) naming the library, what was tried and what to install.
#include <doctest/doctest.h>

#include <string>

#include "libcommon/cuda/cublaslt.hpp"
#include "libcommon/cuda/cudnn.hpp"
#include "libcommon/cuda/dl.hpp"
#include "libcommon/cuda/driver.hpp"
#include "libcommon/cuda/nvrtc.hpp"

using ca::cuda::CudaLibrary;
using ca::cuda::LibraryMissing;

namespace {
const CudaLibrary kNowhere{"Nowhere (libca-nowhere)", {"libca-nowhere.so.0", "libca-nowhere.so"},
                           "the nowhere package (pip: ca-nowhere)"};
const CudaLibrary kLibc{"the C library (libc)", {"libc.so.6"}, "glibc"};
}  // namespace

TEST_CASE("cuda loaders: a library that does not exist is a LibraryMissing naming it, exit 3") {
  try {
    ca::cuda::open_library(kNowhere);
    FAIL("open_library found a library that does not exist");
  } catch (const LibraryMissing& e) {
    std::string what = e.what();
    CHECK(e.exit_code == ca::kExitEnvironment);
    CHECK(e.library == "Nowhere (libca-nowhere)");
    CHECK(what.rfind("Nowhere (libca-nowhere) not available (tried libca-nowhere.so.0, libca-nowhere.so)", 0) == 0);
    CHECK(what.find("; install the nowhere package (pip: ca-nowhere)") != std::string::npos);
  }
  // Callers that only know the layer catch it as an EnvironmentError.
  CHECK_THROWS_AS(ca::cuda::open_library(kNowhere), ca::EnvironmentError);
}

TEST_CASE("cuda loaders: a symbol the library lacks is a LibraryMissing naming library and symbol") {
  void* libc = ca::cuda::open_library(kLibc);
  REQUIRE(libc != nullptr);
  CHECK(ca::cuda::library_symbol(libc, "malloc", kLibc) != nullptr);
  try {
    ca::cuda::library_symbol(libc, "ca_no_such_symbol", kLibc);
    FAIL("library_symbol found a symbol that does not exist");
  } catch (const LibraryMissing& e) {
    CHECK(e.exit_code == ca::kExitEnvironment);
    CHECK(std::string(e.what()) ==
          "the C library (libc) symbol ca_no_such_symbol missing (library too old?); install glibc");
  }
}

TEST_CASE("cuda loaders: LoadOnce runs once and rethrows the failure with its type") {
  static int calls = 0;
  ca::cuda::LoadOnce once;
  auto load = [] {
    ++calls;
    ca::cuda::open_library(kNowhere);
  };
  once.run(load);
  once.run(load);
  CHECK(calls == 1);
  CHECK(once.why().find("Nowhere (libca-nowhere) not available") == 0);
  CHECK_THROWS_AS(once.rethrow(), LibraryMissing);
  CHECK_THROWS_AS(once.rethrow(), LibraryMissing);

  ca::cuda::LoadOnce fine;
  fine.run([] {});
  CHECK(fine.why().empty());
  CHECK_NOTHROW(fine.rethrow());
}

TEST_CASE("cuda loaders: every loader answers a missing library with LibraryMissing or loads") {
  // On a machine without the library get() throws the one type; where it is installed it loads.
  std::string why;
  if (!ca::cuda::Nvrtc::available(&why)) {
    CHECK(why.find("NVRTC (libnvrtc)") == 0);
    CHECK(why.find("; install ") != std::string::npos);
    CHECK_THROWS_AS(ca::cuda::Nvrtc::get(), LibraryMissing);
  }
  if (!ca::cuda::CublasLt::available(&why)) {
    CHECK(why.find("cuBLASLt (libcublasLt)") == 0);
    CHECK_THROWS_AS(ca::cuda::CublasLt::get(), LibraryMissing);
  }
  if (!ca::cuda::Cudnn::available(&why)) {
    CHECK(why.find("cuDNN (libcudnn.so.9)") == 0);
    CHECK_THROWS_AS(ca::cuda::Cudnn::get(), LibraryMissing);
  }
  if (!ca::cuda::Driver::available(&why)) {
    // No libcuda is LibraryMissing; a driver without a visible GPU is a plain EnvironmentError.
    CHECK_THROWS_AS(ca::cuda::Driver::get(), ca::EnvironmentError);
    if (why.find("CUDA driver (libcuda.so.1) not available") == 0) CHECK_THROWS_AS(ca::cuda::Driver::get(), LibraryMissing);
  }
}
