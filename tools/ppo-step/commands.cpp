// ppo-step's subcommands advantages, sample and init.
#include "tools/ppo-step/commands.hpp"

#include <chrono>

#include "libcommon/errors.hpp"
#include "libcommon/fields.hpp"
#include "libcommon/ids.hpp"
#include "libcommon/log.hpp"
#include "libcommon/paths.hpp"
#include "tools/ppo-step/records.hpp"

namespace ca::ppo {

int run_advantages(const CommonOptions& options, const AdvantageSettings& settings) {
  RecordReader reader(options.input);
  RecordWriter writer(options.output);
  Counts counts;
  std::vector<Record> records;
  std::vector<Sequence> batch;
  std::vector<int> slot;  // record index -> batch index, -1 for a bad record
  Record rec;
  const bool need_values = settings.estimator == "gae";
  while (reader.next(rec)) {
    ++counts.read;
    try {
      batch.push_back(parse_sequence(rec, need_values));
      slot.push_back(int(batch.size()) - 1);
    } catch (const FieldError& e) {
      mark_bad_record(rec, e, options.tool, reader.where(), options.strict);
      ++counts.bad;
      slot.push_back(-1);
    }
    records.push_back(rec);
  }
  compute_advantages(batch, settings.estimator, settings.gamma, settings.lam, settings.whiten, settings.grpo_norm_by_std);
  for (std::size_t i = 0; i < records.size(); ++i) {
    if (slot[i] >= 0) {
      write_sequence_result(records[i], batch[std::size_t(slot[i])]);
      ++counts.done;
    }
    writer.write(records[i]);
  }
  log::info(settings.estimator, ": ", counts.text());
  return kExitOk;
}

Sampler::Sampler(const SampleSettings& settings)
    : settings_(settings), model_(nn::load_model<float>(settings.policy)), rng_(settings.seed) {
  model_.release_gradients();  // sampling runs forward only
  if (settings_.samples < 1) throw UsageError("-n must be at least 1");
  if (settings_.options.max_new_tokens < 1) throw UsageError("--max-new-tokens must be at least 1");
  if (settings_.options.top_p <= 0 || settings_.options.top_p > 1) throw UsageError("--top-p must be in (0, 1]");
}

std::vector<Record> Sampler::responses(const Record& prompt) {
  if (!prompt.contains("prompt_token_ids") || !prompt["prompt_token_ids"].is_array() || prompt["prompt_token_ids"].empty())
    throw FieldError("prompt_token_ids", "missing or not a non-empty array of token ids");
  std::vector<int> ids;
  for (auto& v : prompt["prompt_token_ids"]) {
    if (!v.is_number_integer()) throw FieldError("prompt_token_ids", "expected integers");
    ids.push_back(v.get<int>());
  }
  const std::string key = record_key(prompt);
  ++prompts_;
  const auto t0 = std::chrono::steady_clock::now();
  nn::Decoder<float> decoder(model_);
  decoder.feed(ids);  // the prompt's state is computed once; each response restarts from a copy
  std::vector<Record> out;
  for (int i = 0; i < settings_.samples; ++i) {
    nn::Decoder<float> d = decoder;
    nn::SampleResult r = nn::generate(d, settings_.options, rng_);
    Record rec = prompt;
    Json settings = {{"temperature", settings_.options.temperature}, {"top_p", settings_.options.top_p},
                     {"max_new_tokens", settings_.options.max_new_tokens}, {"seed", settings_.seed}};
    rec["episode_id"] = content_id(Json{{"key", key}, {"seed", settings_.seed}, {"sample", i}, {"tokens", r.tokens}});
    Record episode;
    episode["policy"] = "native:" + settings_.policy;
    episode["settings"] = settings;
    episode["turns"] = Record::array({Record{{"role", "user"}, {"token_ids", ids}},
                                      Record{{"role", "assistant"}, {"token_ids", r.tokens}, {"logprobs", r.logprobs}}});
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
  Sampler sampler(settings);
  RecordReader reader(options.input);
  RecordWriter writer(options.output);
  Counts counts;
  Record rec;
  while (reader.next(rec)) {
    ++counts.read;
    if (!options.shard.contains(record_key(rec))) {
      ++counts.other_shard;
      continue;
    }
    try {
      for (auto& r : sampler.responses(rec)) writer.write(r);
      ++counts.done;
    } catch (const FieldError& e) {
      mark_bad_record(rec, e, options.tool, reader.where(), options.strict);
      ++counts.bad;
      writer.write(rec);
    }
  }
  log::info(sampler.summary(), "; ", counts.text());
  return kExitOk;
}

int run_tokenize(const CommonOptions& options, const EpisodeFields& fields) {
  RecordLoop loop(options);
  int rc = loop.run([&](Record& rec) {
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

void init_model(const InitSettings& s) {
  Json j;
  try {
    j = Json::parse(read_file(s.config_path));
  } catch (const Json::exception& e) {
    throw InputError("'" + s.config_path + "': " + e.what());
  }
  nn::Config config = nn::Config::from_json(j);
  config.value_head = s.critic || config.value_head;
  nn::Model<float> model(config);
  model.init_random(s.seed, s.std);
  nn::save_model(model, s.out);
  log::info("wrote ", config.value_head ? "critic" : "policy", " with ", model.num_parameters(), " parameters to ", s.out,
            " (seed ", s.seed, ")");
}

}  // namespace ca::ppo
