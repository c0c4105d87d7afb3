#!/usr/bin/env bash
# On a GPU machine with Node.js (npm not required), from the package root after `npm run build`:
#   1. the whole test suite (GPU tests included),
#   2. the benchmark sweep for several rank counts, and the MoE ops at the largest, then a2av tune
#      for the same rank counts (the measured plan table, $OUT/plans.json),
#   3. compute-sanitizer (memcheck, then synccheck) around a short conformance run on cuda
#      (tests/conformance/short-run.ts: 1 to 4 ranks as threads, small sizes),
#   4. the soak on cuda (scripts/soak.mjs, $A2AV_SOAK_CALLS calls, default 20000, 4 ranks),
#   5. the one-GPU MoE stall check (scripts/probe/stall-repro.sh, $A2AV_STALL_RUNS runs, default 4),
#   6. the pipeline's stop check (scripts/probe/pipeline-stop.sh, $A2AV_PIPELINE_RUNS runs, default 4).
# Full logs and JSON go to $OUT (default ./gpu-out); the summaries are printed last. Steps 3 and 4
# are recorded in docs/soak.md.
#   scripts/gpu-check.sh [RANKS...]      default: 2 4 8 ranks on the visible GPUs (the sweep)
# Knobs: A2AV_GPU_SKIP="bench sanitizers" skips steps (tests, bench, tune, sanitizers, soak, stall, pipeline), so the
# steps can run as separate commands; A2AV_SANITIZERS="memcheck synccheck" (the tools to run),
# A2AV_SANITIZER_TIMEOUT_S=540 (each), A2AV_SANITIZER_CASES=moe (only the short run's cases named
# so), COMPUTE_SANITIZER=path; A2AV_SOAK_CALLS=20000.
set -uo pipefail
OUT=${OUT:-./gpu-out}
mkdir -p "$OUT"
ranks=("$@")
[ ${#ranks[@]} -gt 0 ] || ranks=(2 4 8)
skip=" ${A2AV_GPU_SKIP:-} "
rc=0
runs() { [[ "$skip" != *" $1 "* ]]; }

nvidia-smi --query-gpu=index,name,memory.total,driver_version --format=csv | tee "$OUT/gpu.txt"
git rev-parse --short HEAD 2>/dev/null | tee "$OUT/commit.txt" || true

if runs tests; then
  echo "== tests"
  node scripts/run-tests.mjs --test-reporter=tap > "$OUT/test.log" 2>&1 || rc=1
  grep -E '^# (tests|pass|fail|skipped)' "$OUT/test.log"
  grep -E 'not ok|skip' "$OUT/test.log" | head -20
fi

if runs bench; then
  echo "== bench"
  for w in "${ranks[@]}"; do
    for splits in uniform zipf; do
      node dist/src/cli.js bench --backend cuda --ranks "$w" --splits "$splits" --json \
        > "$OUT/bench-w$w-$splits.json" 2> "$OUT/bench-w$w-$splits.err" || echo "bench W=$w $splits failed: $(tail -3 "$OUT/bench-w$w-$splits.err")"
    done
  done
  # MoE at the largest rank count: dispatch and combine beside the 1-D call, and the small step.
  w=${ranks[${#ranks[@]}-1]}
  for moe in "dispatch --align 1" "dispatch --align 16" "combine --align 1" "dispatch --rows-per-expert 4 --row-bytes 4096"; do
    name="moe-w$w-$(echo "$moe" | tr -d ' -' )"
    node dist/src/cli.js bench --backend cuda --ranks "$w" --experts 16 --op $moe --json \
      > "$OUT/bench-$name.json" 2> "$OUT/bench-$name.err" || echo "bench $name failed: $(tail -3 "$OUT/bench-$name.err")"
  done
  node scripts/print-bench.mjs "$OUT"/bench-*.json
fi

if runs tune; then
  # Measured launch plans for these rank counts on this GPU, merged into one table
  # ($OUT/plans.json: copy it into plans/ to ship it, after reading the gains it prints).
  echo "== tune"
  for w in "${ranks[@]}"; do
    merge=()
    [ -f "$OUT/plans.json" ] && merge=(--merge "$OUT/plans.json")
    node dist/src/cli.js tune --ranks "$w" ${merge[@]+"${merge[@]}"} -o "$OUT/plans.next.json" 2> "$OUT/tune-w$w.txt" \
      && mv "$OUT/plans.next.json" "$OUT/plans.json" || { echo "tune W=$w failed: $(tail -2 "$OUT/tune-w$w.txt")"; rc=1; }
    grep -v '^\s*$' "$OUT/tune-w$w.txt" | tail -n +2 | grep -v '^[0-9.]* [KMG]iB:' || true
  done
fi

if runs sanitizers; then
  echo "== compute-sanitizer"
  sanitizer=${COMPUTE_SANITIZER:-$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)}
  "$sanitizer" --version | tail -1 | tee "$OUT/sanitizer-version.txt"
  : > "$OUT/sanitizers.txt"
  # The tool wraps the node process; ranks are its threads. Its findings go to the log file, the
  # run's own lines to .out. Not --force-blocking-launches: each rank's kernel spins until its
  # peers' kernels arrive, so they must run side by side. memcheck also reports device memory
  # still allocated at exit (--leak-check full).
  limit=${A2AV_SANITIZER_TIMEOUT_S:-540}
  for tool in ${A2AV_SANITIZERS:-memcheck synccheck}; do
    extra=()
    [ "$tool" = memcheck ] && extra=(--leak-check full)
    timeout "$limit" "$sanitizer" --tool "$tool" ${extra[@]+"${extra[@]}"} --error-exitcode 97 --launch-timeout 120 \
      --log-file "$OUT/sanitizer-$tool.log" "$(command -v node)" dist/tests/conformance/short-run.js cuda ${A2AV_SANITIZER_CASES:-} > "$OUT/sanitizer-$tool.out" 2>&1
    status=$?
    [ $status -eq 0 ] || rc=1
    {
      echo "$tool: exit $status$([ $status -eq 97 ] && echo ' (the tool found errors)')$([ $status -eq 124 ] && echo " (killed after $limit s)")"
      grep -E 'ERROR SUMMARY|LEAK SUMMARY' "$OUT/sanitizer-$tool.log" | sed 's/^=* */  /'
      grep -E '^(ok|FAILED|short conformance run)' "$OUT/sanitizer-$tool.out" | sed 's/^/  /'
    } | tee -a "$OUT/sanitizers.txt"
  done
fi

if runs soak; then
  echo "== soak"
  calls=${A2AV_SOAK_CALLS:-20000}
  node scripts/soak.mjs --backend cuda --ranks 4 --calls "$calls" --json "$OUT/soak-cuda.json" \
    > "$OUT/soak-cuda.txt" 2> "$OUT/soak-cuda.err" || rc=1
  tail -1 "$OUT/soak-cuda.txt"
fi

if runs stall; then
  # The one-GPU MoE exchange's stall (docs/perf.md): the W = 8 token dispatch loop, $A2AV_STALL_RUNS
  # times (default 4; 6 of 14 stalled before the bounded host copies, none of 14 since).
  echo "== stall check"
  OUT="$OUT/stall" scripts/probe/stall-repro.sh "${A2AV_STALL_RUNS:-4}" | tee "$OUT/stall.txt" | tail -1
  grep -q '^0 of ' "$OUT/stall.txt" || rc=1
fi

if runs pipeline; then
  # The pipeline at its defaults, 2 ranks on GPU 0 (docs/perf.md, "One H200 at 6b80dcd"): 3 of 4
  # runs stopped before step 1 at 6b80dcd; 0ae78fb runs the dense layers once before the first
  # collective for it.
  echo "== pipeline stop check"
  OUT="$OUT/pipeline" scripts/probe/pipeline-stop.sh "${A2AV_PIPELINE_RUNS:-4}" | tee "$OUT/pipeline.txt" | tail -1
  grep -q '^0 of ' "$OUT/pipeline.txt" || rc=1
fi
exit $rc
