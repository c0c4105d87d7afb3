#!/usr/bin/env bash
# On a GPU machine with Node.js (npm not required), from the package root after `npm run build`:
# the whole test suite (GPU tests included), then the benchmark sweep for several rank counts.
# Full logs and JSON go to $OUT (default ./gpu-out); the summary tables are printed last.
#   scripts/gpu-check.sh [RANKS...]      default: 2 4 8 ranks on the visible GPUs
set -uo pipefail
OUT=${OUT:-./gpu-out}
mkdir -p "$OUT"
ranks=("$@")
[ ${#ranks[@]} -gt 0 ] || ranks=(2 4 8)

nvidia-smi --query-gpu=index,name,memory.total,driver_version --format=csv | tee "$OUT/gpu.txt"
git rev-parse --short HEAD 2>/dev/null | tee "$OUT/commit.txt" || true

echo "== tests"
node scripts/run-tests.mjs --test-reporter=tap > "$OUT/test.log" 2>&1
test_rc=$?
grep -E '^# (tests|pass|fail|skipped)' "$OUT/test.log"
grep -E 'not ok|skip' "$OUT/test.log" | head -20

echo "== bench"
for w in "${ranks[@]}"; do
  for splits in uniform zipf; do
    node dist/src/cli.js bench --backend cuda --ranks "$w" --splits "$splits" --json \
      > "$OUT/bench-w$w-$splits.json" 2> "$OUT/bench-w$w-$splits.err" || echo "bench W=$w $splits failed: $(tail -3 "$OUT/bench-w$w-$splits.err")"
  done
done
node scripts/print-bench.mjs "$OUT"/bench-*.json
exit $test_rc
