#!/usr/bin/env bash
# The agent-run golden cases' stdout without what changes from run to run or checkout to checkout:
# the episode's and each tool call's wall time (elapsed_s, elapsed_ms), and the source tree's path
# (in the policy file, the judges' and SKILL.md's paths) written as <src>, and SKILL.md's size in a
# listing (the guide grows with the toolchain; what these cases test is the episode, not its length).
exec $GOLDEN_NORM --drop episode.elapsed_s --drop episode.turns.tool_results.elapsed_ms --literal "$CA_SRC" '<src>' \
  --sub 'SKILL\.md  \([0-9]+ KiB\)' 'SKILL.md  (<size> KiB)'
