// ops-synth: synthesize training tasks from the op catalog, filter them with the reference worker,
// and import KernelBench / CUDA-Agent-Ops-6K problems as the same task records.
#include <CLI/CLI.hpp>

#include "libcommon/cli.hpp"
#include "libcommon/errors.hpp"
#include "tools/ops-synth/filter.hpp"
#include "tools/ops-synth/generate_command.hpp"
#include "tools/ops-synth/import.hpp"

int main(int argc, char** argv) {
  ca::Cli cli("ops-synth", "Synthesize, filter and import training tasks (KernelBench format, Ops-6K compatible).",
              "ops-synth generate -n 8000 --seed 1 | ops-synth filter -j 16 --decontaminate KernelBench/ | head -n 6000",
              "agent-run(1), kernel-check(1), run-store(1), cuda-agent(7)");
  auto& app = cli.app();
  auto& common = cli.options();
  app.require_subcommand(1);

  ca::ops_synth::GenerateCommand gen;
  gen.register_with(cli);

  // filter
  ca::ops_synth::FilterOptions filt;
  auto* filter = app.add_subcommand("filter", "Keep the tasks that pass the published filters (reference worker)");
  cli.add_io_options(filter);
  cli.add_store_options(filter);
  cli.add_record_options(filter);
  filt.register_with(filter);

  // import
  ca::ops_synth::ImportOptions imp;
  auto* import = app.add_subcommand("import", "KernelBench problem dirs or Ops-6K JSONL rows -> task records");
  import->add_option("-o,--output", common.output, "Output JSON Lines ('-' = stdout)")->capture_default_str();
  cli.add_store_options(import);
  cli.add_record_options(import);
  imp.register_with(import);

  return cli.run(argc, argv, [&]() -> int {
    if (*gen.app) return ca::ops_synth::run_generate(common, gen);
    if (*filter) return ca::ops_synth::run_filter(common, filt);
    if (*import) return ca::ops_synth::run_import(common, imp);
    return ca::kExitUsage;
  });
}
