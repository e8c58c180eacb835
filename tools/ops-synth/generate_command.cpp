// ops-synth generate.
#include "tools/ops-synth/generate_command.hpp"

#include <CLI/CLI.hpp>
#include <array>
#include <chrono>
#include <random>
#include <sstream>

#include "libcommon/errors.hpp"
#include "libcommon/jsonl.hpp"
#include "libcommon/log.hpp"
#include "libcommon/store.hpp"
#include "tools/ops-synth/catalog.hpp"

namespace ca::ops_synth {

void GenerateCommand::register_with(Cli& cli) {
  app = cli.app().add_subcommand("generate", "Stack 1-5 catalog ops (or one standalone module) into tasks");
  app->add_option("-n,--count", n, "Number of tasks")->capture_default_str()->check(CLI::NonNegativeNumber);
  cli.add_seed_option(app);
  app->add_option("--sizes", gen.sizes, "gpu (eager 1-100 ms estimated) or tiny (CPU tests)")
      ->capture_default_str()->check(CLI::IsMember({"gpu", "tiny"}));
  app->add_option("--gpu-profile", gen.gpu_profile, "GPU the eager time is estimated for (" +
                       gpu_profile_names() + ")")->capture_default_str();
  app->add_option("--min-ms", gen.min_ms, "Lowest estimated eager time (--sizes gpu)")->capture_default_str();
  app->add_option("--max-ms", gen.max_ms, "Highest estimated eager time (--sizes gpu)")->capture_default_str();
  app->add_option("--mix", mix_text, "Category weights, e.g. 1=0.034,2=0.8377,3=0.0762,4=0.028,5=0.0123,module=0.0118 "
                                          "(default: the published Ops-6K mix)");
  app->add_option("--ops", ops_text, "Comma-separated op names: chains use only these");
  app->add_flag("--allow-stochastic", gen.allow_stochastic, "Also use stochastic ops (dropout, RReLU)");
  app->add_option("--catalog", catalog_path, "Op catalog YAML (default: datasets/ops/catalog.yaml)");
  app->add_option("-o,--output", cli.options().output, "Output JSON Lines ('-' = stdout)")->capture_default_str();
  cli.add_store_options(app);
  app->add_option("--shard", cli.options().shard_text, "Emit only tasks with index % n == i (i/n)");
}

namespace {

// The catalog's default path, the --mix and --ops texts, and the time range checked.
void prepare(GenerateCommand& cmd) {
  if (cmd.catalog_path.empty()) cmd.catalog_path = default_catalog_path();
  if (!cmd.mix_text.empty()) cmd.gen.mix = parse_mix(cmd.mix_text);
  if (!cmd.ops_text.empty()) {
    std::stringstream ss(cmd.ops_text);
    std::string item;
    while (std::getline(ss, item, ','))
      if (!item.empty()) cmd.gen.only_ops.push_back(item);
  }
  if (cmd.gen.min_ms <= 0 || cmd.gen.max_ms <= cmd.gen.min_ms) throw UsageError("--min-ms/--max-ms: need 0 < min < max");
}

// Before anything is written: the standalone modules are few (the catalog's modules at their size
// lists, near-duplicates once), so a large -n can ask for more of them than exist. Says how many
// tasks the mix can give, and refuses an -n beyond that (the chains' space is far larger).
void check_capacity(Generator& gen, int64_t n, const Catalog& catalog,
                    const GenOptions& opt) {
  const int module = kCategories - 1;
  if (opt.mix[static_cast<std::size_t>(module)] == 0 || n == 0) return;
  const int64_t capacity = gen.module_capacity();
  // The category sequence is fixed by the seed: find the first task that would need one module
  // more than there are (scanning stops at 10^9 tasks: past any real run).
  int64_t used = 0, limit = -1, need = 0;
  for (int64_t i = 0; i < int64_t(1e9) && (i < n || limit < 0); ++i) {
    if (gen.category_of(i) != module) continue;
    if (i < n) ++need;
    if (++used > capacity && limit < 0) limit = i;
  }
  std::string what = ca::log::cat("the catalog's ", catalog.modules.size(), " standalone modules give ", capacity,
                                  " distinct tasks at --sizes ", opt.sizes,
                                  " (the same module at sizes within a factor of 2 counts once)");
  std::string most = limit < 0 ? "more than 10^9" : ca::log::cat("at most ", limit);
  if (limit < 0 || n <= limit) {
    ca::log::info("this mix can give ", most, " distinct tasks: ", what);
    return;
  }
  throw ca::UsageError(ca::log::cat("-n ", n, ": this mix can give at most ", limit, " distinct tasks: it needs ", need,
                                    " module tasks and ", what, "; lower -n to ", limit,
                                    " or the module weight in --mix (module=0 for none)"));
}

}  // namespace

int run_generate(const CommonOptions& common, GenerateCommand& cmd) {
  prepare(cmd);
  const int64_t n = cmd.n;
  const std::string& catalog_path = cmd.catalog_path;
  GenOptions opt = cmd.gen;
  auto started = std::chrono::steady_clock::now();
  Catalog catalog = Catalog::load(catalog_path);
  opt.seed = common.run_seed();
  if (!common.seed) ca::log::info("seed ", opt.seed, " (pass --seed ", opt.seed, " to reproduce)");
  ca::log::verbose("catalog ", catalog.path, ": ", catalog.ops.size(), " ops, ", catalog.modules.size(), " modules");
  Generator gen(catalog, opt);
  check_capacity(gen, n, catalog, opt);
  auto store = ca::open_store_for(common);
  ca::RecordWriter out(common.output);
  ca::log::Progress progress("tasks", n);
  std::array<int64_t, kCategories> per_category{};
  for (int64_t i = 0; i < n; ++i) {
    // Sharding is by index, and every shard walks the whole sequence so near-duplicates are judged
    // the same way: the shards' union is exactly the unsharded output.
    ca::Json rec = gen.task(i);
    if (common.shard.count > 1 && i % common.shard.count != common.shard.index) continue;
    // Committed before it is on stdout: a kill -9 loses at most this record, and never leaves an
    // emitted task missing from the store (its own transaction; cheap in WAL, synchronous=NORMAL).
    if (store) store->put_task(rec);
    out.write(rec);
    ++per_category[static_cast<std::size_t>(gen.category_of(i))];
    progress.tick();
  }
  progress.finish();
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  ca::Json counts = {{"written", out.count()}, {"near_duplicates_skipped", gen.duplicates()},
                     {"retries", gen.retries()}};
  std::string mix;
  for (int c = 0; c < kCategories; ++c)
    mix += (c ? " " : "") + category_name(c) + ":" + std::to_string(per_category[static_cast<std::size_t>(c)]);
  ca::log::info(out.count(), " tasks written (", mix, "), ", gen.duplicates(), " near-duplicates skipped, ",
                gen.retries(), " retries, ", ca::log::cat(static_cast<int64_t>(out.count() / std::max(secs, 1e-9))),
                " tasks/s");
  if (store) store->end_run(ca::kExitOk, counts);
  return ca::kExitOk;
}

}  // namespace ca::ops_synth
