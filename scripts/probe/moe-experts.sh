#!/usr/bin/env bash
# The 2-D MoE calls with many experts a rank, as docs/perf.md ("where many experts cost") measures
# them, on the GPU visible: per W and E, dispatch and combine at about 256 MiB a rank of 14 KiB rows
# (vs the same-run 1-D call), then the fixed cost at one 16-byte row a chunk on the copy grid
# (A2AV_MOE_GRID=always) with x_exchange's phases in SM cycles (A2AV_PROBE_CLOCKS). Every size is
# checked against the host before it is timed; a failed line is a failed run.
#   scripts/probe/moe-experts.sh [W...]      (from the package root, after the build; default W: 4 8)
# Logs in $OUT (default ./moe-experts-out), a file a run; the table is printed last.
set -uo pipefail
OUT=${OUT:-./moe-experts-out}
mkdir -p "$OUT"
ranks=("$@")
[ ${#ranks[@]} -gt 0 ] || ranks=(4 8)
fails=0
table=()
bench() {
  local name=$1; shift
  timeout 180 node dist/src/cli.js bench --backend cuda --repeats 3 "$@" > "$OUT/$name.txt" 2>&1
  local rc=$?
  local row
  row=$(grep -A1 '^ *bytes' "$OUT/$name.txt" | tail -1)
  if [ $rc -ne 0 ] || [ -z "$row" ]; then
    fails=$((fails + 1))
    table+=("FAIL  $name (exit $rc): $(grep -m1 -E 'Error|failed' "$OUT/$name.txt" | cut -c1-200)")
  else
    # bytes, time µs, graph µs, vs 1d (eager), graph vs 1d
    table+=("$(printf '%-22s' "$name") $(awk '{n = NF; printf "%s %s  %9s us  graph %9s us  vs 1d %s  graph vs 1d %s", $1, $2, $3, $5, $(n - 3), $(n - 1)}' <<< "$row")")
  fi
  grep '^x_exchange' "$OUT/$name.txt" | tail -1 | sed "s/^/    /" >> "$OUT/clocks.txt"
}
for w in "${ranks[@]}"; do
  for e in 16 64 256; do
    # Rows a (peer, expert) chunk for about 256 MiB a rank of 14336-byte rows.
    n=$(( (256 << 20) / (w * e * 14336) ))
    for op in dispatch combine; do
      bench "w$w-$op-e$e" --ranks "$w" --op "$op" --experts "$e" --rows-per-expert "$n" --align 8 --row-bytes 14336
    done
  done
  for e in 16 64 256; do
    for op in dispatch combine; do
      A2AV_MOE_GRID=always A2AV_PROBE_DEFINES=A2AV_PROBE_CLOCKS bench "w$w-$op-e$e-fixed" --ranks "$w" --op "$op" --experts "$e" --rows-per-expert 1 --align 1 --row-bytes 16
    done
  done
done
printf '%s\n' "${table[@]}"
echo "x_exchange's phases (SM cycles), the last print of each fixed-cost run:"
cat "$OUT/clocks.txt" 2>/dev/null
[ $fails -eq 0 ]
