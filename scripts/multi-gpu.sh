#!/usr/bin/env bash
# a2av against NCCL on one machine with several GPUs, in one call (from the package root, Node.js on
# the PATH; npm is not needed when dist/ is built):
#   1. build (when a TypeScript compiler is installed; else the dist/ that came along is used),
#   2. nvidia-smi topo -m,
#   3. the test suite (ranks as threads: cuda with ranks sharing GPUs, nccl on up to one rank a GPU),
#   4. the conformance suite with one process per rank (a2av launch) on cuda and on nccl, and its
#      two-rank cases with two launchers as the two nodes of one job (one GPU each): init() must
#      pick nccl for a job across nodes,
#   5. the sweep 0.5 MiB .. 4 GiB per rank, cuda and nccl in one table (time, host sync of nccl,
#      ratio to NCCL), uniform and zipf splits, for W = all GPUs, and 2 and 4 where there are more;
#      one process per GPU (A2AV_MG_SWEEP=threads: ranks as threads of one process);
#   6. the MoE dispatch and combine sweeps (16 experts a rank, majorAlign 1 and 16) and the small
#      MoE step, beside the 1-D call of the same bytes,
#   7. the peer-copy ceiling probe, allReduce, the pipeline's arms, the token MoE ops and a2av tune,
#      each against NCCL where it has one (A2AV_MG_OPS picks).
# Logs and JSON go to $OUT (default ./multi-gpu-out); the tables are printed last.
# Knobs: A2AV_MG_WORLDS="8 4" (sweep worlds), A2AV_MG_MAX=4G, A2AV_MG_REPEATS=5, A2AV_MG_SKIP="tests conformance nodes",
# A2AV_MG_VARIANTS="peer-split lane-shares moe-grid" (which variants the variants op runs),
# A2AV_MG_PACK=file.tgz (everything in $OUT, packed at the end), A2AV_MG_GEMM=kernel|cublas|auto (the pipeline's GEMMs),
# A2AV_MG_OPS="ceiling alltoallv dispatch combine allreduce pipeline moe-tokens tune" (which sweeps; ceiling: scripts/probe/peer-ceiling.cu;
# variants (not in the default list): kernel variants off by default (or the control arm of one now on) beside the default, and their tests;
# allreduce: a2av bench allreduce, cuda against nccl; pipeline: a2av bench pipeline, the arms on cuda and nccl;
# moe-tokens: bench --op moe-dispatch|moe-combine; tune: a2av tune, the plan table $OUT/plans.json;
# budget (not in the default list): the sweep under SM budgets, A2AV_MG_BUDGETS="8 16 32 64").
set -uo pipefail
OUT=${OUT:-./multi-gpu-out}
mkdir -p "$OUT"
started=$SECONDS
step() { echo; echo "== $1 ($((SECONDS - started)) s)"; }
rc=0
cli=(node dist/src/cli.js)
skip=" ${A2AV_MG_SKIP:-} "

step build
if [ -x node_modules/.bin/tsc ] && node_modules/.bin/tsc -p . > "$OUT/build.log" 2>&1; then
  echo "built dist/"
elif [ -f dist/src/cli.js ]; then
  echo "no TypeScript compiler here (or it failed: $OUT/build.log); using the dist/ that is present"
else
  echo "no dist/ and no compiler: build first (npm run build)"; exit 1
fi
git rev-parse --short HEAD 2>/dev/null | tee "$OUT/commit.txt" || true

step topology
nvidia-smi --query-gpu=index,name,memory.total,driver_version --format=csv | tee "$OUT/gpu.txt"
nvidia-smi topo -m | tee "$OUT/topo.txt"
gpus=$(nvidia-smi --query-gpu=index --format=csv,noheader | wc -l)
node -e "import('./dist/src/nccl/library.js').then(m => { const why = m.ncclUnavailableReason(); console.log(why ? 'NCCL: ' + why.split('; searched')[0] : 'NCCL ' + m.formatNcclVersion(m.ncclLib().version)); })" | tee "$OUT/nccl.txt"
echo "$gpus GPUs"
[ "$gpus" -ge 2 ] || echo "note: one GPU: nccl runs W=1 only; the sweep compares W=1"

if [[ "$skip" != *" tests "* ]]; then
  step "test suite (ranks as threads)"
  node scripts/run-tests.mjs --test-reporter=tap > "$OUT/test.log" 2>&1 || rc=1
  grep -E '^# (tests|pass|fail|skipped)' "$OUT/test.log"
  grep -E '^\s*not ok' "$OUT/test.log" | head -20
fi

