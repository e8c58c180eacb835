// Helper children that are this program again (the confined NVRTC compiler of libcommon/bundle):
// the code that launches such a child registers its argv[1] flag and entry point where it is
// defined, and a program's main (ca::Cli::run, the unit tests' main) asks child_main_for() first.
// So the tool's frame needs no knowledge of which helpers exist, and imports run one way
// (bundle -> core, never core or the CLI -> bundle).
#pragma once

namespace ca {

using ChildMain = int (*)();
// For a namespace-scope initializer next to the launching code; returns true.
bool register_child_main(const char* flag, ChildMain main);
// The entry point registered for argv[1], or nullptr when argv[1] is not a registered flag.
ChildMain child_main_for(int argc, char** argv);

}  // namespace ca
