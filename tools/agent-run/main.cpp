// agent-run: episodes of an LLM agent writing CUDA bundles; one candidate record per episode.
#include <CLI/CLI.hpp>

#include "libcommon/cli.hpp"
#include "libcommon/store.hpp"
#include "tools/agent-run/episode_loop.hpp"
#include "tools/agent-run/options.hpp"
#include "tools/agent-run/policy.hpp"

int main(int argc, char** argv) {
  ca::Cli cli("agent-run",
              "Run agent episodes: an LLM writes a CUDA bundle for each task in a sandboxed workspace, calling "
              "compile/verify/profile; one candidate record (bundle + episode) per episode on stdout.",
              "agent-run --tasks tasks.jsonl --policy openai:http://127.0.0.1:8000/v1 -j 8 | kernel-check | "
              "kernel-prof | reward-calc",
              "kernel-check(1), kernel-prof(1), reward-calc(1), ppo-step(1), run-store(1)");
  cli.add_stream_options();
  ca::agent_run::Options o;
  ca::agent_run::add_options(cli.app(), o);
  // An answer over this (decompressed) is not read: the episode ends as policy_error, its record written.
  cli.app().get_option_group("Policy openai:URL")->add_option("--max-answer-mib", o.po.max_answer_mib,
                       "Largest server answer read, MiB after decompression; a larger one ends the episode")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20))->capture_default_str();

  return cli.run(argc, argv, [&]() -> int {
    ca::agent_run::install_signal_handlers();
    ca::agent_run::finish_options(o, cli.options());
    auto policy = ca::agent_run::make_policy(o.policy_spec, o.po);
    auto store = ca::open_store_for(cli.options());
    if (store) o.s.store_path = store->path();
    return ca::agent_run::run_episodes(o, cli.options(), *policy, store);
  });
}
