#!/usr/bin/env bash
# The kernel-check golden cases' stdout without what changes from run to run or host to host:
# compile_ms (a timing), cached (whether this host's cubin cache had the bundle), compile_confinement
# (landlock or not: the host kernel's), judged_by (a hash of the rules, options and release), and the CUDA install folder in the -I flags ($CUDA_HOME).
# Kept: everything else, NVRTC's version, its logs and the register counts included (they change with
# the toolkit, which is a change to review, with UPDATE_GOLDEN=1).
exec $GOLDEN_NORM --drop check.compile_ms --drop check.cached --drop check.compile_confinement --drop check.judged_by \
  --sub '"-I[^"]*/include' '"-I<CUDA>/include'
