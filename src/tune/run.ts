// The driving side of `a2av tune`: ranks as threads on the visible GPUs (or, in a launched process,
// this rank's part), rank 0's measurements turned into a plan table (table.ts), merged into an
// existing table when asked, and a short report of what each size gained over the heuristic.
import { runJob } from '../world/job.js';
import { formatBytes } from '../bench/units.js';
import { cudaDeviceCount, cudaUnavailableReason } from '../cuda/probe.js';
import { UsageError } from '../errors.js';
import type { TuneArg, TuneReport, TuneResult } from './sweep.js';
import { bucketize, EAGER_SLACK, EAGER_SLACK_US, TABLE_FORMAT, type PlanShape, type PlanTable } from './table.js';

export interface TuneOptions extends TuneArg {
  ranks: number;
  /** Lanes of the communicator the plans are measured on (they apply to communicators with as many). */
  lanes?: number;
  timeoutMs?: number;
  /** What the table records as the command that made it. */
  command: string;
}

/** UsageError where no GPU is visible: tune times the cuda backend only (init()'s advice to use cpu does not apply). */
export function requireTuneGpu(): void {
  if (cudaDeviceCount() === 0) {
    throw new UsageError(`tune times the cuda backend's launch plans and needs a GPU: ${(cudaUnavailableReason() ?? 'none visible').split(':')[0]}`);
  }
}

/**
 * Runs the sweep; rank 0 gets the table, the other ranks of a launched job undefined. Throws
 * UsageError where no GPU is visible.
 */
export async function runTune(opts: TuneOptions, onReport: (r: TuneReport) => void = () => {}): Promise<{ table: PlanTable; result: TuneResult } | undefined> {
  requireTuneGpu();
  const arg: TuneArg = { sizes: opts.sizes, rowBytes: opts.rowBytes, repeats: opts.repeats, threads: opts.threads, graphMaxBytes: opts.graphMaxBytes };
  const report = (_rank: number, m: unknown) => onReport(m as TuneReport);
  const { result } = await runJob<TuneArg, TuneResult | undefined>(
    { backend: 'cuda', ranks: opts.ranks, lanes: opts.lanes, timeoutMs: opts.timeoutMs, onReport: report },
    new URL('./sweep.js', import.meta.url),
    'tune',
    arg,
  );
  if (result === undefined) return undefined;
  const table: PlanTable = {
    format: TABLE_FORMAT,
    measured: { date: new Date().toISOString(), command: opts.command },
    entries: bucketize(result.shape, result.sizes),
  };
  return { table, result };
}

/**
 * `into`'s entries of other shapes than `shape` (the one tuned), then `table`'s: re-tuning a shape
 * replaces its entries, all of them even where the new table has none (the heuristic was as fast
 * at every size), and keeps the rest of the file, with where its figures came from
 * (`measured.kept`: `into`'s record, and those it kept).
 */
export function mergeTables(into: PlanTable, table: PlanTable, shape: PlanShape): PlanTable {
  const same = (a: PlanShape, b: PlanShape) => a.gpu === b.gpu && a.gpus === b.gpus && a.world === b.world && a.ranksPerGpu === b.ranksPerGpu && a.lanes === b.lanes;
  const kept = into.entries.filter((e) => !same(shape, e));
  const measured = { ...table.measured };
  if (kept.length > 0 && into.measured !== undefined) {
    const { kept: older, ...record } = into.measured;
    measured.kept = [record, ...(older ?? [])];
  }
  return { format: TABLE_FORMAT, measured, entries: [...kept, ...table.entries] };
}

/** One line per size: the plan kept, its time and the heuristic's. */
export function formatTune(result: TuneResult): string {
  const { shape } = result;
  const lines = [`# a2av tune: ${shape.gpu}, ${shape.gpus} GPU(s), W=${shape.world}, ${shape.ranksPerGpu} rank(s) per GPU, blocks shared by ${shape.lanes} lane(s); µs per call, median`];
  lines.push(`${'bytes'.padStart(9)}  ${'timed'.padEnd(5)}  ${'plan'.padEnd(18)}  ${'µs'.padStart(9)}  ${'heuristic µs'.padStart(12)}  gain   eager µs (heuristic)`);
  for (const s of result.sizes) {
    const plan = `${s.plan.blocks}x${s.plan.threads}${s.plan.grid ? ` grid ${s.plan.grid.threads}` : ''}`;
    const eager = s.eagerUs !== undefined && s.defaultEagerUs !== undefined ? `   ${s.eagerUs.toFixed(2)} (${s.defaultEagerUs.toFixed(2)})` : '';
    lines.push(
      `${formatBytes(s.bytes).padStart(9)}  ${s.timing.padEnd(5)}  ${plan.padEnd(18)}  ${s.us.toFixed(2).padStart(9)}  ${s.defaultUs.toFixed(2).padStart(12)}  ${(s.defaultUs / s.us).toFixed(2)}x${eager}`,
    );
  }
  lines.push(
    `timed: graph = device µs per call in a replayed CUDA graph of back-to-back calls, kept only where its eager time is within ${EAGER_SLACK * 100}% (or ${EAGER_SLACK_US} µs) of the heuristic's; eager = calls launched one by one`,
  );
  return lines.join('\n') + '\n';
}
