// Units of libcommon/child_main: helper children registered where they are launched.
#include <doctest/doctest.h>

#include "libcommon/bundle/compile.hpp"
#include "libcommon/child_main.hpp"

#include <string>

namespace {
int fake_child() { return 42; }
const bool kFake = ca::register_child_main("--fake-child-for-test", fake_child);
}  // namespace

TEST_CASE("child_main: argv[1] finds the registered entry point; anything else finds none") {
  CHECK(kFake);
  char prog[] = "prog", fake[] = "--fake-child-for-test", other[] = "--fake-child-for-tes", plain[] = "file.jsonl";
  char* with_fake[] = {prog, fake, nullptr};
  char* with_other[] = {prog, other, nullptr};
  char* with_plain[] = {prog, plain, nullptr};
  char* alone[] = {prog, nullptr};
  REQUIRE((ca::child_main_for(2, with_fake) != nullptr));
  CHECK(ca::child_main_for(2, with_fake)() == 42);
  CHECK((ca::child_main_for(2, with_other) == nullptr));
  CHECK((ca::child_main_for(2, with_plain) == nullptr));
  CHECK((ca::child_main_for(1, alone) == nullptr));
  // The confined compiler registers itself in the code that launches it (this binary compiles bundles).
  char nvrtc[] = "--nvrtc-child";
  char* with_nvrtc[] = {prog, nvrtc, nullptr};
  CHECK((ca::child_main_for(2, with_nvrtc) == &ca::bundle::compile_child_main));
  CHECK(std::string(ca::bundle::kCompileChildFlag) == "--nvrtc-child");
}
