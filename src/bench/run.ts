// The main-thread side of a benchmark sweep: starts the ranks, turns their reports into events,
// and assembles the result.
import { randomBytes } from 'node:crypto';
import type { BackendName } from '../backends/backend.js';
import { runRanks } from '../world/threads.js';
import type { PlanReport, ProgressReport, RowReport, SweepArg, SweepReport, SweepResult } from './rank.js';
import type { SplitsKind } from './splits.js';
import type { BenchResult } from './table.js';
import { doublingSizes } from './units.js';

export interface BenchOptions {
  backend: BackendName;
  ranks: number;
  /** Input bytes per rank of the first size; sizes double up to maxBytes. At least rowBytes. */
  minBytes: number;
  maxBytes: number;
  splits: SplitsKind;
  rowBytes: number;
  /** Picks the split layouts: the same seed measures the same layouts. */
  seed: number;
  /** Fixed iterations per timed loop; by default enough for a loop of >= 20 ms. */
  iters?: number;
  /** Timed loops per size; the median is reported. */
  repeats: number;
  timeoutMs?: number;
}

/** Rank 0's reports, as they come. */
export interface BenchEvents {
  onPlan?(plan: PlanReport): void;
  onProgress?(progress: ProgressReport): void;
  onRow?(row: RowReport): void;
}

export async function runBench(opts: BenchOptions, events: BenchEvents = {}): Promise<BenchResult> {
  const date = new Date().toISOString();
  let device = '';
  const arg: SweepArg = {
    sizes: doublingSizes(opts.minBytes, opts.maxBytes),
    splits: opts.splits,
    rowBytes: opts.rowBytes,
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
    } else if (m.type === 'progress') {
      events.onProgress?.(m);
    } else {
      events.onRow?.(m);
    }
  };
  const results = await runRanks<SweepArg, SweepResult>(
    { backend: opts.backend, ranks: opts.ranks, timeoutMs: opts.timeoutMs, onReport },
    new URL('./rank.js', import.meta.url),
    'sweep',
    arg,
  );
  return { backend: opts.backend, ranks: opts.ranks, splits: opts.splits, rowBytes: opts.rowBytes, device, date, rows: results[0].rows };
}