if [[ "$skip" != *" conformance "* ]]; then
  step "conformance, one process per rank"
  seed=${A2AV_SEED:-$RANDOM$RANDOM}
  echo "seed $seed (rerun one case: A2AV_SEED=$seed)"
  for backend in cuda nccl; do
    pass=0 fail=0
    while read -r index ranks name; do
      log="$OUT/conformance-$backend-$index.log"
      if timeout 300 "${cli[@]}" launch -n "$ranks" -- node dist/tests/multi-gpu/conformance-rank.js run "$backend" "$index" "$seed" > "$log" 2>&1; then
        pass=$((pass + 1))
      else
        fail=$((fail + 1)); rc=1
        echo "FAIL $backend: $name ($log)"
        grep -h '"ok":false' "$log" | head -2 | cut -c1-300
      fi
    done < <(node dist/tests/multi-gpu/conformance-rank.js list "$backend" "$gpus")
    echo "$backend: $pass passed, $fail failed"
  done
fi

if [[ "$skip" != *" nodes "* ]] && [ "$gpus" -ge 2 ]; then
  # Two launchers on this host as the two nodes of one job, one GPU each: init() must pick nccl
  # (the job spans nodes) and the conformance cases of two ranks must pass on it.
  step "two nodes on this host, one GPU each: the default backend, conformance"
  token=$(node -e "process.stdout.write(require('node:crypto').randomBytes(32).toString('hex'))")
  seed=${A2AV_SEED:-$RANDOM$RANDOM}
  pass=0 fail=0 port=$((29600 + RANDOM % 300))
  while read -r index ranks name; do
    [ "$ranks" = 2 ] || continue
    port=$((port + 1))
    pids=()
    for node in 0 1; do
      CUDA_VISIBLE_DEVICES=$node A2AV_STORE_TOKEN=$token timeout 300 "${cli[@]}" launch -n 1 --nnodes 2 --node-rank $node --master-port $port -- \
        node dist/tests/multi-gpu/conformance-rank.js run default "$index" "$seed" > "$OUT/nodes-$index-$node.log" 2>&1 &
      pids+=($!)
    done
    ok=1
    for pid in "${pids[@]}"; do wait "$pid" || ok=0; done
    if [ $ok = 1 ] && grep -q '"picked":"nccl"' "$OUT/nodes-$index-0.log"; then
      pass=$((pass + 1))
    else
      fail=$((fail + 1)); rc=1
      echo "FAIL two nodes: $name ($OUT/nodes-$index-*.log)"
      grep -h '"ok":false\|a2av:' "$OUT"/nodes-$index-*.log | head -2 | cut -c1-300
    fi
  done < <(node dist/tests/multi-gpu/conformance-rank.js list nccl 2)
  echo "two nodes (nccl picked by default): $pass passed, $fail failed"
fi

worlds=${A2AV_MG_WORLDS:-$gpus}
if [ -z "${A2AV_MG_WORLDS:-}" ]; then
  for w in 4 2; do [ "$gpus" -gt "$w" ] && worlds="$worlds $w"; done
fi
# One sweep: cuda and nccl in one table, W ranks (one process per GPU, or threads), JSON to $OUT.
sweep() {
  local name=$1 w=$2; shift 2
  local json="$OUT/bench-w$w-$name.json" err="$OUT/bench-w$w-$name.err" status
  local args=(bench --backend cuda,nccl --repeats "${A2AV_MG_REPEATS:-5}" --json "$@")
  echo "W=$w $name"
  if [ "${A2AV_MG_SWEEP:-launch}" = launch ]; then
    # Rank 0 prints the JSON; the launcher prefixes every line with its rank.
    timeout 600 "${cli[@]}" launch -n "$w" -- node dist/src/cli.js "${args[@]}" > "$json.raw" 2> "$err"
    status=$?
    sed -n 's/^\[rank 0\] //p' "$json.raw" > "$json"
    grep -v '^\[rank 0\] ' "$json.raw" >> "$err"
    rm -f "$json.raw"
  else
    timeout 600 "${cli[@]}" "${args[@]}" --ranks "$w" > "$json" 2> "$err"
    status=$?
  fi
  if [ $status -ne 0 ]; then
    rc=1
    echo "bench W=$w $name exited $status:"
    grep -h 'a2av' "$err" | tail -3 | cut -c1-300
  fi
}
ops=" ${A2AV_MG_OPS:-ceiling alltoallv dispatch combine allreduce pipeline moe-tokens tune} "
max=${A2AV_MG_MAX:-4G}
for w in $worlds; do
  if [[ "$ops" == *" alltoallv "* ]]; then
    step "sweep W=$w: all-to-all-v, 0.5 MiB .. $max per rank"
    for splits in uniform zipf; do sweep "$splits" "$w" --min 512K --max "$max" --splits "$splits"; done
  fi
  for op in dispatch combine; do
    [[ "$ops" == *" $op "* ]] || continue
    step "sweep W=$w: MoE $op, 16 experts a rank, 0.5 MiB .. $max per rank"
    for align in 1 16; do sweep "$op-e16-a$align" "$w" --op "$op" --experts 16 --align "$align" --min 512K --max "$max"; done
  done
  if [[ "$ops" == *" budget "* ]]; then
    # Bandwidth against SMs used: the same sweep under SM budgets (a2av bench --max-blocks, cuda only).
    step "sweep W=$w: all-to-all-v under SM budgets (--max-blocks ${A2AV_MG_BUDGETS:-8 16 32 64}), 0.5 MiB .. $max per rank"
    for b in ${A2AV_MG_BUDGETS:-8 16 32 64}; do sweep "uniform-max-blocks-$b" "$w" --min 512K --max "$max" --splits uniform --backend cuda --max-blocks "$b"; done
  fi
  # The small MoE step: 4 rows of 4 KiB per expert per source; its graph µs is per dispatch.
  [[ "$ops" == *" dispatch "* ]] && sweep "dispatch-step" "$w" --op dispatch --experts 16 --rows-per-expert 4 --row-bytes 4096
