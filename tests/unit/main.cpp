// doctest's main for the unit tests; it also answers as the confined compiler child, since
// compile_bundle() starts this program again for that (libcommon/bundle/compile.hpp).
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cstring>

#include "libcommon/bundle/compile.hpp"

int main(int argc, char** argv) {
  if (argc > 1 && std::strcmp(argv[1], ca::bundle::kCompileChildFlag) == 0) return ca::bundle::compile_child_main();
  return doctest::Context(argc, argv).run();
}
