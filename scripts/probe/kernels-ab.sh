#!/usr/bin/env bash
# Two kernel trees timed in one run, alternated (A, B, A, B...), so a kernel change is judged against
# the same GPU's state: this tree's kernels/ (A) and another kernels/ folder (B), each with this
# build's dist/. Each turn runs scripts/probe/moe-timing.mjs (uniform routing, dispatch, combine and
# the 1-D call of the same bytes, eager µs, median of five loops).
#   git archive main kernels | tar x -C /tmp/b     (on a machine with the repository)
#   scripts/probe/kernels-ab.sh /tmp/b/kernels [W] [CONFIGS] [TURNS]
# W: ranks as threads on the visible GPUs (default 8); CONFIGS: moe-timing's JSON (default: 14 KiB
# rows at about 256 MiB a rank, E = 16, 64 and 256); TURNS: rounds of A then B (default 2). Extra
# environment (A2AV_MOE_GRID, A2AV_PROBE_DEFINES...) reaches both. Logs in $OUT (default
# ./kernels-ab-out), a file a turn; the lines of every turn are printed last, A's then B's.
set -uo pipefail
other=${1:?usage: scripts/probe/kernels-ab.sh OTHER_KERNELS_DIR [W] [CONFIGS] [TURNS]}
W=${2:-8}
configs=${3:-'[{"E":16,"rowsPer":146,"rb":14336,"align":8},{"E":64,"rowsPer":36,"rb":14336,"align":8},{"E":256,"rowsPer":9,"rb":14336,"align":8}]'}
turns=${4:-2}
OUT=${OUT:-./kernels-ab-out}
[ -f "$other/exchange.cu" ] || { echo "kernels-ab: $other holds no kernels (exchange.cu)" >&2; exit 2; }
[ -d dist ] || { echo "kernels-ab: build first (npx tsc -p .): dist/ is missing" >&2; exit 2; }
mkdir -p "$OUT"
# B's package root: a copy of dist (the kernels are found from the compiled code's own place,
# src/jit/module.ts kernelsDir), B's kernels, this tree's scripts and packages.
root=$(mktemp -d)
trap 'rm -rf "$root"' EXIT
cp -r dist "$root/dist"
cp -r "$other" "$root/kernels"
ln -s "$PWD/node_modules" "$root/node_modules"
cp -r scripts "$root/scripts"
fails=0
turn() {
  local side=$1 dir=$2 i=$3
  (cd "$dir" && timeout 300 node scripts/probe/moe-timing.mjs "$W" "$configs") > "$OUT/$side$i.txt" 2>&1
  local rc=$?
  [ $rc -eq 0 ] || { fails=$((fails + 1)); echo "FAIL $side$i (exit $rc): $(grep -m1 -E 'Error' "$OUT/$side$i.txt" | cut -c1-200)"; }
}
for i in $(seq 1 "$turns"); do
  turn A "$PWD" "$i"
  turn B "$root" "$i"
done
for side in A B; do
  echo "== $side ($([ $side = A ] && echo "$PWD/kernels" || echo "$other"))"
  for i in $(seq 1 "$turns"); do grep -h '^W=' "$OUT/$side$i.txt" | sed "s/^/  $i: /"; done
done
[ $fails -eq 0 ]
