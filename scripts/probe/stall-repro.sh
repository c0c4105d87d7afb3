#!/usr/bin/env bash
# The one-GPU MoE exchange's stall (docs/perf.md, "A stall in the one-GPU MoE exchange"): the token
# dispatch bench at W = 8 on GPU 0, run RUNS times under the environment given, one line a run
# (its graph µs per token count, or the first rank's timeout), then how many stalled. Logs in $OUT
# (default ./stall-out), a file a run.
#   [A2AV_...=...] scripts/probe/stall-repro.sh [runs=8] [more bench flags, e.g. --layout expanded]
# Exit status 0 (stalled runs are counted, not failed on: gpu-check.sh reads the count), 2 when a
# run failed otherwise. Before the bounded host copies (src/cuda/host-copies.ts) 6 of 14 runs with
# the slice grid launched early stalled (a TimeoutError after --timeout-ms): a rank's read of device
# memory waited for its peers' kernels, which waited for that rank. Since: 0 of 14.
set -uo pipefail
OUT=${OUT:-./stall-out}
mkdir -p "$OUT"
runs=${1:-8}
shift || true
export CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES:-0}
stalled=0
for i in $(seq 1 "$runs"); do
  log="$OUT/stall-$i.txt"
  # 12 s: past a cold kernel cache's compile (the modules' barrier), well short of the default 60 s.
  timeout 60 node dist/src/cli.js bench --op moe-dispatch --backend cuda --ranks 8 --repeats 3 --timeout-ms 12000 \
    --tokens 1,8,32,64,128 --layout compact "$@" > "$log" 2>&1
  rc=$?
  if [ $rc -eq 0 ]; then
    echo "run $i: passed; graph µs $(grep -E '^ +[0-9]+ +cuda' "$log" | awk '{printf "%s:%s ", $1, $5}')"
  elif [ $rc -eq 124 ]; then
    stalled=$((stalled + 1))
    echo "run $i: killed after 60 s with no TimeoutError: a hang"
  elif ! grep -q 'timed out after' "$log"; then
    # Not the stall (no GPU, a bad flag, a wrong result): say so and stop.
    echo "run $i: failed, not a timeout: $(grep -m1 -E 'a2av|Error' "$log" | cut -c1-240)" >&2
    exit 2
  else
    stalled=$((stalled + 1))
    echo "run $i: rc $rc: $(grep -m1 -E 'failed: ' "$log" | cut -c1-240)"
  fi
done
echo "$stalled of $runs runs stalled (${A2AV_PROBE_DEFINES:+A2AV_PROBE_DEFINES=$A2AV_PROBE_DEFINES }${A2AV_EARLY_LAUNCH:+A2AV_EARLY_LAUNCH=$A2AV_EARLY_LAUNCH }${A2AV_MOE_GRID:+A2AV_MOE_GRID=$A2AV_MOE_GRID}$*)"
if [ -n "${A2AV_PROBE_DEFINES:-}" ] && [[ "$A2AV_PROBE_DEFINES" == *WAIT_PRINT* ]]; then
  grep -hE "x (wait|round 2) timeout" "$OUT"/stall-*.txt | sort -u | head -40
fi
