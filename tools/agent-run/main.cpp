// agent-run: episodes of an LLM agent writing CUDA bundles; one candidate record per episode.
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <iostream>
#include <csignal>
#include <cstring>
#include <map>
#include <mutex>
#include <random>
#include <thread>

#include "libcommon/cli.hpp"
#include "libcommon/errors.hpp"
#include "libcommon/fields.hpp"
#include "libcommon/ids.hpp"
#include "libcommon/log.hpp"
#include "libcommon/paths.hpp"
#include "libcommon/record_loop.hpp"
#include "libcommon/store.hpp"
#include "tools/agent-run/episode.hpp"
#include "tools/agent-run/judge.hpp"
#include "tools/agent-run/sandbox.hpp"
#include "tools/agent-run/text.hpp"
#include "tools/agent-run/toolbox.hpp"
#include "tools/agent-run/workspace.hpp"

namespace agent = ca::agent;

namespace {

// SIGINT, SIGTERM (Slurm's scancel and time limit), SIGHUP: no new episode starts, running ones stop
// at the next safe point with their children, and are written as interrupted. Only atomics here.
void on_signal(int sig) {
  int none = 0;
  agent::g_signal.compare_exchange_strong(none, sig);
  agent::g_interrupted = true;
}

// A number of seconds: finite and > 0 (CLI11's ranges let NaN through).
CLI::Validator positive_seconds(double max) {
  return CLI::Validator(
      [max](std::string& text) -> std::string {
        double v = 0;
        try {
          std::size_t used = 0;
          v = std::stod(text, &used);
          if (used != text.size()) return "not a number: " + text;
        } catch (const std::exception&) {
          return "not a number: " + text;
        }
        if (!(v > 0 && v <= max)) return "must be more than 0 and at most " + std::to_string(static_cast<int64_t>(max)) + ", got " + text;
        return "";
      },
      "SECONDS > 0");
}

// SKILL.md from kernel-check's guide; a minimal stand-in (and a warning) when it is not installed.
std::string load_skill(std::string& path) {
  if (path.empty()) {
    try {
      path = ca::data_dir() + "/skill/SKILL.md";
    } catch (const ca::Error&) {
      path = "datasets/skill/SKILL.md";
    }
  }
  if (ca::file_exists(path)) return ca::read_file(path);
  ca::log::warn("SKILL.md not found at ", path, "; the model gets a minimal built-in guide (use --skill FILE)");
  return "# SKILL.md (minimal built-in guide)\n\nThe full guide was not found at " + path +
         ".\n\nWrite CUDA C++ device code in kernels/*.cu (no host code, no PyTorch) and a plan in plan.yaml:\n\n"
         "    dims: {N: inputs.0.shape[0]}\n    forward:\n      - launch: scale_add\n        grid: [cdiv(N, 256)]\n"
         "        block: [256]\n        args: [inputs.0, inputs.1, outputs.0, N, 2.0]\n\n"
         "Buffers: inputs.<i>, outputs.<i>, params.<state_dict name>, scratch.<name>. Kernels are compiled by "
         "NVRTC, so declare them extern \"C\" or refer to them by their C++ name. Then compile(), verify(), "
         "profile().\n";
}

}  // namespace

