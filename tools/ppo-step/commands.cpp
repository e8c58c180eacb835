// ppo-step's subcommands: advantages, sample, tokenize, init and config.
#include "tools/ppo-step/commands.hpp"

#include <sys/resource.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <chrono>
#include <filesystem>
#include <optional>
#include <iostream>

#include "libcommon/errors.hpp"
#include "libcommon/nn/checkpoint.hpp"
#include "libcommon/nn/lora.hpp"
#include "libcommon/fields.hpp"
#include "libcommon/ids.hpp"
#include "libcommon/log.hpp"
#include "libcommon/paths.hpp"
#include "libcommon/record_path.hpp"
#include "tools/ppo-step/config.hpp"
#include "tools/ppo-step/records.hpp"

namespace ca::ppo_step {

int run_advantages(const CommonOptions& options, const AdvantageSettings& settings) {
  // Every record (a batch takes no shard: GRPO's groups and whitening are over all of it) through the
  // record path, parsed in order; the advantages need the whole batch, so records are written after.
  struct Item : RecordItem {
    std::optional<Sequence> sequence;
  };
  std::vector<Json> records;
  std::vector<Sequence> batch;
  std::vector<int> slot;  // record index -> batch index, -1 for a bad record
  const bool need_values = settings.estimator == "gae";
  RecordPath path(options);
  RecordJob<Item> job;
  job.work = [&](int, Item& item) {
    item.sequence = parse_sequence(item.record, need_values);
    return Outcome::done;
  };
  int next_slot = -1;  // emit (a good record) comes before the sink (every record)
  job.emit = [&](Item& item) {
    batch.push_back(std::move(*item.sequence));
    next_slot = int(batch.size()) - 1;
  };
  {
    RecordReader reader(options.input);
    path.run<Item>(reader_source(reader), job, [&](const Json& record) {
      slot.push_back(next_slot);
      next_slot = -1;
      records.push_back(record);
    });
  }
  compute_advantages(batch, settings.estimator, settings.gamma, settings.lam, settings.whiten, settings.grpo_norm_by_std);
  RecordWriter writer(options.output);
  for (std::size_t i = 0; i < records.size(); ++i) {
    if (slot[i] >= 0) write_sequence_result(records[i], batch[std::size_t(slot[i])]);
    writer.write(records[i]);
  }
  log::info(settings.estimator, ": ", path.totals().text());
  return kExitOk;
}

Sampler::Sampler(const SampleSettings& settings)
    : settings_(settings), model_(nn::load_policy<float>(settings.policy)), rng_(settings.seed) {
  if (settings_.samples < 1) throw UsageError("-n must be at least 1");
  if (settings_.options.max_new_tokens < 1) throw UsageError("--max-new-tokens must be at least 1");
  if (settings_.options.top_p <= 0 || settings_.options.top_p > 1) throw UsageError("--top-p must be in (0, 1]");
  if (const int ordinal = nn_cuda::parse_device(settings_.device, "--device"); ordinal >= 0) {
    gpu_ = std::make_unique<nn_cuda::Gpu>(ordinal);
    nn_cuda::CudaModelOptions o;
    o.dtype = nn_cuda::parse_dtype(settings_.dtype);
    cuda_model_ = std::make_unique<nn_cuda::CudaModel>(*gpu_, model_, o);
  }
  model_.release_gradients();  // sampling runs forward only
}

// One response to `prompt`. On the CPU the prompt's state is computed once per prompt (the caller's
// decoder) and each response continues from a copy; on the GPU each response feeds the prompt again
// into a KV cache sized for it.
nn::SampleResult Sampler::generate(const std::vector<int>& prompt, const nn::Decoder<float>* cpu_prompt_state) {
  if (!cuda_model_) {
    nn::Decoder<float> d = *cpu_prompt_state;
    return nn::generate(d, settings_.options, rng_);
  }
  gpu_->make_current();  // the record path's lane, not the thread that opened the GPU
  const int max_len = int(std::min<int64_t>(model_.config().max_position_embeddings,
                                            int64_t(prompt.size()) + settings_.options.max_new_tokens + 1));
  nn_cuda::CudaDecoder d(*cuda_model_, max_len);
  d.feed(prompt);
  return nn_cuda::generate(d, settings_.options, rng_);
}

std::vector<Json> Sampler::responses(const Json& prompt) {
  if (!prompt.contains("prompt_token_ids") || !prompt["prompt_token_ids"].is_array() || prompt["prompt_token_ids"].empty())
    throw FieldError("prompt_token_ids", "missing or not a non-empty array of token ids");
  std::vector<int> ids;
  for (auto& v : prompt["prompt_token_ids"]) ids.push_back(token_id(v, "prompt_token_ids"));
  if (int64_t(ids.size()) + 1 > model_.config().max_position_embeddings)
    throw FieldError("prompt_token_ids", log::cat(ids.size(), " tokens: the model's window is ",
                                                  model_.config().max_position_embeddings));
  for (int id : ids)
    if (id < 0 || id >= model_.config().vocab_size)
      throw FieldError("prompt_token_ids", log::cat("token id ", id, " is outside the model's vocabulary of ",
                                                    model_.config().vocab_size));
  const std::string key = record_key(prompt);
  ++prompts_;
  const auto t0 = std::chrono::steady_clock::now();
  std::optional<nn::Decoder<float>> decoder;
  if (!cuda_model_) {
    decoder.emplace(model_);
    decoder->feed(ids);
  }
  std::vector<Json> out;
  for (int i = 0; i < settings_.samples; ++i) {
    nn::SampleResult r = generate(ids, decoder ? &*decoder : nullptr);
    Json rec = prompt;
    Json settings = {{"temperature", settings_.options.temperature}, {"top_p", settings_.options.top_p},
                     {"max_new_tokens", settings_.options.max_new_tokens}, {"seed", settings_.seed},
                     {"device", cuda_model_ ? "cuda:" + std::to_string(gpu_->info().ordinal) : std::string("cpu")},
                     {"dtype", cuda_model_ ? settings_.dtype : std::string("f32")}};
    rec["episode_id"] = content_id(Json{{"key", key}, {"seed", settings_.seed}, {"sample", i}, {"tokens", r.tokens}});
    Json episode;
    episode["policy"] = "native:" + settings_.policy;
    episode["settings"] = settings;
    episode["turns"] = Json::array({Json{{"role", "user"}, {"token_ids", ids}},
                                      Json{{"role", "assistant"}, {"token_ids", r.tokens}, {"logprobs", r.logprobs}}});
    episode["stop_reason"] = r.stop_reason;
    episode["tokens"] = int64_t(r.tokens.size());
    rec["episode"] = episode;
    out.push_back(std::move(rec));
    ++responses_;
    tokens_ += int64_t(r.tokens.size());
  }
  seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return out;
}

std::string Sampler::summary() const {
  return log::cat(prompts_, " prompts, ", responses_, " responses, ", tokens_, " tokens, ",
                  seconds_ > 0 ? double(tokens_) / seconds_ : 0.0, " tokens/s");
}

int run_sample(const CommonOptions& options, const SampleSettings& settings) {
  // This shard's prompts through the record path, one lane (the sampler draws in input order); a
  // prompt's responses are written in its place, a bad prompt as it came with its error section.
  struct Item : RecordItem {
    std::vector<Json> responses;
  };
  Sampler sampler(settings);
  RecordWriter writer(options.output);
  RecordPath path(options);
  RecordJob<Item> job;
  job.work = [&](int, Item& item) {
    item.responses = sampler.responses(item.record);
    return Outcome::done;
  };
  job.emit = [&](Item& item) {
    for (auto& r : item.responses) writer.write(r);
    item.write = false;
  };
  RecordReader reader(options.input);
  path.run<Item>(reader_source(reader), job, [&](const Json& record) { writer.write(record); }, true);
  log::info(sampler.summary(), "; ", path.totals().text());
  return kExitOk;
}

int run_tokenize(const CommonOptions& options, const EpisodeFields& fields) {
  RecordLoop loop(options);
  int rc = loop.run([&](Json& rec) {
    Trajectory tr = parse_episode(rec, fields);
    rec["training_tokens"] = {{"ids", tr.tokens},
                              {"mask", tr.mask},
                              {"response_start", tr.response_start},
                              {"model_tokens", int64_t(tr.model_tokens())},
                              {"rendered", tr.rendered},
                              {"clean_tool_use", tr.clean_tool_use}};
    return Outcome::done;
  });
  return rc;
}

namespace {
// "5GB", "500MB", "2GiB", "1000000": bytes, as huggingface_hub's convert_file_size_to_int reads them.
uint64_t parse_shard_size(const std::string& text) {
  std::size_t end = 0;
  double v = 0;
  try {
    v = std::stod(text, &end);
  } catch (const std::exception&) {
    throw UsageError("--max-shard-size '" + text + "': expected a size such as 5GB or 500MB");
  }
  static const std::pair<const char*, double> units[] = {{"", 1},      {"B", 1},       {"KB", 1e3},          {"MB", 1e6},
                                                         {"GB", 1e9},  {"KiB", 1024.0}, {"MiB", 1048576.0}, {"GiB", 1073741824.0}};
  for (auto& [unit, scale] : units)
    if (text.substr(end) == unit && v * scale >= 1 && v * scale < 1e18) return uint64_t(v * scale);
  throw UsageError("--max-shard-size '" + text + "': expected a size such as 5GB or 500MB");
}

// A size as people read it: 1.5 GiB, 240.3 KiB, 512 bytes (never "0 GiB" for a small model).
std::string size_text(double bytes) {
  const char* units[] = {"bytes", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  int u = 0;
  while (bytes >= 1024 && u < 6) bytes /= 1024, ++u;
  char buf[48];
  std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : "%.1f %s", bytes, units[u]);
  return buf;
}
}  // namespace

void init_model(const InitSettings& s) {
  Json j;
  try {
    j = parse_json(read_file(s.config_path), "'" + s.config_path + "'");
  } catch (const Json::exception& e) {
    throw InputError("'" + s.config_path + "': " + e.what());
  }
  nn::Config config;
  nn::WriteOptions options;
  options.max_shard_bytes = parse_shard_size(s.max_shard_size);
  options.threads = s.threads;
  try {
    config = nn::Config::from_json(j);
    config.value_head = s.critic || config.value_head;
    config.validate();
    if (!s.dtype.empty()) options.dtype = s.dtype == "bf16" ? "BF16" : "F32";
    else if (j.contains("torch_dtype") && j["torch_dtype"].is_string()) options.dtype = nn::disk_dtype_for(j["torch_dtype"]);
    // The weights are drawn and written tensor by tensor, never held whole; still refused before any
    // work: a checkpoint larger than the free disk, or than this machine's memory (or ulimit) in its
    // disk dtype (nothing here could then read it back whole: sampling and the CPU trainer do).
    const double bytes = double(nn::checkpoint_bytes(config, options.dtype));
    double memory = double(sysconf(_SC_PHYS_PAGES)) * double(sysconf(_SC_PAGE_SIZE));
    for (int resource : {RLIMIT_AS, RLIMIT_DATA}) {
      struct rlimit rl {};
      if (getrlimit(resource, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY && double(rl.rlim_cur) < memory) memory = double(rl.rlim_cur);
    }
    const std::string sizes = log::cat(config.parameter_count(), " parameters need ", size_text(bytes), " in ", options.dtype);
    const std::string shape = log::cat(" (hidden_size ", config.hidden_size, ", num_hidden_layers ", config.num_hidden_layers, ")");
    if (memory > 0 && bytes > memory)
      throw InputError(log::cat(sizes, ", more than the ", size_text(memory), " of memory (or ulimit) here", shape));
    std::filesystem::path parent = std::filesystem::absolute(s.out).parent_path();
    while (!parent.empty() && !std::filesystem::exists(parent) && parent != parent.root_path()) parent = parent.parent_path();
    struct statvfs fsinfo {};
    if (::statvfs(parent.c_str(), &fsinfo) == 0) {
      const double free_bytes = double(fsinfo.f_bavail) * double(fsinfo.f_frsize);
      // The disk, not the config, is what is short: exit 3, as a full disk met while writing is.
      if (bytes > free_bytes)
        throw EnvironmentError(log::cat("'", s.config_path, "': ", sizes, ", more than the ", size_text(free_bytes),
                                        " free on the disk of '", s.out, "'", shape));
    }
    nn::check_checkpoint_target(s.out);
  } catch (const InputError& e) {
    throw InputError("'" + s.config_path + "': " + e.what());
  }
  nn::CheckpointWriter out(s.out);  // complete or not at all; an earlier checkpoint there replaced whole
  const auto t0 = std::chrono::steady_clock::now();
  nn::init_random_checkpoint(config, s.seed, s.std, out.path(), options);
  out.commit();
  log::info("wrote ", config.value_head ? "critic" : "policy", " with ", config.parameter_count(), " parameters (",
            options.dtype, ") to ", s.out, " (seed ", s.seed, ") in ",
            std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), " s");
}

void add_subcommands(Cli& cli, Subcommands& s, EpisodeFields& fields) {
  auto& app = cli.app();
  // advantages
  s.advantages = app.add_subcommand("advantages", "Add advantages and returns to sequence records (GAE or GRPO)");
  s.advantages->add_option("--estimator", s.adv.estimator, "gae | grpo")->check(CLI::IsMember({"gae", "grpo"}))->capture_default_str();
  s.advantages->add_option("--gamma", s.adv.gamma, "Discount")->capture_default_str();
  s.advantages->add_option("--lam", s.adv.lam, "GAE lambda")->capture_default_str();
  s.advantages->add_flag("--no-whiten", s.no_whiten, "Keep GAE advantages raw (default: whitened over model tokens)");
  s.advantages->add_flag("--no-std-norm", s.no_std_norm, "GRPO: subtract the group mean only");
  cli.add_io_options(s.advantages);
  cli.add_record_options(s.advantages);

  // sample
  s.sample = app.add_subcommand("sample", "Sample responses from a native policy for prompt records (episodes out)");
  s.sample->add_option("--policy", s.sample_settings.policy, "Policy checkpoint")->required();
  s.sample->add_option("-n,--samples", s.sample_settings.samples, "Responses per prompt")->capture_default_str();
  s.sample->add_option("--max-new-tokens", s.sample_settings.options.max_new_tokens, "Tokens per response")->capture_default_str();
  s.sample->add_option("--temperature", s.sample_settings.options.temperature, "0 = greedy")->capture_default_str();
  s.sample->add_option("--top-p", s.sample_settings.options.top_p, "Nucleus mass")->capture_default_str();
  s.sample->add_option("--stop", s.sample_settings.options.stop_tokens, "Stop token ids");
  s.sample->add_option("--device", s.sample_settings.device, "cpu, cuda or cuda:N: where the policy samples")->capture_default_str();
  s.sample->add_option("--dtype", s.sample_settings.dtype, "Compute dtype on cuda: bf16 or f32")
      ->check(CLI::IsMember({"bf16", "f32"}))
      ->capture_default_str();
  cli.add_io_options(s.sample);
  cli.add_record_options(s.sample);
  cli.add_seed_option(s.sample);

  // tokenize
  s.tokenize = app.add_subcommand("tokenize", "Add the tokens a step would train on to episode records (training_tokens: ids, mask)");
  s.tokenize->add_option("--policy", s.tok_policy, "Policy checkpoint whose tokenizer.json renders turns without token ids")->required();
  s.tokenize->add_option("--group-field", fields.group_pointer, "JSON pointer of the group key")->capture_default_str()->check(json_pointer_error);
  cli.add_io_options(s.tokenize);
  cli.add_record_options(s.tokenize);

  // init
  s.init = app.add_subcommand("init", "Write a randomly initialized native model (HF layout) from a config.json");
  s.init->add_option("--model-config", s.init_settings.config_path, "config.json of the model (Qwen2/Llama keys)")->required();
  s.init->add_option("--out", s.init_settings.out, "Checkpoint folder")->required();
  s.init->add_flag("--critic", s.init_settings.critic, "A critic (value head) instead of a policy");
  s.init->add_option("--std", s.init_settings.std, "Normal init standard deviation")->capture_default_str();
  s.init->add_option("--dtype", s.init_settings.dtype, "On disk: bf16 or f32 (default: the config's torch_dtype, else f32)")
      ->check(CLI::IsMember({"bf16", "f32"}));
  s.init->add_option("--max-shard-size", s.init_settings.max_shard_size,
                     "Largest weight file (5GB, 500MB, 2GiB); larger models are sharded with an index")
      ->capture_default_str();
  s.init->add_option("--threads", s.init_settings.threads, "Writing threads (0: the machine's cores)")->capture_default_str();
  cli.add_seed_option(s.init);

  s.config = app.add_subcommand("config", "Print the default YAML configuration");
}

std::optional<int> run_subcommand(const CommonOptions& opt, Subcommands& s, EpisodeFields fields,
                                  const StepPaths& paths, uint64_t seed) {
  if (*s.config) {
    std::cout << TrainConfig::default_yaml();
    return kExitOk;
  }
  if (*s.init) {
    s.init_settings.seed = seed;
    init_model(s.init_settings);
    return kExitOk;
  }
  if (*s.sample) {
    s.sample_settings.seed = seed;
    return run_sample(opt, s.sample_settings);
  }
  if (*s.tokenize) {
    StepPaths p = paths;
    p.policy = s.tok_policy;
    auto tokenizer = render_tokenizer(p);
    if (!tokenizer) throw InputError("tokenize: no tokenizer.json in " + s.tok_policy);
    fields.tokenizer = &*tokenizer;
    fields.need_reward = false;
    return run_tokenize(opt, fields);
  }
  if (*s.advantages) {
    s.adv.whiten = !s.no_whiten;
    s.adv.grpo_norm_by_std = !s.no_std_norm;
    return run_advantages(opt, s.adv);
  }
  return std::nullopt;
}

}  // namespace ca::ppo_step
