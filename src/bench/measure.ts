// Timing for the sweep: timed loops of device work after a warm-up, and their spread.
import type { Comm, Handle, Stream } from '../backends/backend.js';
import type { Agreement } from '../collectives/agree.js';
import type { Timing } from './table.js';

/** A timed loop should last at least this long, so event resolution and launch jitter vanish in it. */
export const TARGET_LOOP_MS = 20;
const WARMUP_ITERS = 5;
/** Discarded full-length loops before timing, at least this long in all. */
const WARMUP_MS = 50;
const MAX_ITERS = 100_000;
/** Calls whose host wait for the splits is sampled (a fixed count: every rank makes the same calls). */
const SYNC_SAMPLES = 21;

export interface LoopOptions {
  /** Fixed iterations per timed loop; chosen from a warm-up estimate when absent. */
  fixedIters?: number;
  repeats: number;
}

export interface MeasureOptions extends LoopOptions {
  /**
   * Collective: every rank measures, and agrees on the iteration count (the slowest rank's
   * estimate) so all make the same calls. Absent: this rank alone measures.
   */
  agree?: Agreement;
  /**
   * Meet the other ranks (through `agree`) before each timed loop. For work that does not line the
   * ranks up itself (independent copies), so their loops overlap as one exchange would.
   */
  meetEachLoop?: boolean;
  /**
   * Calls queued before each loop's clock starts (default 1): collectives line the ranks up on the
   * device in it. Independent copies must not have one where ranks share a device: a copy engine
   * takes their streams' copies in the order queued, so a later rank's lead-in waits for an earlier
   * rank's whole loop and each clock would time one rank's copies alone.
   */
  leadIn?: number;
}

/**
 * µs per call of `fn`, one sample per timed loop (`repeats` of them), after a warm-up.
 * Iterations: fixed, or enough for TARGET_LOOP_MS by the warm-up's estimate.
 */
export function measure(comm: Comm, stream: Stream, fn: () => void, opts: MeasureOptions): number[] {
  const { agree } = opts;
  const warmMs = comm.timeLoop(stream, WARMUP_ITERS, fn) / WARMUP_ITERS;
  let iters = opts.fixedIters;
  if (iters === undefined) {
    const [estimateMs] = agree ? agree.max([warmMs]) : [warmMs];
    iters = estimateMs > 0 ? Math.min(MAX_ITERS, Math.max(1, Math.ceil(TARGET_LOOP_MS / estimateMs))) : MAX_ITERS;
  }
  // Full-length loops, discarded, until WARMUP_MS have passed on every rank: a fresh process runs
  // slow for a while (JIT, clocks), which five calls do not cover. The count is agreed, so every
  // rank makes the same calls.
  for (let spentMs = 0; spentMs < WARMUP_MS; ) {
    const ms = comm.timeLoop(stream, iters, fn);
    spentMs += agree ? agree.max([ms])[0]! : ms;
  }
  // One lead-in call per loop: the clock starts when every rank is on the device, not when this
  // rank's thread got there (with W ranks in one process, launches queue on the driver).
  const samples: number[] = [];
  for (let r = 0; r < opts.repeats; r++) {
    if (opts.meetEachLoop) agree?.gather([]);
    samples.push((comm.timeLoop(stream, iters, fn, opts.leadIn ?? 1) * 1000) / iters);
  }
  return samples;
}

/**
 * Collective: the collective's timing from every rank's samples. A timed loop ran on every rank
 * at once, so its figure is the slowest rank's; the median and extremes are over the loops.
 */
export function slowestRank(agree: Agreement, samples: readonly number[]): Timing {
  return spread(agree.max(samples));
}

export function spread(samples: readonly number[]): Timing {
  if (samples.length === 0) return { medianUs: NaN, minUs: NaN, maxUs: NaN };
  return { medianUs: median(samples), minUs: Math.min(...samples), maxUs: Math.max(...samples) };
}

/**
 * Median µs per call the host waits for the device splits (nccl), each call waited for before the
 * next, so the figure is the round trip alone, not the previous call's data still in flight.
 */
export function splitsSync(comm: Comm, call: () => Handle): number {
  const samples: number[] = [];
  for (let i = 0; i < SYNC_SAMPLES; i++) {
    const before = comm.splitsSyncUs!;
    const done = call();
    samples.push(comm.splitsSyncUs! - before);
    done.wait();
  }
  return median(samples);
}

export function median(values: readonly number[]): number {
  const s = [...values].sort((a, b) => a - b);
  const mid = s.length >> 1;
  return s.length % 2 ? s[mid] : (s[mid - 1] + s[mid]) / 2;
}
