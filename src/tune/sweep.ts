// `a2av tune`'s rank program: for each size, times the 1-D call under candidate launch plans (block
// counts from one to the fair share, three block sizes, and grid mode) beside the heuristic's plan,
// with uniform splits, and keeps the fastest. Small sizes (up to graphMaxBytes) are timed by replaying
// a CUDA graph of back-to-back calls: eager times there are set by the host's launches, not
// by the plan (2026-12-03, one H200, W = 8, 64 KiB: 4x512 won eagerly, 11.62 against 12.41 µs,
// and lost in a graph, 7.65 against 8x256's 7.07). Rank 0 returns the measured sizes; table.ts
// turns them into a plan table. Timing only: the plans' results are checked by the test suite.
import type { Comm, DeviceBuffer } from '../backends/backend.js';
import { UsageError } from '../errors.js';
import type { RankContext } from '../world/ranks.js';
import { Agreement } from '../collectives/agree.js';
import { InputPattern } from '../bench/data.js';
import { measure, slowestRank } from '../bench/measure.js';
import { captureBatch, timeReplay, usingBatch } from '../bench/rank.js';
import { makeSplits } from '../bench/splits.js';
import type { LaunchPlan } from './plan.js';
import { pickPlan, type MeasuredSize, type PlanProbe, type PlanShape, type Timed } from './table.js';

export interface TuneArg {
  /** Input bytes per rank, ascending. */
  sizes: number[];
  rowBytes: number;
  repeats: number;
  /** Block sizes to try (multiples of 32). */
  threads: number[];
  /** Sizes up to this many bytes per rank are timed in a graph (captureBatch), larger ones eagerly. */
  graphMaxBytes: number;
}

export type TuneReport =
  | { type: 'start'; device: string; shape: PlanShape; sizes: number[] }
  | { type: 'size'; index: number; count: number; size: MeasuredSize; candidates: number };

export interface TuneResult {
  shape: PlanShape;
  sizes: MeasuredSize[];
}

/** Candidate plans for one size: powers of two up to the fair share, and the fair share itself. */
export function candidates(probe: Pick<PlanProbe, 'fairBlocks'>, threads: readonly number[], inputBytes: number): LaunchPlan[] {
  const plans: LaunchPlan[] = [];
  for (const t of threads) {
    const fair = probe.fairBlocks(t);
    // More blocks than 16-byte words per thread in the call cannot help.
    const useful = Math.max(1, Math.min(fair, Math.ceil(inputBytes / (16 * t))));
    const counts = new Set<number>([useful]);
    for (let b = 1; b < useful; b *= 2) counts.add(b);
    for (const b of [...counts].sort((x, y) => x - y)) plans.push({ blocks: b, threads: t });
  }
  // Grid mode (one exchange block, a grid of one-slice blocks, a completion block) with 16-byte rows.
  plans.push({ blocks: 1, threads: 256, grid: { threads: 256 } });
  return plans;
}

const planKey = (p: LaunchPlan): string => `${p.blocks}x${p.threads}${p.grid ? `+grid${p.grid.threads}` : ''}`;

export async function tune(comm: Comm, arg: TuneArg, ctx: RankContext): Promise<TuneResult | undefined> {
  const probe = (comm as unknown as { planProbe?: () => PlanProbe }).planProbe?.();
  if (comm.backend !== 'cuda' || probe === undefined) throw new UsageError(`a2av tune measures the cuda backend's launch plans; this is ${comm.backend}`);
  const lead = comm.rank === 0;
  const w = comm.worldSize;
  const agree = await Agreement.create(comm, Math.max(4, arg.repeats));
  const maxBytes = arg.sizes[arg.sizes.length - 1]!;
  const held: DeviceBuffer[] = [];
  try {
    const all = arg.sizes.map((bytesPerRank) => makeSplits({ kind: 'uniform', worldSize: w, bytesPerRank, rowBytes: arg.rowBytes, seed: 1 }));
    const outBytes = Math.max(...all.map((s) => s.maxRowsReceived)) * arg.rowBytes;
    if (agree.min([comm.freeMemory() - 1.1 * (maxBytes + outBytes)])[0]! < 0) {
      throw new UsageError(`a2av tune: ${(maxBytes / 2 ** 20).toFixed(0)} MiB per rank does not fit every rank's free GPU memory; lower --max`);
    }
    const input = comm.alloc(maxBytes);
    held.push(input);
    const output = await comm.allocSymmetric(Math.max(outBytes, arg.rowBytes));
    held.push(output);
    const inSplits = comm.alloc(8 * w);
    const outSplitsOffsets = comm.alloc(16 * w);
    held.push(inSplits, outSplitsOffsets);
    new InputPattern(1, comm.rank).fill(comm, input, maxBytes);
    const stream = comm.lane(0).stream;
    if (lead) ctx.report({ type: 'start', device: comm.deviceName, shape: probe.shape, sizes: arg.sizes } satisfies TuneReport);
    const sizes: MeasuredSize[] = [];
    for (const [index, splits] of all.entries()) {
      const bytes = splits.rowsPerRank * arg.rowBytes;
      comm.write(inSplits, BigInt64Array.from(splits.rows[comm.rank]!, (n) => BigInt(n)));
      const timing = bytes <= arg.graphMaxBytes ? 'graph' : 'eager';
      const timeOf = async (plan: LaunchPlan): Promise<Timed> => {
        const call = () => void comm.allToAllV({ input, output, inSplits, outSplitsOffsets, rowBytes: arg.rowBytes, sizeHintBytes: bytes, plan, stream });
        const eager = slowestRank(agree, measure(comm, stream, call, { repeats: arg.repeats, agree })).medianUs;
        if (timing === 'eager') return { plan, eager, us: eager };
        const batch = await captureBatch(comm, stream, call, bytes);
        const us = await usingBatch(comm, batch, (b) => timeReplay(comm, agree, stream, { repeats: arg.repeats }, b).medianUs);
        return { plan, eager, us };
      };
      const heuristic = probe.heuristic(bytes, arg.rowBytes);
      const first = await timeOf(heuristic);
      const tried = candidates(probe, arg.threads, bytes).filter((p) => planKey(p) !== planKey(heuristic) && !(p.grid && arg.rowBytes % 16 !== 0));
      const timed: Timed[] = [];
      for (const plan of tried) timed.push(await timeOf(plan));
      // The heuristic again, last: the first size's first timing ran in a process still warming up
      // (2026-12-03, one H200: 40.8 µs at 64 KiB, W = 8, against 12.0 timed later), which made
      // every plan after it look like a gain. It keeps its better figures.
      const again = await timeOf(heuristic);
      const fallback: Timed = { plan: heuristic, eager: Math.min(first.eager, again.eager), us: Math.min(first.us, again.us) };
      const best = pickPlan(fallback, timed);
      const size: MeasuredSize = { bytes, plan: best.plan, us: best.us, defaultUs: fallback.us, timing };
      if (timing === 'graph') Object.assign(size, { eagerUs: best.eager, defaultEagerUs: fallback.eager });
      sizes.push(size);
      if (lead) ctx.report({ type: 'size', index, count: all.length, size, candidates: timed.length + 1 } satisfies TuneReport);
    }
    return lead ? { shape: probe.shape, sizes } : undefined;
  } finally {
    for (const buf of held) comm.free(buf);
    agree.close();
  }
}
