// doctest's main for the unit tests; it also answers as a registered helper child (the confined
// compiler: compile_bundle() starts this program again for that; libcommon/child_main.hpp).
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include "libcommon/child_main.hpp"

int main(int argc, char** argv) {
  if (ca::ChildMain child = ca::child_main_for(argc, argv)) return child();
  return doctest::Context(argc, argv).run();
}
