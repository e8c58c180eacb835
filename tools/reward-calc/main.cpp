// reward-calc: add the RL reward to checked and profiled candidate records (DESIGN.md §7).
#include <memory>

#include "libcommon/cli.hpp"
#include "libcommon/errors.hpp"
#include "libcommon/fields.hpp"
#include "libcommon/log.hpp"
#include "libcommon/record_path.hpp"
#include "libcommon/store.hpp"
#include "tools/reward-calc/options.hpp"
#include "tools/reward-calc/scheme.hpp"

int main(int argc, char** argv) {
  ca::Cli cli("reward-calc",
              "Score candidate records: add a `reward` section from their `check` and `prof` sections.\n"
              "Default: the published milestone reward: -1 if the check failed, 3 if more than 5% faster\n"
              "than both eager and torch.compile, 2 if more than 5% faster than eager, 1 otherwise.",
              "kernel-check < cands.jsonl | kernel-prof | reward-calc --store run.db > rewarded.jsonl",
              "kernel-check(1), kernel-prof(1), run-store(1), ppo-step(1)");
  auto& opt = cli.options();
  cli.add_io_options();
  cli.add_store_options();
  cli.add_record_options();
  ca::reward_calc::Options options;
  ca::reward_calc::add_options(cli.app(), options);

  return cli.run(argc, argv, [&]() -> int {
    opt.resume_does_nothing("a reward is computed again in microseconds");
    const ca::reward_calc::Config config = ca::reward_calc::settings(options);
    ca::log::verbose("settings: ", config.to_json().dump());
    std::unique_ptr<ca::Store> store = ca::open_store_for(opt);
    ca::RecordPathOptions path_options;
    path_options.store = store.get();
    path_options.section = "reward";
    ca::RecordPath path(opt, path_options);
    ca::reward_calc::Tally tally;
    ca::RecordJob<ca::RecordItem> job;
    job.work = [&](int, ca::RecordItem& item) {
      ca::Json& record = item.record;
      // A record an earlier tool already marked bad, and never checked, is passed on as it came.
      if (record.contains("error") && !record.contains("check")) return ca::Outcome::passed;
      if (store) ca::get_required<std::string>(record, "/candidate_id");  // the store keeps a reward by it
      ca::reward_calc::Verdict verdict;
      ca::Json reward;
      try {
        reward = ca::reward_calc::score(record, config, &verdict);
      } catch (const ca::FieldError& e) {
        // An earlier tool already marked this record bad: keep its error (the first cause), pass on.
        if (record.contains("error") && !opt.strict) {
          ca::log::verbose("record ", ca::record_key(record), ": ", e.what(), " (already has an error section)");
          return ca::Outcome::passed;
        }
        throw;
      }
      tally.add(reward["value"].get<double>(), reward["value"].dump(), verdict);
      record["reward"] = std::move(reward);
      return verdict == ca::reward_calc::Verdict::scored_correct || verdict == ca::reward_calc::Verdict::unprofiled
                 ? ca::Outcome::done
                 : ca::Outcome::failed;
    };
    const int status = path.stream(job);
    return path.end(status, "; " + tally.text(config), ca::Json{{"settings", config.to_json()}});
  });
}
