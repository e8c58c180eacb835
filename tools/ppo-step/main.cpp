// ppo-step: the training half of the recipe (PPO, RFT, value pretraining) on the native model, and the
// advantage math alone (`advantages`) for any trainer.
#include <CLI/CLI.hpp>
#include <random>

#include "libcommon/cli.hpp"
#include "libcommon/log.hpp"
#include "tools/ppo-step/commands.hpp"
#include "tools/ppo-step/train_command.hpp"

int main(int argc, char** argv) {
  ca::Cli cli("ppo-step",
              "One training step (PPO, rejection fine-tuning, value pretraining) of the native model on episode "
              "records; or the advantage math alone.",
              "reward-calc < episodes.jsonl | ppo-step --mode ppo --policy ckpt/step-7 --critic ckpt/step-7/critic "
              "--out ckpt/step-8 > metrics.jsonl",
              "agent-run(1), reward-calc(1), run-store(1), cuda-agent(7)");
  auto& app = cli.app();
  app.require_subcommand(0, 1);
  app.fallthrough();  // -v/-q and the shared options work after a subcommand too
  ca::ppo_step::TrainSettings train;  // the training step: no subcommand
  const auto train_only = ca::ppo_step::add_train_options(app, train);
  cli.add_io_options();
  cli.add_store_options();
  cli.add_record_options();
  cli.add_seed_option();
  ca::ppo_step::Subcommands sub;
  ca::ppo_step::add_subcommands(cli, sub, train.fields);

  return cli.run(argc, argv, [&]() -> int {
    ca::ppo_step::refuse_train_options(app, train_only);
    const auto& opt = cli.options();
    opt.resume_does_nothing("a step starts from the checkpoint it is given (--policy)");
    const uint64_t seed = opt.run_seed();
    if (auto rc = ca::ppo_step::run_subcommand(opt, sub, train.fields, train.paths, seed)) return *rc;
    auto tokenizer = ca::ppo_step::render_tokenizer(train.paths);
    if (tokenizer) train.fields.tokenizer = &*tokenizer;
    return ca::ppo_step::run_train(opt, train, seed);
  });
}
