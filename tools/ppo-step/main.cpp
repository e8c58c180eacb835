// ppo-step: the training half of the recipe (PPO, RFT, value pretraining) on the native model, and the
// advantage math alone (`advantages`) for any trainer.
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>
#include <random>

#include "libcommon/cli.hpp"
#include "libcommon/errors.hpp"
#include "libcommon/ids.hpp"
#include "libcommon/log.hpp"
#include "libcommon/paths.hpp"
#include "libcommon/record_loop.hpp"
#include "libcommon/store.hpp"
#include "libcommon/tokenizer/tokenizer.hpp"
#include "tools/ppo-step/config.hpp"
#include "tools/ppo-step/commands.hpp"
#include "tools/ppo-step/records.hpp"
#include "tools/ppo-step/trainer.hpp"

int main(int argc, char** argv) {
  ca::Cli cli("ppo-step",
              "One training step (PPO, rejection fine-tuning, value pretraining) of the native model on episode "
              "records; or the advantage math alone.",
              "reward-calc < episodes.jsonl | ppo-step --mode ppo --policy ckpt/step-7 --critic ckpt/step-7/critic "
              "--out ckpt/step-8 > metrics.jsonl",
              "agent-run(1), reward-calc(1), run-store(1), cuda-agent(7)");
  auto& app = cli.app();
  auto& opt = cli.options();
  app.require_subcommand(0, 1);
  app.fallthrough();  // -v/-q and the shared options work after a subcommand too

  // Training (no subcommand).
  ca::ppo::StepPaths paths;
  std::string config_path;
  ca::ppo::EpisodeFields fields;
  app.add_option("--mode", paths.mode, "ppo | rft | value-pretrain")->check(CLI::IsMember({"ppo", "rft", "value-pretrain"}));
  app.add_option("--policy", paths.policy, "Policy checkpoint (HF folder: config.json + model.safetensors)");
  app.add_option("--critic", paths.critic, "Critic checkpoint (a policy folder starts a critic with a zero value head)");
  app.add_option("--ref", paths.ref, "Reference policy for KL (algorithm.kl_in_reward / kl_loss)");
  app.add_option("--out", paths.out, "Where the new checkpoint goes (value-pretrain: the critic)");
  app.add_option("--critic-out", paths.critic_out, "Where the new critic goes in ppo mode (default OUT/critic)");
  ca::ppo::DeviceOptions device;
  app.add_option("--device", device.device, "cpu, cuda or cuda:N: where the models train (cuda: opened at run time)")
      ->capture_default_str();
  app.add_option("--dtype", device.dtype, "Compute dtype on cuda: bf16 or f32 (master weights, gradients and AdamW are fp32)")
      ->check(CLI::IsMember({"bf16", "f32"}))
      ->capture_default_str();
  app.add_flag("--checkpointing", device.checkpointing, "cuda: recompute each layer in the backward instead of keeping its activations");
  bool empty_ok = false;
  app.add_flag("--empty-ok", empty_ok, "Nothing to train on (rft: no trajectory kept) is not an error: a metrics line "
                                       "with trained false and no --out checkpoint (a loop keeps its policy)");
  app.add_option("--config", config_path, "YAML coefficients (ppo-step config prints every key and default)");
  app.add_option("--reward-field", fields.reward_pointer, "JSON pointer of the reward (default /reward if a number, else /reward/value)");
  app.add_option("--group-field", fields.group_pointer, "JSON pointer of the group key (GRPO)")->capture_default_str();
  cli.add_io_options();
  cli.add_store_options();
  cli.add_record_options();
  cli.add_seed_option();

  // advantages
  std::string estimator = "gae";
  double gamma = 1.0, lam = 0.95;
  bool no_whiten = false, no_std_norm = false;
  auto* adv = app.add_subcommand("advantages", "Add advantages and returns to sequence records (GAE or GRPO)");
  adv->add_option("--estimator", estimator, "gae | grpo")->check(CLI::IsMember({"gae", "grpo"}))->capture_default_str();
  adv->add_option("--gamma", gamma, "Discount")->capture_default_str();
  adv->add_option("--lam", lam, "GAE lambda")->capture_default_str();
  adv->add_flag("--no-whiten", no_whiten, "Keep GAE advantages raw (default: whitened over model tokens)");
  adv->add_flag("--no-std-norm", no_std_norm, "GRPO: subtract the group mean only");
  cli.add_io_options(adv);
  cli.add_record_options(adv);

  // sample
  ca::ppo::SampleSettings sample;
  auto* smp = app.add_subcommand("sample", "Sample responses from a native policy for prompt records (episodes out)");
  smp->add_option("--policy", sample.policy, "Policy checkpoint")->required();
  smp->add_option("-n,--samples", sample.samples, "Responses per prompt")->capture_default_str();
  smp->add_option("--max-new-tokens", sample.options.max_new_tokens, "Tokens per response")->capture_default_str();
  smp->add_option("--temperature", sample.options.temperature, "0 = greedy")->capture_default_str();
  smp->add_option("--top-p", sample.options.top_p, "Nucleus mass")->capture_default_str();
  smp->add_option("--stop", sample.options.stop_tokens, "Stop token ids");
  cli.add_io_options(smp);
  cli.add_record_options(smp);
  cli.add_seed_option(smp);

  // tokenize
  std::string tok_policy;
  auto* tkz = app.add_subcommand("tokenize", "Add the tokens a step would train on to episode records (training_tokens: ids, mask)");
  tkz->add_option("--policy", tok_policy, "Policy checkpoint whose tokenizer.json renders turns without token ids")->required();
  tkz->add_option("--group-field", fields.group_pointer, "JSON pointer of the group key")->capture_default_str();
  cli.add_io_options(tkz);
  cli.add_record_options(tkz);

  // init
  ca::ppo::InitSettings init;
  auto* ini = app.add_subcommand("init", "Write a randomly initialized native model (HF layout) from a config.json");
  ini->add_option("--model-config", init.config_path, "config.json of the model (Qwen2/Llama keys)")->required();
  ini->add_option("--out", init.out, "Checkpoint folder")->required();
  ini->add_flag("--critic", init.critic, "A critic (value head) instead of a policy");
  ini->add_option("--std", init.std, "Normal init standard deviation")->capture_default_str();
  cli.add_seed_option(ini);

  auto* cfg = app.add_subcommand("config", "Print the default YAML configuration");

  return cli.run(argc, argv, [&]() -> int {
    if (opt.resume)
      ca::log::warn("--resume does nothing for ppo-step: a step starts from the checkpoint it is given (--policy)");
    const uint64_t seed = opt.seed ? *opt.seed : std::random_device{}();
    if (*cfg) {
      std::cout << ca::ppo::TrainConfig::default_yaml();
      return ca::kExitOk;
    }
    if (*ini) {
      init.seed = seed;
      ca::ppo::init_model(init);
      return ca::kExitOk;
    }
    if (*smp) {
      sample.seed = seed;
      return ca::ppo::run_sample(opt, sample);
    }
    if (*tkz) paths.policy = tok_policy;
    // The policy's tokenizer (the critic's in value-pretrain without --policy) renders episodes that
    // came without token ids (the replay policy, a server that returned none).
    std::optional<ca::tokenizer::Tokenizer> tokenizer;
    for (const std::string& dir : {paths.policy, paths.critic})
      if (!dir.empty() && std::filesystem::exists(std::filesystem::path(dir) / "tokenizer.json")) {
        tokenizer = ca::tokenizer::Tokenizer::from_file((std::filesystem::path(dir) / "tokenizer.json").string());
        fields.tokenizer = &*tokenizer;
        break;
      }
    if (*tkz) {
      if (!fields.tokenizer) throw ca::InputError("tokenize: no tokenizer.json in " + tok_policy);
      fields.need_reward = false;
      return ca::ppo::run_tokenize(opt, fields);
    }
    if (*adv) {
      ca::ppo::AdvantageSettings s{estimator, gamma, lam, !no_whiten, !no_std_norm};
      return ca::ppo::run_advantages(opt, s);
    }
    // Training.
    if (paths.mode.empty()) throw ca::UsageError("give --mode ppo|rft|value-pretrain, or a subcommand (advantages, sample, init, config)");
    ca::ppo::TrainConfig config;
    if (!config_path.empty()) config.apply_yaml(ca::read_file(config_path), config_path);
    ca::ppo::Trainer trainer(config, paths, seed, device);  // a bad --device fails before the input is read
    std::vector<ca::ppo::Trajectory> batch;
    int64_t bad = 0, read = 0;
    ca::RecordReader reader(opt.input);
    ca::Record rec;
    while (reader.next(rec)) {
      ++read;
      if (!opt.shard.contains(ca::record_key(rec))) continue;
      try {
        batch.push_back(ca::ppo::parse_episode(rec, fields));
      } catch (const ca::FieldError& e) {
        if (opt.strict) throw ca::InputError(reader.where() + ": " + e.field + ": " + e.reason);
        ca::log::warn(reader.where(), ": ", e.field, ": ", e.reason, " (record left out of the batch)");
        ++bad;
      }
    }
    auto store = ca::open_store_for(opt);
    ca::Record metrics;
    try {
      metrics = trainer.run(batch, bad);
    } catch (const ca::ppo::NothingToTrain& e) {
      if (!empty_ok) {
        if (store) store->end_run(e.exit_code, ca::Json{{"read", read}, {"bad", bad}});
        throw;
      }
      ca::log::warn(paths.mode, ": ", e.what(), " (", e.episodes_skipped, " of ", read,
                    " left out); --empty-ok: no checkpoint written");
      ca::RecordWriter(opt.output).write(ca::Record{{"mode", paths.mode}, {"trained", false}, {"reason", e.what()},
                                                    {"policy", paths.policy}, {"episodes", 0},
                                                    {"episodes_skipped", e.episodes_skipped}, {"bad_records", bad}});
      if (store) store->end_run(ca::kExitOk, ca::Json{{"read", read}, {"done", 0}, {"bad", bad}});
      return ca::kExitOk;
    } catch (const ca::Error& e) {
      if (store) store->end_run(e.exit_code, ca::Json{{"read", read}, {"bad", bad}});
      throw;
    }
    metrics["bad_records"] = bad;
    metrics["trained"] = true;
    ca::RecordWriter out(opt.output);
    out.write(metrics);
    if (store) {
      store->put_ppo_step(metrics["step_id"].get<std::string>(), metrics);
      store->end_run(ca::kExitOk, ca::Json{{"read", read}, {"done", metrics["episodes"]}, {"bad", bad}});
    }
    ca::log::info(paths.mode, " step ", metrics["step"], ": ", metrics["episodes"], " episodes, ", metrics["tokens"],
                  " tokens, ", bad, " bad records, reward mean ", metrics["reward_mean"], ", ",
                  metrics["tokens_per_s"].get<double>(), " tokens/s");
    return ca::kExitOk;
  });
}
