#!/usr/bin/env bash
# confine.sh's hostile tasks on the path of a node without Landlock (issue 32: "on GPU nodes without
# bubblewrap ... what the node has, chosen at start and named in the record"): Landlock left out
# (CUDA_AGENT_WORKER_CONFINE=landlock), the filesystem confined by the worker's own user and mount
# namespaces instead, which the hello names ("namespaces"). Every case must hold as with Landlock:
# no /etc/shadow, home, store or other folder; its TMPDIR writable; nothing outlives the worker, and
# a tool killed with kill -9 leaves no folder behind.
export CUDA_AGENT_WORKER_CONFINE=landlock CA_CONFINE_NAMESPACES=1
exec bash "$(dirname "$0")/confine.sh"