done

if [[ "$ops" == *" variants "* ]]; then
  # Kernel variants that are off by default until measured (docs/perf.md says what each predicts):
  # each beside the default, then the conformance cases it touches with it on. A2AV_MG_VARIANTS
  # picks (default: all): peer-split and lane-shares (control arms of defaults), moe-grid.
  variants=" ${A2AV_MG_VARIANTS:-peer-split lane-shares moe-grid} "
  if [[ "$variants" == *" peer-split "* ]]; then
    for w in $worlds; do
      step "control A2AV_PEER_SPLIT=never (the shared sweep across GPUs): all-to-all-v W=$w, 32 MiB .. $max per rank"
      for splits in uniform zipf; do A2AV_PEER_SPLIT=never sweep "$splits-shared-sweep" "$w" --min 32M --max "$max" --splits "$splits"; done
    done
    step "A2AV_PEER_SPLIT=always (split on one GPU too): the 1-D and MoE conformance cases (ranks as threads)"
    A2AV_PEER_SPLIT=always A2AV_TEST_FILES=conformance timeout 600 node scripts/run-tests.mjs --test-reporter=tap \
      --test-name-pattern="exchange W|graph replay W|lanes W=|own outcomes|splits errors|MoE" > "$OUT/variant-peer-split-tests.log" 2>&1 || rc=1
    grep -E '^# (tests|pass|fail)' "$OUT/variant-peer-split-tests.log"
  fi
  if [[ "$variants" == *" lane-shares "* ]]; then
    step "control A2AV_LANE_SHARES=0 (grids from the rank's whole share): the lanes conformance cases, without then with lane shares (ranks as threads)"
    for v in 0 1; do
      A2AV_LANE_SHARES=$v A2AV_TEST_FILES=conformance timeout 300 node scripts/run-tests.mjs --test-reporter=tap --test-name-pattern="lanes W=" \
        > "$OUT/variant-lane-shares-$v-tests.log" 2>&1 || rc=1
      echo "A2AV_LANE_SHARES=$v: $(grep -E '^# (pass|fail)' "$OUT/variant-lane-shares-$v-tests.log" | tr '\n' ' ')"
    done
    for w in $worlds; do
      step "control A2AV_LANE_SHARES=0: all-to-all-v W=$w, 0.5 MiB .. $max per rank"
      A2AV_LANE_SHARES=0 sweep "uniform-whole-shares" "$w" --min 512K --max "$max" --splits uniform
    done
  fi
  if [[ "$variants" == *" moe-grid "* ]]; then
    step "control A2AV_MOE_GRID=never (x_fused): MoE at W=8 on GPU 0, never then auto (the default)"
    moe='[{"E":16,"rowsPer":512,"rb":4096},{"E":16,"rowsPer":64,"rb":4096}]'
    for grid in never auto; do
      echo "A2AV_MOE_GRID=$grid"
      CUDA_VISIBLE_DEVICES=0 A2AV_MOE_GRID=$grid timeout 300 node scripts/probe/moe-timing.mjs 8 "$moe" 2>&1 | tee "$OUT/variant-moe-grid-$grid.txt" | grep '^W=' || rc=1
    done
    step "variant A2AV_MOE_GRID=always: the MoE and exchange-plan conformance cases (ranks as threads)"
    A2AV_MOE_GRID=always A2AV_TEST_FILES=conformance timeout 600 node scripts/run-tests.mjs --test-reporter=tap --test-name-pattern="MoE|exchange plans" > "$OUT/variant-moe-grid-tests.log" 2>&1 || rc=1
    grep -E '^# (tests|pass|fail)' "$OUT/variant-moe-grid-tests.log"
  fi
fi

