// ppo-step's training step.
#include "tools/ppo-step/train_command.hpp"

#include <CLI/CLI.hpp>
#include <filesystem>

#include "libcommon/errors.hpp"
#include "libcommon/fields.hpp"
#include "libcommon/jsonl.hpp"
#include "libcommon/log.hpp"
#include "libcommon/nn/lora.hpp"
#include "libcommon/nn/model.hpp"
#include "libcommon/paths.hpp"
#include "libcommon/record_path.hpp"
#include "libcommon/store.hpp"
#include "tools/ppo-step/config.hpp"

namespace ca::ppo_step {

std::vector<CLI::Option*> add_train_options(CLI::App& app, TrainSettings& t) {
  auto& [paths, config_path, fields, device, empty_ok] = t;
  const std::size_t before = app.get_options().size();
  app.add_option("--mode", paths.mode, "ppo | rft | value-pretrain")->check(CLI::IsMember({"ppo", "rft", "value-pretrain"}));
  app.add_option("--policy", paths.policy, "Policy checkpoint: an HF folder (config.json + safetensors, sharded or not) or a PEFT adapter folder on its base");
  app.add_option("--critic", paths.critic, "Critic checkpoint or critic adapter (a policy folder starts a critic with a zero value head)");
  app.add_option("--ref", paths.ref, "Reference policy for KL (algorithm.kl_in_reward / kl_loss)");
  app.add_option("--out", paths.out, "Where the new checkpoint goes (value-pretrain: the critic)");
  app.add_option("--critic-out", paths.critic_out, "Where the new critic goes in ppo mode (default OUT/critic)");
  app.add_option("--device", device.device, "cpu, cuda or cuda:N: where the models train (cuda: opened at run time)")
      ->capture_default_str();
  app.add_option("--dtype", device.dtype, "Compute dtype on cuda: bf16 or f32 (master weights, gradients and AdamW are fp32)")
      ->check(CLI::IsMember({"bf16", "f32"}))
      ->capture_default_str();
  app.add_option("--lora-rank", device.lora.rank,
                 "Train LoRA adapters of this rank on a frozen base (a full --policy/--critic is the base); "
                 "--out is then a PEFT adapter folder. An adapter folder as --policy continues it")
      ->check(CLI::Range(1, 65536));
  app.add_option("--lora-alpha", device.lora.alpha, "LoRA alpha (scaling alpha/rank; default 2 x rank)")->check(CLI::PositiveNumber);
  app.add_option("--lora-targets", device.lora.targets,
                 "LoRA target modules: all-linear, or a comma list of q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj")
      ->capture_default_str();
  app.add_option("--merge", paths.merged, "Also write the policy with its adapter merged into the base, as a full checkpoint folder");
  app.add_option("--load-format", device.load_format,
                 "safetensors: read the checkpoints' weights; dummy: read only their config.json and draw the weights "
                 "as `ppo-step init --seed S` would (S: this run's --seed), for benchmarks at shapes the disk cannot hold")
      ->check(CLI::IsMember({"safetensors", "dummy"}))
      ->capture_default_str();
  app.add_flag("--optimizer-on-host", device.host_optimizer,
               "cuda: AdamW's moments in host memory, streamed through the GPU each step (full fine-tuning of a 7B shape on one GPU)");
  app.add_flag("--checkpointing", device.checkpointing, "cuda: recompute each layer in the backward instead of keeping its activations");
  app.add_flag("--empty-ok", empty_ok, "Nothing to train on (rft: no trajectory kept) is not an error: a metrics line "
                                       "with trained false and no --out checkpoint (a loop keeps its policy)");
  app.add_option("--config", config_path, "YAML coefficients (ppo-step config prints every key and default)");
  app.add_option("--reward-field", fields.reward_pointer, "JSON pointer of the reward (default /reward if a number, else /reward/value)")
      ->check(ca::json_pointer_error);
  app.add_option("--group-field", fields.group_pointer, "JSON pointer of the group key (GRPO)")->capture_default_str()->check(ca::json_pointer_error);
  std::vector<CLI::Option*> added = app.get_options();
  added.erase(added.begin(), added.begin() + long(before));
  return added;
}

void refuse_train_options(const CLI::App& app, const std::vector<CLI::Option*>& train_options) {
  const auto subs = app.get_subcommands();  // the ones on the command line
  if (subs.empty()) return;
  for (const CLI::Option* o : train_options)
    if (o->count() > 0)
      throw UsageError("ppo-step " + subs.front()->get_name() + ": " + o->get_name() +
                       " is an option of the training step (ppo-step without a subcommand); " +
                       subs.front()->get_name() + " does not read it (ppo-step " + subs.front()->get_name() +
                       " --help lists its own)");
}

std::optional<tokenizer::Tokenizer> render_tokenizer(const StepPaths& paths) {
  for (const std::string& dir : {paths.policy, paths.critic})
    if (!dir.empty() && std::filesystem::exists(std::filesystem::path(dir) / "tokenizer.json"))
      return tokenizer::Tokenizer::from_file((std::filesystem::path(dir) / "tokenizer.json").string());
  return std::nullopt;
}

namespace {
// The smallest vocabulary among the checkpoints the step is given: a record with a token id past it is
// that record's error (left out, named by its line), found before any model is loaded.
void set_vocabulary(const StepPaths& p, EpisodeFields& f) {
  for (const std::string& dir : {p.policy, p.critic, p.ref}) {
    if (dir.empty()) continue;
    std::string path = dir + "/config.json";
    if (ca::nn::is_adapter_dir(dir)) try {
        const std::string cpath = dir + "/adapter_config.json";
        path = ca::nn::adapter_base_dir(ca::nn::LoraConfig::from_json(ca::parse_json(ca::read_file(cpath), cpath), cpath), dir) + "/config.json";
      } catch (const std::exception&) {
        continue;  // loading the adapter names what is wrong with it
      }
    if (!ca::file_exists(path)) continue;
    try {
      auto c = ca::nn::Config::from_json(ca::parse_json(ca::read_file(path), path));
      if (f.vocab_size == 0 || c.vocab_size < f.vocab_size) f.vocab_size = c.vocab_size, f.vocab_origin = "'" + path + "'";
    } catch (const std::exception&) {
      // loading the checkpoint names what is wrong with it
    }
  }
}
}  // namespace

int run_train(const CommonOptions& opt, TrainSettings& t, uint64_t seed) {
  auto& [paths, config_path, fields, device, empty_ok] = t;
  if (paths.mode.empty()) throw ca::UsageError("give --mode ppo|rft|value-pretrain, or a subcommand (advantages, sample, tokenize, init, config)");
  ca::ppo_step::TrainConfig config;
  if (!config_path.empty()) config.apply_yaml(ca::read_file(config_path), config_path);
  device.lora.seed = seed;
  device.seed = seed;
  if (device.lora.rank == 0 && (device.lora.alpha > 0 || device.lora.targets != "all-linear"))
    throw ca::UsageError("--lora-alpha and --lora-targets need --lora-rank");
  if (device.lora.rank > 0) ca::nn::LoraConfig::parse_targets(device.lora.targets);  // a bad list fails before the input
  ca::ppo_step::Trainer trainer(config, paths, seed, device);  // a bad --device fails before the input is read
  set_vocabulary(paths, fields);
  // This shard's episodes, each parsed into the batch in input order; a bad one is left out.
  struct Item : ca::RecordItem {
    ca::ppo_step::Trajectory trajectory;
  };
  std::vector<ca::ppo_step::Trajectory> batch;
  ca::RecordPathOptions path_options;
  path_options.bad_left_out = "record left out of the batch";
  ca::RecordPath path(opt, path_options);
  ca::RecordJob<Item> job;
  job.work = [&](int, Item& item) {
    item.trajectory = ca::ppo_step::parse_episode(item.record, fields);
    return ca::Outcome::done;
  };
  job.emit = [&](Item& item) { batch.push_back(std::move(item.trajectory)); };
  {
    ca::RecordReader reader(opt.input);
    path.run<Item>(ca::reader_source(reader), job, [](const ca::Json&) {}, true);
  }
  const int64_t read = path.totals().read, bad = path.totals().bad;
  auto store = ca::open_store_for(opt);  // once the input is read: a broken stream leaves no run row
  path.set_store(store.get());
  ca::Json metrics;
  try {
    metrics = trainer.run(batch, bad);
  } catch (const ca::ppo_step::NothingToTrain& e) {
    if (!empty_ok) {
      path.end(e.exit_code, "", ca::Json{{"done", 0}});
      throw;
    }
    ca::log::warn(paths.mode, ": ", e.what(), " (", e.episodes_skipped, " of ", read,
                  " left out); --empty-ok: no checkpoint written");
    ca::RecordWriter(opt.output).write(ca::Json{{"mode", paths.mode}, {"trained", false}, {"reason", e.what()},
                                                  {"policy", paths.policy}, {"episodes", 0},
                                                  {"episodes_skipped", e.episodes_skipped}, {"bad_records", bad},
                                                  {"load_format", device.load_format}});
    return path.end(ca::kExitOk, "", ca::Json{{"done", 0}});
  } catch (const ca::Error& e) {
    path.end(e.exit_code, "", ca::Json{{"done", 0}});
    throw;
  }
  metrics["bad_records"] = bad;
  metrics["trained"] = true;
  ca::RecordWriter out(opt.output);
  out.write(metrics);
  if (store) store->put_ppo_step(metrics["step_id"].get<std::string>(), metrics);
  path.end(ca::kExitOk, "", ca::Json{{"done", metrics["episodes"]}});
  ca::log::info(paths.mode, " step ", metrics["step"], ": ", metrics["episodes"], " episodes, ", metrics["tokens"],
                " tokens, ", bad, " bad records, reward mean ", metrics["reward_mean"], ", ",
                metrics["tokens_per_s"].get<double>(), " tokens/s",
                metrics["load_format"] == "dummy" ? " (dummy weights: random, not read; a benchmark, not training)" : "");
  return ca::kExitOk;
}

}  // namespace ca::ppo_step
