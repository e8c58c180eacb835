// ops-synth filter (placeholder until the worker client lands).
#include "tools/ops-synth/filter.hpp"
#include "libcommon/errors.hpp"
namespace ops_synth {
void FilterOptions::register_with(CLI::App* app) {}
int run_filter(const ca::CommonOptions&, const FilterOptions&) { throw ca::EnvironmentError("filter: not built yet"); }
}