if [[ "$ops" == *" ceiling "* ]] && [ "$gpus" -ge 2 ]; then
  # What SM-driven copies reach between GPUs 0 and 1 against the copy engine (scripts/probe/peer-ceiling.cu).
  step "peer copy ceiling (GPUs 0 and 1)"
  nvcc_bin=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
  if "$nvcc_bin" -O3 -arch=sm_90 -std=c++17 -o "$OUT/peer-ceiling" scripts/probe/peer-ceiling.cu > "$OUT/peer-ceiling.build" 2>&1; then
    timeout 300 "$OUT/peer-ceiling" 256 | tee "$OUT/peer-ceiling.txt" || rc=1
  else
    echo "peer-ceiling did not build: $(tail -2 "$OUT/peer-ceiling.build")"; rc=1
  fi
fi

if [[ "$ops" == *" allreduce "* ]]; then
  # comm.allReduce against NCCL's, one process per GPU, f32 and bf16, 4 KiB .. 256 MiB.
  for w in $worlds; do
    for dtype in f32 bf16; do
      step "allreduce W=$w $dtype: cuda against nccl"
      timeout 600 "${cli[@]}" launch -n "$w" --output-ranks 0 --no-prefix -- node dist/src/cli.js bench allreduce --backend cuda,nccl --dtype "$dtype" \
        > "$OUT/allreduce-w$w-$dtype.txt" 2> "$OUT/allreduce-w$w-$dtype.err" || { rc=1; echo "allreduce W=$w $dtype failed: $(tail -2 "$OUT/allreduce-w$w-$dtype.err")"; }
      cat "$OUT/allreduce-w$w-$dtype.txt"
    done
  done
fi

if [[ "$ops" == *" pipeline "* ]]; then
  # The DLRM-like training step, one lane against two, cuda against nccl, one process per GPU (with a trace).
  for w in $worlds; do
    step "pipeline W=$w: cuda against nccl (GEMMs: ${A2AV_MG_GEMM:-kernel})"
    timeout 600 "${cli[@]}" launch -n "$w" --output-ranks 0 --no-prefix -- node dist/src/cli.js bench pipeline --backend cuda,nccl --gemm "${A2AV_MG_GEMM:-kernel}" --trace "$OUT/pipeline-w$w.trace.json" \
      > "$OUT/pipeline-w$w.txt" 2> "$OUT/pipeline-w$w.err" || { rc=1; echo "pipeline W=$w failed: $(tail -2 "$OUT/pipeline-w$w.err")"; }
    cat "$OUT/pipeline-w$w.txt"
  done
fi

if [[ "$ops" == *" moe-tokens "* ]]; then
  # The token MoE group (DeepSeek-V3's shape), dispatch and combine, cuda against nccl, one process per GPU.
  for w in $worlds; do
    for op in moe-dispatch moe-combine; do
      step "$op W=$w: cuda against nccl"
      timeout 600 "${cli[@]}" launch -n "$w" --output-ranks 0 --no-prefix -- node dist/src/cli.js bench --op "$op" --backend cuda,nccl --repeats 3 \
        > "$OUT/$op-w$w.txt" 2> "$OUT/$op-w$w.err" || { rc=1; echo "$op W=$w failed: $(tail -2 "$OUT/$op-w$w.err")"; }
      cat "$OUT/$op-w$w.txt"
    done
  done
fi

if [[ "$ops" == *" tune "* ]]; then
  # Measured launch plans with one process per GPU, for every world of the sweeps ($OUT/plans.json).
  for w in $worlds; do
    step "tune W=$w (one process per GPU)"
    merge=()
    [ -f "$OUT/plans.json" ] && merge=(--merge "$OUT/plans.json")
    if timeout 600 "${cli[@]}" launch -n "$w" --output-ranks 0 --no-prefix -- node dist/src/cli.js tune ${merge[@]+"${merge[@]}"} -o "$OUT/plans.next.json" \
      > "$OUT/tune-w$w.txt" 2>&1; then
      mv "$OUT/plans.next.json" "$OUT/plans.json"
      grep -A100 '^# a2av tune' "$OUT/tune-w$w.txt"
    else
      rc=1
      echo "tune W=$w failed: $(tail -3 "$OUT/tune-w$w.txt")"
    fi
  done
fi

step tables
if compgen -G "$OUT/bench-*.json" > /dev/null; then node scripts/print-bench.mjs "$OUT"/bench-*.json; else echo "no sweeps in this run"; fi
if [ -n "${A2AV_MG_PACK:-}" ]; then
  # One archive of everything above (a transfer that brings back only a few files loses none of it).
  tar czf "$A2AV_MG_PACK" -C "$(dirname "$OUT")" "$(basename "$OUT")" && echo "packed $OUT into $A2AV_MG_PACK"
fi
exit $rc
