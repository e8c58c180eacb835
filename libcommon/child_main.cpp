// Registered helper-child entry points (child_main.hpp).
#include "libcommon/child_main.hpp"

#include <cstring>
#include <map>
#include <string>

namespace ca {

namespace {
std::map<std::string, ChildMain>& registry() {
  static std::map<std::string, ChildMain> r;  // built on first use: safe from other initializers
  return r;
}
}  // namespace

bool register_child_main(const char* flag, ChildMain main) {
  registry()[flag] = main;
  return true;
}

ChildMain child_main_for(int argc, char** argv) {
  if (argc < 2 || !argv[1]) return nullptr;
  auto it = registry().find(argv[1]);
  return it == registry().end() ? nullptr : it->second;
}

}  // namespace ca
