#!/usr/bin/env bash
# The pipeline stopping before its first step on one GPU (docs/perf.md, "One H200 at 6b80dcd"):
# `a2av bench pipeline --backend cuda --ranks 2` (DLRM shape, cuBLAS GEMMs) run RUNS times on GPU 0
# under the environment given, one line a run (its arms' it/s, or the last step it reached), then
# how many stopped. Each run is killed, not asked to stop: the stopped runs outlived SIGTERM.
#   [CUDA_MODULE_LOADING=EAGER] scripts/probe/pipeline-stop.sh [runs=4] [limit_s=90] [more bench flags]
# Logs in $OUT (default ./pipeline-stop-out), a file a run. Exit status 0 (stopped runs are counted),
# 2 when a run failed otherwise.
set -uo pipefail
OUT=${OUT:-./pipeline-stop-out}
mkdir -p "$OUT"
runs=${1:-4}
limit=${2:-90}
shift 2 || shift $# || true
export CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES:-0}
stopped=0
for i in $(seq 1 "$runs"); do
  log="$OUT/pipeline-$i.txt"
  timeout -s KILL "$limit" node dist/src/cli.js bench pipeline --backend cuda --ranks 2 --timeout-ms 20000 "$@" > "$log" 2>&1
  rc=$?
  if [ $rc -eq 0 ]; then
    echo "run $i: ended; it/s $(grep -E '^cuda ' "$log" | awk '{printf "%s:%s ", $2, $3}')"
  elif [ $rc -eq 137 ]; then
    stopped=$((stopped + 1))
    echo "run $i: killed after $limit s; last line: $(grep -E 'pipeline' "$log" | tail -1 | cut -c1-160)"
  else
    echo "run $i: failed (rc $rc): $(grep -m1 -E 'a2av|Error' "$log" | cut -c1-240)" >&2
    exit 2
  fi
done
echo "$stopped of $runs runs stopped (${CUDA_MODULE_LOADING:+CUDA_MODULE_LOADING=$CUDA_MODULE_LOADING }$*)"
