#!/bin/bash
# judge-node.sh: the judge services of one node with one command: a kernel-check and a kernel-prof
# service per visible GPU (tools/kernel-check/SERVICE.md), the URLs written to a file once every
# one answers its health check; SIGTERM or SIGINT stops them all cleanly (requests in flight are
# answered, each store run closed with 143) and publishes their stores next to the URL file.
#
#   examples/judge-node.sh --urls /shared/judges/$(hostname).urls [--store-dir DIR]
#       [--bind 127.0.0.1 | --bind 0.0.0.0 --secret-file ~/.judge-secret]
#       [--check-port 7100] [--prof-port 7200] [-- extra kernel-check/kernel-prof options]
#   agent-run ... --judge "$(paste -sd, /shared/judges/*.urls)" --judge-secret-file ~/.judge-secret
#
# The services bind 127.0.0.1 unless --bind names another address; then they are started --public
# and need the shared secret (--secret-file FILE, chmod 600, or CA_JUDGE_SECRET), which every
# request, the health checks here included, carries (SERVICE.md, "Security model"). Tasks come from
# the services' own --tasks (pass it after --): clients' task code is refused.
#
# Ports are the base + the GPU ordinal. GPUs: the ordinals CUDA_VISIBLE_DEVICES leaves visible
# (Slurm sets it), else every GPU nvidia-smi lists. CHECK_ARGS / PROF_ARGS: options for one tool.
set -euo pipefail
urls_file= store_dir= bind=127.0.0.1 kc_base=7100 kp_base=7200 secret_file=
while [[ $# -gt 0 ]]; do
  case $1 in
    --urls) urls_file=$2; shift 2 ;;
    --store-dir) store_dir=$2; shift 2 ;;
    --bind) bind=$2; shift 2 ;;
    --secret-file) secret_file=$2; shift 2 ;;
    --check-port) kc_base=$2; shift 2 ;;
    --prof-port) kp_base=$2; shift 2 ;;
    --) shift; break ;;
    *) echo "judge-node.sh: unknown option $1" >&2; exit 1 ;;
  esac
done
[[ -n $urls_file ]] || { echo "judge-node.sh: --urls FILE is required" >&2; exit 1; }
host=$(hostname -f 2>/dev/null || hostname)
# The secret goes to the services by file or environment, never on a command line (any user of the
# node reads those in /proc). The health checks below need none: health answers "up" to anyone.
access=()
[[ -n $secret_file ]] && access+=(--secret-file "$secret_file")
case $bind in
  127.*|localhost|::1|'[::1]') host=127.0.0.1 ;;
  *)  # reachable from other nodes: on purpose, and only with the shared secret
    [[ -n $secret_file || -n ${CA_JUDGE_SECRET:-} ]] || { echo "judge-node.sh: --bind $bind needs --secret-file FILE (or CA_JUDGE_SECRET)" >&2; exit 1; }
    access+=(--public) ;;
esac
local_dir=$(mktemp -d "${SLURM_TMPDIR:-${TMPDIR:-/tmp}}/ca-judge.XXXXXX")
if [[ -n ${CUDA_VISIBLE_DEVICES:-} ]]; then
  n=$(awk -F, '{print NF}' <<< "$CUDA_VISIBLE_DEVICES")
else
  n=$(nvidia-smi -L | wc -l)
fi
[[ $n -gt 0 ]] || { echo "judge-node.sh: no GPU visible" >&2; exit 3; }
pids=() urls=()
for ((g = 0; g < n; g++)); do
  # shellcheck disable=SC2086  # the *_ARGS variables hold options
  kernel-check --serve "$bind:$((kc_base + g))" "${access[@]}" --gpus "$g" --store "$local_dir/check-gpu$g.db" ${CHECK_ARGS:-} "$@" \
    > "$local_dir/check-gpu$g.out" 2> "$local_dir/check-gpu$g.log" &
  pids+=($!)
  # shellcheck disable=SC2086
  kernel-prof --serve "$bind:$((kp_base + g))" "${access[@]}" --gpus "$g" --store "$local_dir/prof-gpu$g.db" ${PROF_ARGS:-} "$@" \
    > "$local_dir/prof-gpu$g.out" 2> "$local_dir/prof-gpu$g.log" &
  pids+=($!)
  urls+=("http://$host:$((kc_base + g))" "http://$host:$((kp_base + g))")
done
stop() { kill -TERM "${pids[@]}" 2>/dev/null || true; }
trap stop TERM INT
for u in "${urls[@]}"; do
  for _ in $(seq 900); do curl -fsS -m 2 "$u/v1/health" > /dev/null 2>&1 && break; sleep 1; done
  curl -fsS -m 2 "$u/v1/health" > /dev/null || { echo "judge-node.sh: $u does not answer; logs in $local_dir" >&2; stop; exit 3; }
done
printf '%s\n' "${urls[@]}" > "$urls_file.tmp" && mv "$urls_file.tmp" "$urls_file"
echo "judge-node.sh: ${#urls[@]} services up on $host (${urls[*]}); logs in $local_dir" >&2
status=0
for p in "${pids[@]}"; do wait "$p" || status=$?; done    # a signal to us ends a wait early:
for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done  # then wait for the services' clean stop
rm -f "$urls_file"
# Publish: each store through SQLite's backup API (`run-store copy`: a killed service's -wal content
# included, the copy verified, then renamed into place), each log copied whole. The local folder is
# removed only when every copy succeeded; otherwise it stays, is named, and the exit status is 3.
dest=${store_dir:-$(dirname "$urls_file")}
node=$(hostname -f 2>/dev/null || hostname)  # the node's name, whatever address the services bound
published=1
for f in "$local_dir"/*.db; do
  [[ -e $f ]] || continue
  if ! "${RUN_STORE:-run-store}" copy "$f" "$dest/$node-$(basename "$f")"; then
    echo "judge-node.sh: could not publish the store $f to $dest" >&2
    published=0
  fi
done
for f in "$local_dir"/*.log; do
  [[ -e $f ]] || continue
  out="$dest/$node-$(basename "$f")"
  if ! { cp "$f" "$out.tmp.$$" && sync "$out.tmp.$$" && mv "$out.tmp.$$" "$out"; }; then
    rm -f "$out.tmp.$$"
    echo "judge-node.sh: could not publish the log $f to $dest" >&2
    published=0
  fi
done
if [[ $published != 1 ]]; then
  echo "judge-node.sh: publishing failed; the stores and logs are kept in $local_dir" >&2
  exit 3
fi
rm -rf "$local_dir"
exit 0
