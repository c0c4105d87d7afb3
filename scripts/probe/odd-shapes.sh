#!/usr/bin/env bash
# Shapes the suite and the sweeps rarely use, through the CLI as a user would run them: odd rank
# counts on one GPU, odd row sizes, zipf splits, MoE calls with odd expert counts and alignments,
# token groups off DeepSeek-V3's shape, allReduce at odd counts, the pipeline's tiny shape, and one
# process per rank under a2av launch. Every bench checks each size against a host reference before
# timing it, so a wrong byte is a failed line here.
#   scripts/probe/odd-shapes.sh            (from the package root, after the build; $OUT for logs)
set -uo pipefail
OUT=${OUT:-./odd-shapes-out}
mkdir -p "$OUT"
cli=(node dist/src/cli.js)
fails=0
n=0
run() {
  local name=$1; shift
  n=$((n + 1))
  local started=$SECONDS
  timeout 300 "$@" > "$OUT/$name.out" 2> "$OUT/$name.err"
  local rc=$?
  if [ $rc -eq 0 ]; then
    echo "ok    $name ($((SECONDS - started)) s)"
  else
    fails=$((fails + 1))
    echo "FAIL  $name (exit $rc, $((SECONDS - started)) s): $(grep -v '^\s*$' "$OUT/$name.err" | tail -2 | tr '\n' ' ')"
  fi
}
small=(--repeats 1 --timeout-ms 30000)

for w in 3 5 7; do
  for rb in 7 13 1000 4100; do
    run "a2a-w$w-rb$rb-zipf" "${cli[@]}" bench --backend cuda --ranks $w --row-bytes $rb --splits zipf --seed $((w * rb)) --min 64K --max 8M "${small[@]}"
  done
done
run "a2a-w16-rb33-zipf" "${cli[@]}" bench --backend cuda --ranks 16 --row-bytes 33 --splits zipf --min 64K --max 32M "${small[@]}"
run "a2a-w12-rb14336-896M" "${cli[@]}" bench --backend cuda --ranks 12 --row-bytes 14336 --min 896M --max 896M "${small[@]}"
run "a2a-w6-uniform-big" "${cli[@]}" bench --backend cuda --ranks 6 --min 96M --max 384M "${small[@]}"
for op in dispatch combine roundtrip; do
  run "moe2d-$op-w3-e5-a8" "${cli[@]}" bench --backend cuda --ranks 3 --op $op --experts 5 --align 8 --splits zipf --row-bytes 96 --min 64K --max 16M "${small[@]}"
  run "moe2d-$op-w6-e3-a1-rb7" "${cli[@]}" bench --backend cuda --ranks 6 --op $op --experts 3 --align 1 --row-bytes 7 --min 64K --max 4M "${small[@]}"
done
run "moe2d-dispatch-w5-e64-a16" "${cli[@]}" bench --backend cuda --ranks 5 --op dispatch --experts 64 --align 16 --row-bytes 512 --min 1M --max 64M "${small[@]}"
run "moe2d-dispatch-w12-e17-a16" "${cli[@]}" bench --backend cuda --ranks 12 --op dispatch --experts 17 --align 16 --splits zipf --row-bytes 200 --min 256K --max 32M "${small[@]}"
run "moe2d-roundtrip-w4-e256-a8-rb14336" "${cli[@]}" bench --backend cuda --ranks 4 --op roundtrip --experts 256 --align 8 --row-bytes 14336 --min 64M --max 1G "${small[@]}"
for layout in expanded compact; do
  run "tokens-dispatch-w3-$layout" "${cli[@]}" bench --backend cuda --ranks 3 --op moe-dispatch --layout $layout --num-experts 60 --topk 5 --hidden 1000 --tokens 1,7,300 "${small[@]}"
  run "tokens-combine-w5-$layout" "${cli[@]}" bench --backend cuda --ranks 5 --op moe-combine --layout $layout --num-experts 40 --topk 3 --hidden 2048 --tokens 1,33,513 "${small[@]}"
  run "tokens-dispatch-w6-top1-$layout" "${cli[@]}" bench --backend cuda --ranks 6 --op moe-dispatch --layout $layout --num-experts 6 --topk 1 --hidden 64 --tokens 2,1000 "${small[@]}"
  run "tokens-dispatch-w16-dsv3-$layout" "${cli[@]}" bench --backend cuda --ranks 16 --op moe-dispatch --layout $layout --tokens 1,64 "${small[@]}"
done
for dt in f32 bf16; do
  run "allreduce-w3-$dt" "${cli[@]}" bench allreduce --backend cuda --ranks 3 --dtype $dt --min 4 --max 64M "${small[@]}"
  run "allreduce-w7-$dt" "${cli[@]}" bench allreduce --backend cuda --ranks 7 --dtype $dt --min 12 --max 4M "${small[@]}"
done
run "allreduce-w16-bf16" "${cli[@]}" bench allreduce --backend cuda --ranks 16 --dtype bf16 --min 6 --max 16M "${small[@]}"
run "pipeline-w3-tiny" "${cli[@]}" bench pipeline --backend cuda --ranks 3 --shape tiny --iters 20 --warmup 3 --timeout-ms 60000
run "launch-w3-zipf-rb13" "${cli[@]}" launch -n 3 --output-ranks 0 -- "${cli[@]}" bench --backend cuda --row-bytes 13 --splits zipf --min 4K --max 16M "${small[@]}"
run "launch-w2-dispatch" "${cli[@]}" launch -n 2 --output-ranks 0 -- "${cli[@]}" bench --backend cuda --op dispatch --experts 7 --align 4 --min 64K --max 16M "${small[@]}"
run "launch-w4-allreduce" "${cli[@]}" launch -n 4 --output-ranks 0 -- "${cli[@]}" bench allreduce --backend cuda --dtype bf16 --min 2 --max 8M "${small[@]}"
# Paths of the CLI that only a GPU reaches: two backends in one table, cuBLAS GEMMs, a2av tune.
run "bench-cuda-nccl-w1" "${cli[@]}" bench --backend cuda,nccl --ranks 1 --min 64K --max 4M "${small[@]}"
run "pipeline-w2-cublas" "${cli[@]}" bench pipeline --backend cuda --ranks 2 --shape tiny --gemm cublas --iters 20 --warmup 3
run "tune-w2-small" "${cli[@]}" tune --ranks 2 --min 64K --max 1M -o "$OUT/tune-w2-small.json"

echo "$((n - fails)) of $n passed"
[ $fails -eq 0 ]
