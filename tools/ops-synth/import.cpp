// ops-synth import (placeholder until the worker client lands).
#include "tools/ops-synth/import.hpp"
#include "libcommon/errors.hpp"
namespace ops_synth {
void ImportOptions::register_with(CLI::App* app) {}
int run_import(const ca::CommonOptions&, const ImportOptions&) { throw ca::EnvironmentError("import: not built yet"); }
}
