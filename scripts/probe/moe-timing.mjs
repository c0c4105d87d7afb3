#!/usr/bin/env node
// The probe behind docs/perf.md's first MoE figures: W ranks as threads on the visible GPUs,
// uniform routing (rowsPer rows to each expert of each peer), dispatch, combine and the 1-D call of
// the same bytes timed back to back (device events, median of 5 loops), and in graphs of 20 calls
// up to 4 MiB per rank.
//   node scripts/probe/moe-timing.mjs 2 '[{"E":16,"rowsPer":4,"rb":4096},{"E":16,"rowsPer":2048,"rb":4096}]'
// A config may give "maxBlocks" (the calls' SM budget: with at most half the resident share, the
// next call's kernel is launched early and its exchange overlaps this call's copy).
// A2AV_PROBE_DEFINES=A2AV_PROBE_NO_COPY times every call without its data (the kernels' exchange and
// completion alone; results are then wrong by design; the 1-D call's a2av_copy too),
// A2AV_PROBE_STAMPS prints, every 16th call of rank 0, when each kernel of the call began after its
// exchange did (kernels/probe-clocks.cuh), A2AV_PROBE_XF_BLOCK0_POLL has block 0 of
// x_fused alone poll the packets and the other blocks wait on its flag; A2AV_PROBE_ONLY=dg,oneg picks timings,
// A2AV_PROBE_ITERS fixes the calls per loop, A2AV_MOE_FUSED=0 takes the three-kernel MoE path,
// A2AV_MOE_GRID=never|always (ranks on one GPU): x_fused for every call, or x_copy_slices (two 4 KiB
// slices a block) for every call; the default takes x_copy_slices from 16 MiB of output.
import { runRanks } from '../../dist/src/world/threads.js';

const W = Number(process.argv[2] ?? 8);
const configs = JSON.parse(process.argv[3] ?? '[{"E":16,"rowsPer":4,"rb":4096}]');
const rows = await runRanks({ backend: 'cuda', ranks: W, timeoutMs: Number(process.env.A2AV_TIMEOUT_MS ?? 30_000) }, new URL('./moe-timing-rank.mjs', import.meta.url), 'timing', { configs });
const f = (x) => (x === undefined || Number.isNaN(x) ? '-' : x.toFixed(2));
for (const [i, x] of rows[0].entries()) {
  const budget = configs[i].maxBlocks === undefined ? '' : ` maxBlocks=${configs[i].maxBlocks}`;
  console.log(
    `W=${W} E=${x.E} rows/expert/source=${x.rowsPer} rowBytes=${x.rb} align=${x.align}${budget} ${x.MiB.toFixed(2)} MiB/rank: ` +
      `dispatch ${f(x.d)} µs (graph ${f(x.dg)}), combine ${f(x.c)} (graph ${f(x.cg)}), 1-D ${f(x.one)} (graph ${f(x.oneg)}); ` +
      `move ${f(x.mv)} (graph ${f(x.mvg)}); 1-D/dispatch ${(x.one / x.d).toFixed(3)}, 1-D/combine ${(x.one / x.c).toFixed(3)}`,
  );
}
