#!/usr/bin/env bash
# GPU (device) test: confine_gpu.sh on the path of a node without Landlock: Landlock left out
# (CUDA_AGENT_WORKER_CONFINE=landlock), the worker started in its namespace sandbox
# (libcommon/worker/namespace_sandbox.hpp): CUDA's start, IPC-kept tensors, eager and compile timing
# and the filters must work inside it, and the hostile task still gets no network, no /etc/shadow.
export CUDA_AGENT_WORKER_CONFINE=landlock CA_CONFINE_NAMESPACES=1
exec bash "$(dirname "$0")/confine_gpu.sh"
