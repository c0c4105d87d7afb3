// The driving side of a benchmark sweep: starts the ranks as threads (or, in a process started by
// a launcher, runs this rank's part), turns rank 0's reports into events, and assembles the result.
import { randomBytes } from 'node:crypto';
import type { BackendName } from '../backends/backend.js';
import { runJob } from '../world/job.js';
import type { BenchOp } from './ops.js';
import type { PlanReport, ProgressReport, RowReport, SweepArg, SweepReport, SweepResult, WrongElsewhere } from './rank.js';
import type { SplitsKind } from './splits.js';
import type { BenchResult, BenchRow } from './table.js';
import { UsageError } from '../errors.js';
import { doublingSizes, formatBytes, holdsWholeUnit } from './units.js';
import { WrongResultError } from './verify.js';
import { hostShare } from './host-share.js';

export interface BenchOptions {
  backend: BackendName;
  ranks: number;
  /** Input bytes per rank of the first size; sizes double up to maxBytes, each rounded up to whole rows (never past maxBytes). */
  minBytes: number;
  maxBytes: number;
  splits: SplitsKind;
  rowBytes: number;
  /** What is timed (default alltoallv); the MoE ops take experts per rank and the dispatch's majorAlign (default 1 each). */
  op?: BenchOp;
  experts?: number;
  align?: number;
  /** Every call's SM budget: at most this many thread blocks (the calls' maxBlocks, on cuda). */
  maxBlocks?: number;
  /** Picks the split layouts: the same seed measures the same layouts. */
  seed: number;
  /** Fixed iterations per timed loop; by default enough for a loop of >= 20 ms. */
  iters?: number;
  /** Timed loops per size; the median is reported, with the fastest and slowest. */
  repeats: number;
  timeoutMs?: number;
}

/** Rank 0's reports, as they come. */
export interface BenchEvents {
  onPlan?(plan: PlanReport): void;
  /** Once the plan is known: the result as it will read, without its rows (the rows come by onRow). */
  onHead?(head: BenchResult): void;
  onProgress?(progress: ProgressReport): void;
  onRow?(row: RowReport): void;
}

/**
 * Runs the sweep and returns rank 0's result. In a process started as one rank of a job (a2av
 * launch, torchrun...), the ranks are the job's processes: each runs its part here, and only rank
 * 0 gets events and a result (the others get undefined).
 */
export async function runBench(opts: BenchOptions, events: BenchEvents = {}): Promise<BenchResult | undefined> {
  const date = new Date().toISOString();
  const share = hostShare(opts.backend);
  let device = '';
  // The 1-D call's results keep the keys they always had.
  const moe = opts.op !== undefined && opts.op !== 'alltoallv' ? { op: opts.op, experts: opts.experts ?? 1, align: opts.align ?? 1 } : {};
  const budget = opts.maxBlocks === undefined ? {} : { maxBlocks: opts.maxBlocks };
  // zipf's layouts come from the seed: without it a result could not be rerun or told from another seed's.
  const seed = opts.splits === 'zipf' ? { seed: opts.seed } : {};
  const resultOf = (rows: BenchRow[]): BenchResult =>
    ({ backend: opts.backend, ranks: opts.ranks, ...moe, ...budget, splits: opts.splits, ...seed, rowBytes: opts.rowBytes, device, ...share, date, repeats: opts.repeats, ...(opts.iters === undefined ? {} : { iters: opts.iters }), rows });
  const arg: SweepArg = {
    sizes: wholeRowSizes(opts),
    splits: opts.splits,
    rowBytes: opts.rowBytes,
    op: opts.op,
    experts: opts.experts,
    align: opts.align,
    maxBlocks: opts.maxBlocks,
    seed: opts.seed,
    dataKey: randomBytes(4).readUInt32LE(0),
    iters: opts.iters,
    repeats: opts.repeats,
  };
  const onReport = (_rank: number, message: unknown) => {
    const m = message as SweepReport;
    if (m.type === 'plan') {
      device = m.device;
      events.onPlan?.(m);
      events.onHead?.(resultOf([]));
    } else if (m.type === 'progress') {
      events.onProgress?.(m);
    } else {
      events.onRow?.(m);
    }
  };
  const { rank, result } = await runJob<SweepArg, SweepResult>(
    { backend: opts.backend, ranks: opts.ranks, timeoutMs: opts.timeoutMs, onReport },
    new URL('./rank.js', import.meta.url),
    'sweep',
    arg,
  );
  // Threads: the rank that found a wrong result threw, so runRanks has rejected with its error
  // already; a launched rank whose check passed exits non-zero too when another's failed.
  if (result.stoppedBy) throw stoppedError(result.stoppedBy, rank);
  if (rank !== 0) return undefined;
  return resultOf(result.rows);
}

/** This rank's error when another rank's check failed: every rank of a launched job exits non-zero, not only the finder. */
export function stoppedError(stop: WrongElsewhere, rank: number): WrongResultError {
  return new WrongResultError({ ...stop, reportedBy: rank });
}

function wholeRowSizes({ minBytes, maxBytes, rowBytes }: Pick<BenchOptions, 'minBytes' | 'maxBytes' | 'rowBytes'>): number[] {
  if (!holdsWholeUnit(minBytes, maxBytes, rowBytes))
    throw new UsageError(`bench: no whole number of ${formatBytes(rowBytes)} rows lies between ${formatBytes(minBytes)} and ${formatBytes(maxBytes)} per rank`);
  return doublingSizes(minBytes, maxBytes, rowBytes);
}