int main(int argc, char** argv) {
  ca::Cli cli("agent-run",
              "Run agent episodes: an LLM writes a CUDA bundle for each task in a sandboxed workspace, calling "
              "compile/verify/profile; one candidate record (bundle + episode) per episode on stdout.",
              "agent-run --tasks tasks.jsonl --policy openai:http://127.0.0.1:8000/v1 -j 8 | kernel-check | "
              "kernel-prof | reward-calc",
              "kernel-check(1), kernel-prof(1), reward-calc(1), ppo-step(1), run-store(1)");
  auto& app = cli.app();
  auto& opt = cli.options();
  cli.add_stream_options();

  std::string tasks_file, policy_spec;
  int jobs = 1, per_task = 1, first_uid = 60000;
  agent::RunSettings s;
  agent::PolicyOptions po;
  std::string extra_text, workspace_dir;
  bool no_logprobs = false;
  app.add_option("--tasks", tasks_file, "Task records (JSONL); default: the input (-i, stdin)");
  app.add_option("--policy", policy_spec, "openai:URL (OpenAI-compatible server, e.g. http://host:8000/v1), replay:FILE, or native:DIR (a native checkpoint with its tokenizer.json, sampled on --policy-device)")
      ->required();
  app.add_option("-j,--jobs", jobs, "Episodes at once")->check(CLI::Range(1, 1024))->capture_default_str();
  app.add_option("--episodes-per-task", per_task, "Episodes per task (a group for group-normalized advantages)")
      ->check(CLI::Range(1, 100000))->capture_default_str();
  auto* g = app.add_option_group("Episode limits");
  g->add_option("--max-turns", s.max_turns, "Assistant turns per episode (published: 150 train, 200 eval)")
      ->check(CLI::Range(1, 1000000))->capture_default_str();
  g->add_option("--max-context", s.max_context, "Context tokens (prompt + completion); estimated when the server gives no usage")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 40))->capture_default_str();
  g->add_option("--episode-timeout", s.episode_timeout_s, "Wall seconds per episode")
      ->check(positive_seconds(1e9))->capture_default_str();
  g->add_option("--submit", s.submit, "final: the workspace as left (training); best: the best verified bundle by "
                                      "speedup over compile (evaluation)")
      ->check(CLI::IsMember({"final", "best"}))->capture_default_str();
  g->add_option("--tool-output-chars", s.tool_output_chars, "A tool result is cut to this many characters")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 30))->capture_default_str();
  auto* ws = app.add_option_group("Workspaces");
  ws->add_option("--workspace-dir", workspace_dir,
                 "Folder the episodes' workspaces are made in (default $TMPDIR or /tmp: on disk, not RAM); "
                 "leftovers of agent-run processes that are gone are removed at start")
      ->check(CLI::ExistingDirectory);
  ws->add_option("--workspace-mib", s.sandbox.workspace_mib,
                 "Disk cap of each workspace (with the sandbox's /tmp), MiB; over it, a command is ended and the "
                 "largest files are removed")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 24))->capture_default_str();
  auto* sb = app.add_option_group("Sandbox (bash, grep)");
  sb->add_option("--bash-timeout", s.sandbox.wall_s, "Wall seconds per command")
      ->check(CLI::Range(1, 86400))->capture_default_str();
  sb->add_option("--bash-cpu", s.sandbox.cpu_s, "CPU seconds per process")->check(CLI::Range(1, 86400))->capture_default_str();
  sb->add_option("--bash-memory", s.sandbox.memory_mib, "Address space per process, MiB")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 24))->capture_default_str();
  sb->add_option("--bash-procs", s.sandbox.processes, "Processes of the sandbox user")
      ->check(CLI::Range(1, 1 << 22))->capture_default_str();
  sb->add_option("--bash-output", s.sandbox.output_bytes, "Output bytes kept per command")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 30))->capture_default_str();
  sb->add_option("--bash-file-size", s.sandbox.file_size_mib, "Largest file a command may write, MiB")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 24))->capture_default_str();
  sb->add_option("--sandbox-uid", first_uid,
                 "When root: commands run as uid N + worker (root ignores process limits); N >= 1, never root")
      ->check(CLI::Range(1, 2000000000))->capture_default_str();
  auto* lk = app.add_option_group("Locked tools (compile, verify, profile)");
  lk->add_option("--kernel-check", s.kernel_check, "kernel-check binary (default: next to agent-run, or $CA_KERNEL_CHECK)");
  lk->add_option("--kernel-prof", s.kernel_prof, "kernel-prof binary (default: next to agent-run, or $CA_KERNEL_PROF)");
  lk->add_option("--check-arg", s.check_args, "Extra argument for kernel-check (repeat), e.g. --check-arg=--gpus=0");
  lk->add_option("--prof-arg", s.prof_args, "Extra argument for kernel-prof (repeat)");
  lk->add_option("--judge", s.judge_urls,
                 "Judge services (kernel-check --serve, kernel-prof --serve) for verify and profile, e.g. "
                 "--judge http://gpu1:7001,http://gpu1:7002 (the least busy answers; a dead one is skipped)")
      ->delimiter(',');
  lk->add_option("--locked-timeout", s.locked_timeout_s, "Seconds per compile/verify/profile call")
      ->check(positive_seconds(1e7))->capture_default_str();
  lk->add_option("--skill", s.skill_path, "SKILL.md for the workspace (default: DATA/skill/SKILL.md)");
  auto* np = app.add_option_group("Policy native:DIR");
  np->add_option("--policy-device", po.device, "cpu, cuda or cuda:N: where the native policy samples")->capture_default_str();
  np->add_option("--policy-dtype", po.dtype, "Compute dtype on cuda: bf16 or f32")
      ->check(CLI::IsMember({"bf16", "f32"}))
      ->capture_default_str();
  auto* pg = app.add_option_group("Policy openai:URL");
  pg->add_option("--model", po.model, "Model name (default: the first one GET /models lists)");
  pg->add_option("--load-weights", po.load_weights,
                 "Checkpoint folder the server loads before any episode (SGLang's /update_weights_from_disk; vLLM: restart it)");
  pg->add_option("--temperature", po.temperature)->capture_default_str();
  pg->add_option("--top-p", po.top_p)->capture_default_str();
  pg->add_option("--max-tokens", po.max_tokens, "Tokens per assistant turn (also capped by the context left)")
      ->capture_default_str();
  pg->add_option("--api-key-env", po.api_key_env, "Environment variable holding the API key")->capture_default_str();
  pg->add_option("--request-timeout", po.request_timeout_s, "Seconds per HTTP request")->capture_default_str();
  pg->add_option("--retries", po.retries, "Retries on 429, 5xx and transport errors")->capture_default_str();
  pg->add_option("--retry-base", po.retry_base_s, "First backoff in seconds (doubles each retry, at most 60)")
      ->capture_default_str();
  pg->add_flag("--no-logprobs", no_logprobs, "Do not ask for logprobs and token ids");
  pg->add_option("--request-extra", extra_text, "JSON object merged into every request body");

  return cli.run(argc, argv, [&]() -> int {
    // Signals first: from here on an interrupt is an orderly stop, never a half-written run.
    struct sigaction sa {};
    sa.sa_handler = on_signal;
    sa.sa_flags = SA_RESTART;  // reads and writes of other threads go on; the loops poll the flag
    sigemptyset(&sa.sa_mask);
    for (int sig : {SIGINT, SIGTERM, SIGHUP}) sigaction(sig, &sa, nullptr);
    if (static_cast<int64_t>(first_uid) + jobs - 1 > 2000000000)
      throw ca::UsageError("--sandbox-uid: " + std::to_string(first_uid) + " + " + std::to_string(jobs - 1) +
                           " workers is past the largest uid allowed (2000000000)");
    if (!workspace_dir.empty()) agent::set_workspace_base(workspace_dir);
    if (int n = agent::clean_stale_workspaces(); n > 0)
      ca::log::info("removed ", n, " stale workspace(s) of agent-run processes that are gone, under ",
                    agent::workspace_base());
    po.logprobs = !no_logprobs;
    po.max_context = s.max_context;
    if (!extra_text.empty()) {
      try {
        po.extra = ca::Json::parse(extra_text);
      } catch (const std::exception& e) {
        throw ca::UsageError(std::string("--request-extra: not JSON: ") + e.what());
      }
      if (!po.extra.is_object()) throw ca::UsageError("--request-extra: expected a JSON object");
    }
    if (opt.resume) ca::log::warn("--resume does nothing for agent-run: episodes are samples, each one is new");
    if (s.kernel_check.empty()) s.kernel_check = agent::default_locked_binary("kernel-check", "CA_KERNEL_CHECK");
    if (s.kernel_prof.empty()) s.kernel_prof = agent::default_locked_binary("kernel-prof", "CA_KERNEL_PROF");
    if (!s.judge_urls.empty()) {
      s.judge = std::make_shared<agent::JudgePool>(s.judge_urls);
      s.judge_urls = s.judge->urls();
      if (!s.check_args.empty() || !s.prof_args.empty())
        ca::log::warn("--check-arg/--prof-arg apply to compile only with --judge: the services run with their own options");
    }
    const std::string skill = load_skill(s.skill_path);
    if (std::string why = agent::Sandbox::availability(); !why.empty())
      ca::log::warn("the bash and grep tools will answer with an error: ", why);

    if (policy_spec.rfind("openai:", 0) != 0 && !po.load_weights.empty())
      throw ca::UsageError("--load-weights is for openai: policies (a native: policy is its checkpoint already)");
    if (policy_spec.rfind("native:", 0) != 0 && (po.device != "cpu" || po.dtype != "bf16"))
      ca::log::warn("--policy-device and --policy-dtype apply to native: policies only; ignored for ", policy_spec);
    auto policy = agent::make_policy(policy_spec, po);
    const ca::Json policy_description = policy->describe();
    auto store = ca::open_store_for(opt);
    if (store) s.store_path = store->path();

    ca::RecordReader reader(tasks_file.empty() ? opt.input : tasks_file);
    ca::RecordWriter writer(opt.output);
    ca::log::Progress progress("episodes");  // on a terminal: done/total, rate, time left
    if (progress.enabled())
      if (int64_t n = ca::count_lines(tasks_file.empty() ? opt.input : tasks_file); n > 0) progress.set_total(n * per_task);
    const uint64_t base_seed = opt.seed ? *opt.seed : std::random_device{}() * 0x100000000ull + std::random_device{}();
    if (!opt.seed) ca::log::verbose("seed ", base_seed);


    std::mutex in_mutex, out_mutex;
    ca::Record current;
    std::string current_id;
    int left_of_current = 0;
    int64_t next_seq = 0, next_to_write = 0;
    bool input_done = false;
    std::map<int64_t, ca::Record> finished;
    ca::Counts counts;
    std::map<std::string, int64_t> stops;
    int status = ca::kExitOk;
    std::string fatal;

    // A failed write (the reader closed the output, a full disk) must not escape a worker thread:
    // it is kept, no new episode starts, and it is reported once the workers have stopped.
    std::exception_ptr write_error;  // guarded by out_mutex
    int write_status = ca::kExitOk;
    std::atomic<bool> output_gone{false};
    auto write_ready = [&](bool all) {  // out_mutex held
      if (write_error) return;
      try {
        while (!finished.empty() && (all || finished.begin()->first == next_to_write)) {
          writer.write(finished.begin()->second);
          finished.erase(finished.begin());
          ++next_to_write;
        }
      } catch (const ca::Error& e) {
        write_error = std::current_exception();
        write_status = e.exit_code;
        output_gone = true;
      }
    };
    auto emit = [&](int64_t seq, ca::Record rec) {
      std::lock_guard<std::mutex> lock(out_mutex);
      finished.emplace(seq, std::move(rec));
      write_ready(false);
    };

    // Worker accounting, so an interrupt never waits on a thread blocked reading a slow input:
    // `reading` counts workers in (or waiting for) the input section, `exited` those that returned.
    std::atomic<int> reading{0}, exited{0};
    int64_t episode_errors = 0;  // episodes that ended in stop reason `error` (out_mutex)
    auto worker_loop = [&](int slot) {
      for (;;) {
        agent::EpisodeInput ep;
        int64_t seq;
        {
          struct Reading {
            std::atomic<int>& n;
            explicit Reading(std::atomic<int>& c) : n(c) { ++n; }
            ~Reading() { --n; }
          } in_input(reading);
          std::lock_guard<std::mutex> lock(in_mutex);
          if (agent::g_interrupted || input_done || output_gone) return;
          if (left_of_current == 0) {
            ca::Record rec;
            try {
              if (!reader.next(rec)) {
                input_done = true;
                return;
              }
            } catch (const ca::Error& e) {  // a line that is not JSON breaks the stream
              fatal = e.what();
              status = e.exit_code;
              input_done = true;
              return;
            } catch (const std::exception& e) {
              // The JSON parser's other errors (a number that overflows a double: 1e999) are bad
              // input all the same, named by line.
              fatal = reader.where() + ": not JSON: " + e.what();
              status = ca::kExitBadInput;
              input_done = true;
              return;
            }
            if (agent::g_interrupted) return;  // read while the signal came: not started
            ++counts.read;
            try {
              if (!opt.shard.contains(ca::record_key(rec))) {
                ++counts.other_shard;
                continue;
              }
              ca::get_required<std::string>(rec, "/code");
              auto id = ca::get_optional<std::string>(rec, "/task_id");
              current_id = id ? *id : ca::task_id_for(rec);
              if (!id) rec["task_id"] = current_id;
            } catch (const ca::FieldError& e) {
              try {
                ca::mark_bad_record(rec, e, "agent-run", reader.where(), opt.strict);
              } catch (const ca::Error& fe) {
                fatal = fe.what();
                status = fe.exit_code;
                input_done = true;
                return;
              }
              ++counts.bad;
              emit(next_seq++, rec);
              continue;
            }
            current = rec;
            left_of_current = per_task;
            if (store) {
              std::lock_guard<std::mutex> olock(out_mutex);
              store->put_task(current);
            }
          }
          --left_of_current;
          seq = next_seq++;
          ep.task = current;
          ep.task_id = current_id;
          ep.index = seq;
          ep.seed = base_seed + static_cast<uint64_t>(seq);
          ep.sandbox_uid = first_uid + slot;
        }
        ca::Record out;
        try {
          out = agent::run_episode(ep, *policy, policy_description, s, skill);
        } catch (const std::exception& e) {
          // run_episode keeps what it can; this is for what failed around the loop (the workspace
          // could not be made, the record could not be built).
          const std::string why = agent::valid_text(e.what());
          ca::log::error("task ", ep.task_id, ": episode failed: ", why);
          out = ca::Record{{"task_id", ep.task_id},
                           {"task", ep.task},
                           {"episode", {{"episode_index", ep.index}, {"seed", ep.seed}, {"turns", ca::Json::array()},
                                        {"stop_reason", agent::g_interrupted ? "interrupted" : "error"},
                                        {"error", why}}},
                           {"error", {{"tool", "agent-run"}, {"field", "episode"}, {"reason", why}}}};
        }
        std::string stop = out["episode"]["stop_reason"].get<std::string>();
        ca::log::info("task ", ep.task_id, " episode ", ep.index, ": ", stop, ", ",
                      out["episode"].contains("counts") ? out["episode"]["counts"]["turns"].get<int64_t>()
                                                        : static_cast<int64_t>(0),
                      " turns");
        {
          std::lock_guard<std::mutex> lock(out_mutex);
          ++stops[stop];
          if (stop == "error" || stop == "policy_error") ++counts.failed;
          else ++counts.done;
          if (stop == "error") ++episode_errors;
          progress.tick();
          if (store && out.contains("candidate_id")) {
            try {
              store->import_record(out);
            } catch (const std::exception& e) {
              ca::log::warn("store: ", e.what());
            }
          }
        }
        emit(ep.index, std::move(out));
      }
    };
    auto worker = [&](int slot) {
      try {
        worker_loop(slot);
      } catch (const std::exception& e) {  // never out of a thread (that would abort the process)
        std::lock_guard<std::mutex> lock(out_mutex);
        if (fatal.empty()) fatal = std::string("internal error: ") + e.what();
        if (status == ca::kExitOk) status = ca::kExitInternal;
        output_gone = true;
      }
      ++exited;
    };
    std::vector<std::thread> threads;
    for (int i = 0; i < jobs; ++i) threads.emplace_back(worker, i);
    // After an interrupt, the workers still inside the input section are blocked on a read (the
    // others returned): they are let go, the rest is written and the run closed.
    while (exited.load() < jobs) {
      if (agent::g_interrupted && exited.load() + reading.load() >= jobs) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    const bool all_exited = exited.load() >= jobs;
    for (auto& t : threads) {
      if (all_exited) t.join();
      else t.detach();
    }
    std::unique_lock<std::mutex> final_lock(out_mutex);
    progress.finish();
    // After an interrupt every finished episode is written, even past a gap in the order.
    write_ready(true);
    finished.clear();
    ca::Json by_stop = stops;
    ca::log::info(counts.done + counts.failed, " episodes (", counts.done, " done, ", counts.failed,
                  " failed: policy errors or errors), ", counts.bad, " bad records; stop reasons ", by_stop.dump());
    // The exit status, once, and the same in the store: an interrupt is 128 + its signal; else bad
    // input or an internal error as they happened; else a failed write; else episodes that failed.
    int exit_status = status;
    if (exit_status == ca::kExitOk && write_error) exit_status = write_status;
    if (exit_status == ca::kExitOk && episode_errors > 0) exit_status = ca::kExitInternal;
    if (agent::g_interrupted) exit_status = 128 + (agent::g_signal.load() ? agent::g_signal.load() : SIGINT);
    if (store) store->end_run(exit_status, counts.to_json());
    if (!fatal.empty()) ca::log::error(fatal);
    if (agent::g_interrupted) {
      ca::log::warn("interrupted by ", strsignal(agent::g_signal.load() ? agent::g_signal.load() : SIGINT),
                    ": every finished episode and those in progress (as interrupted) were written");
      if (!all_exited) {
        // A worker is still blocked reading the input and uses this frame: end here, the store
        // closed and the output flushed, before the frame goes.
        store.reset();
        std::cout.flush();
        std::cerr.flush();
        std::_Exit(exit_status);
      }
      return exit_status;
    }
    if (write_error && status == ca::kExitOk) std::rethrow_exception(write_error);
    if (episode_errors > 0 && status == ca::kExitOk)
      ca::log::error(episode_errors, " episode(s) failed (stop reason error); their records, with the "
                                     "trajectory so far and the reason, were written");
    return exit_status;
  });
}
