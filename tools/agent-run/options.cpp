// agent-run's options.
#include "tools/agent-run/options.hpp"

#include <CLI/CLI.hpp>

#include "libcommon/errors.hpp"
#include "libcommon/log.hpp"
#include "libcommon/paths.hpp"
#include "libcommon/service.hpp"
#include "tools/agent-run/judge.hpp"
#include "tools/agent-run/sandbox.hpp"
#include "tools/agent-run/toolbox.hpp"
#include "tools/agent-run/workspace.hpp"

namespace ca::agent_run {

namespace {

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

}  // namespace

namespace {
// --judge-secret-file: read once by finish_options (kept out of Options, which callers unpack).
std::string judge_secret_file;
}  // namespace

// long: the option table, one entry per flag in --help's order
void add_options(CLI::App& app, Options& o) {
  auto& [tasks_file, policy_spec, jobs, per_task, first_uid, s, po, extra_text, workspace_dir, no_logprobs, skill_text] = o;
  app.add_option("--tasks", tasks_file, "Task records (JSONL); default: the input (-i, stdin)");
  app.add_option("--policy", policy_spec, "openai:URL (OpenAI-compatible server, e.g. http://host:8000/v1), replay:FILE, or native:DIR (a native checkpoint with its tokenizer.json, or a LoRA adapter folder merged into the base it names, sampled on --policy-device)")
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
  lk->add_option("--judge-secret-file", judge_secret_file,
                 "The judge services' shared secret (the file's first line, chmod 600), sent with every request to "
                 "them; default $CA_JUDGE_SECRET");
  lk->add_option("--locked-timeout", s.locked_timeout_s, "Seconds per compile/verify/profile call")
      ->check(positive_seconds(1e7))->capture_default_str();
  lk->add_option("--skill", s.skill_path, "SKILL.md for the workspace (default: DATA/skill/SKILL.md)");
  auto* np = app.add_option_group("Policy native:DIR");
  np->add_option("--policy-device", po.device, "cpu, cuda or cuda:N: where the native policy samples")->capture_default_str();
  np->add_option("--policy-dtype", po.dtype, "Compute dtype on cuda: bf16 or f32")
      ->check(CLI::IsMember({"bf16", "f32"}))
      ->capture_default_str();
  auto* pg = app.add_option_group("Policy openai:URL");
  pg->add_option("--model", po.model, "Model name (default: the first base model GET /models lists)");
  pg->add_option("--load-weights", po.load_weights,
                 "Checkpoint folder the server loads before any episode (SGLang's /update_weights_from_disk; vLLM: restart it)");
  pg->add_option("--load-lora", po.load_lora,
                 "PEFT adapter folder the server loads before any episode, under a name made of its content "
                 "(ca-lora-<id>), and every request then samples with (needs --server)");
  pg->add_option("--server", po.server,
                 "The server behind the URL, for --load-lora: vllm (/v1/load_lora_adapter; needs "
                 "VLLM_ALLOW_RUNTIME_LORA_UPDATING=True) or sglang (/load_lora_adapter; --enable-lora)")
      ->check(CLI::IsMember({"vllm", "sglang"}));
  pg->add_flag("--keep-loras", po.keep_loras,
               "With --load-lora: leave the server's earlier ca-lora-* adapters loaded (default: unloaded)");
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

}

void finish_options(Options& o, const CommonOptions& opt) {
  auto& [tasks_file, policy_spec, jobs, per_task, first_uid, s, po, extra_text, workspace_dir, no_logprobs, skill_text] = o;
  if (static_cast<int64_t>(first_uid) + jobs - 1 > 2000000000)
    throw ca::UsageError("--sandbox-uid: " + std::to_string(first_uid) + " + " + std::to_string(jobs - 1) +
                         " workers is past the largest uid allowed (2000000000)");
  if (!workspace_dir.empty()) agent_run::set_workspace_base(workspace_dir);
  if (int n = agent_run::clean_stale_workspaces(); n > 0)
    ca::log::info("removed ", n, " stale workspace(s) of agent-run processes that are gone, under ",
                  agent_run::workspace_base());
  po.logprobs = !no_logprobs;
  po.max_context = s.max_context;
  if (!extra_text.empty()) {
    try {
      po.extra = ca::parse_json(extra_text, "--request-extra");
    } catch (const std::exception& e) {
      throw ca::UsageError(std::string("--request-extra: not JSON: ") + e.what());
    }
    if (!po.extra.is_object()) throw ca::UsageError("--request-extra: expected a JSON object");
  }
  opt.resume_does_nothing("episodes are samples, each one is new");
  if (s.kernel_check.empty()) s.kernel_check = agent_run::default_locked_binary("kernel-check", "CA_KERNEL_CHECK");
  if (s.kernel_prof.empty()) s.kernel_prof = agent_run::default_locked_binary("kernel-prof", "CA_KERNEL_PROF");
  if (!judge_secret_file.empty() && s.judge_urls.empty()) throw ca::UsageError("--judge-secret-file needs --judge");
  if (!s.judge_urls.empty()) {
    s.judge = std::make_shared<agent_run::JudgePool>(s.judge_urls, ca::read_judge_secret(judge_secret_file, "--judge-secret-file"));
    s.judge_urls = s.judge->urls();
    if (!s.check_args.empty() || !s.prof_args.empty())
      ca::log::warn("--check-arg/--prof-arg apply to compile only with --judge: the services run with their own options");
  }
  skill_text = load_skill(s.skill_path);
  if (std::string why = agent_run::Sandbox::availability(); !why.empty())
    ca::log::warn("the bash and grep tools will answer with an error: ", why);

  if (policy_spec.rfind("openai:", 0) != 0 && !po.load_weights.empty())
    throw ca::UsageError("--load-weights is for openai: policies (a native: policy is its checkpoint already)");
  if (policy_spec.rfind("openai:", 0) != 0 && !po.load_lora.empty())
    throw ca::UsageError("--load-lora is for openai: policies (a native: policy takes the adapter folder itself: native:ADAPTER)");
  if (!po.load_lora.empty() && po.server.empty())
    throw ca::UsageError("--load-lora needs --server vllm or --server sglang: the two load an adapter at different "
                         "paths and select it differently in a request");
  if (policy_spec.rfind("openai:", 0) != 0 && !po.server.empty())
    throw ca::UsageError("--server is for openai: policies");
  if (po.load_lora.empty() && po.keep_loras) throw ca::UsageError("--keep-loras needs --load-lora");
  if (!po.load_weights.empty() && po.server == "vllm")
    throw ca::UsageError("--load-weights: vLLM has no endpoint that loads a checkpoint from disk; restart it on the "
                         "checkpoint, or train a LoRA adapter and use --load-lora");
  if (policy_spec.rfind("native:", 0) != 0 && (po.device != "cpu" || po.dtype != "bf16"))
    ca::log::warn("--policy-device and --policy-dtype apply to native: policies only; ignored for ", policy_spec);
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


}  // namespace ca::agent_run
