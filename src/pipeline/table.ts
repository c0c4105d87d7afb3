// `a2av bench pipeline`'s output: one row per (backend, arm), the checks that every arm trained the
// same model to the same bits, and the JSON form of the same.
import { counted, formatMicros } from '../bench/table.js';
import type { ArmResult } from './rank.js';
import type { PipelineResult } from './run.js';
import { digest } from './synth.js';
import { alignColumns } from '../bench/table.js';

export interface PipelineRow extends ArmResult {
  backend: string;
  /** it/s over the same backend's one-lane it/s; null without a one-lane row. */
  vsOneLane: number | null;
  /** it/s over nccl's one-lane it/s (one communicator, splits through the host: TorchRec's way); null without that row. */
  vsNcclOneLane: number | null;
  /** digest of the three checksums: equal rows trained to the same bits. */
  checksum: string;
}

export interface PipelineReportData {
  rows: PipelineRow[];
  /** Why results that must agree do not (empty: they all do). */
  problems: string[];
  notes: string[];
}

/**
 * Rows, and the checks between them: every arm of every backend must end with the same loss,
 * tables and parameters, except nccl past 2 ranks, whose all-reduce sums in NCCL's own order (its
 * arms must still agree with each other).
 */
export function pipelineRows(results: readonly PipelineResult[]): PipelineReportData {
  const nccl = results.find((r) => r.backend === 'nccl')?.arms.find((a) => a.arm === 'one-lane');
  const rows: PipelineRow[] = results.flatMap((r) => {
    const base = r.arms.find((a) => a.arm === 'one-lane');
    return r.arms.map((a) => ({
      backend: r.backend,
      ...a,
      vsOneLane: base ? a.itPerSec / base.itPerSec : null,
      vsNcclOneLane: nccl ? a.itPerSec / nccl.itPerSec : null,
      checksum: digest([a.checksums.loss, a.checksums.tables, a.checksums.params].flatMap((h) => [parseInt(h.slice(0, 8), 16), parseInt(h.slice(8), 16)])).slice(0, 12),
    }));
  });
  const problems: string[] = [];
  const notes: string[] = [];
  const ownOrder = (backend: string) => backend === 'nccl' && (results[0]?.ranks ?? 0) > 2;
  if (results.some((r) => ownOrder(r.backend))) notes.push("nccl's all-reduce sums in its own order past 2 ranks: its rows are compared with each other only");
  // cpu ranks are threads or processes sharing the host's cores with each other and with the
  // exchange itself: what the arms' timings differ by there is scheduling, not overlap.
  if (results.some((r) => r.backend === 'cpu')) notes.push(CPU_NOTE);
  for (const group of [rows.filter((r) => !ownOrder(r.backend)), rows.filter((r) => ownOrder(r.backend))]) {
    const first = group[0];
    for (const r of group.slice(1)) {
      for (const what of ['loss', 'tables', 'params'] as const) {
        if (r.checksums[what] !== first.checksums[what]) problems.push(`${r.backend} ${r.arm}: ${what} checksum ${r.checksums[what]} differs from ${first.backend} ${first.arm}'s ${first.checksums[what]}`);
      }
    }
  }
  for (const r of rows) if (!r.paramsAgree) problems.push(`${r.backend} ${r.arm}: ranks ended with different dense parameters`);
  return { rows, problems, notes };
}

const CPU_NOTE = "cpu: the ranks share the host's cores and run the exchanges themselves, so its rows check the results and their timings compare nothing (vs one-lane included)";

const VS_NCCL = 'vs nccl one-lane';
const COLUMNS: ReadonlyArray<{ title: string; cell: (r: PipelineRow) => string }> = [
  { title: 'backend', cell: (r) => r.backend },
  { title: 'arm', cell: (r) => r.arm },
  { title: 'it/s', cell: (r) => r.itPerSec.toFixed(r.itPerSec < 100 ? 2 : 1) },
  { title: 'step µs', cell: (r) => formatMicros(r.steps.medianUs) },
  { title: 'p10-p90 µs', cell: (r) => `${formatMicros(r.steps.p10Us)}-${formatMicros(r.steps.p90Us)}` },
  { title: 'vs one-lane', cell: (r) => (r.vsOneLane === null ? '-' : `${r.vsOneLane.toFixed(3)}×`) },
  { title: VS_NCCL, cell: (r) => (r.vsNcclOneLane === null ? '-' : `${r.vsNcclOneLane.toFixed(3)}×`) },
  { title: 'compute µs', cell: (r) => formatMicros(r.computeUs) },
  { title: 'exposed comm µs', cell: (r) => formatMicros(r.exposedUs) },
  { title: 'input dist µs', cell: (r) => formatMicros(inputDistUs(r)) },
  { title: 'host blocked µs', cell: (r) => formatMicros(r.hostBlockedUs) },
  { title: 'loss', cell: (r) => r.finalLoss.toPrecision(6) },
  { title: 'checksum', cell: (r) => r.checksum },
];

/** The input dist's time a step (lengths, then ids; median, slowest rank): on a GPU, about what a second lane can hide at most. */
export function inputDistUs(r: Pick<ArmResult, 'phases'>): number {
  return (r.phases['input dist lengths'] ?? 0) + (r.phases['input dist ids'] ?? 0);
}

export function formatPipelineTable(results: readonly PipelineResult[]): string {
  const first = results[0];
  const budget = results.find((r) => r.inputDistBlocks !== undefined)?.inputDistBlocks;
  const s = first.shape;
  const { rows, problems, notes } = pipelineRows(results);
  const withNccl = rows.some((r) => r.vsNcclOneLane !== null);
  const columns = withNccl ? COLUMNS : COLUMNS.filter((c) => c.title !== VS_NCCL);
  const head = [
    `# a2av bench pipeline: ${s.name} (${s.features} features, dim ${s.dim}, ${s.rows} rows a table, batch ${s.batch} a rank, pooling ${s.pooling}, ` +
      `dense ${s.bottom.join('-')} over ${s.top.join('-')}), ${counted(first.ranks, 'rank')}, ${first.device}, ${first.date}`,
    `# ${counted(first.iters, 'timed step')} after ${counted(first.warmup, 'warm-up step')}; each step's figures are its slowest rank's (step, compute and exposed alike); step µs = median, p10-p90 = its spread`,
    ...(budget === undefined ? [] : [`# input dist: at most ${budget} thread blocks per all-to-all (its lane's SM budget; cuda)`]),
    ...results.map((r) => `# ${r.backend} clock: ${r.clock}; GEMMs: ${r.gemm}`),
    ...(withNccl ? ["# vs nccl one-lane = it/s over nccl's one-lane it/s: one communicator, the splits through the host (TorchRec's way today)"] : []),
    '# vs one-lane = it/s over the same backend\'s one-lane it/s; compute µs = the compute stream busy per step (median); ' +
      'exposed comm µs = median of (step − compute): the compute waiting, mostly for collectives',
    '# input dist µs = the input dist of the next batch (lengths, then ids), median per step on its lane: on a GPU, about the most a second lane can take off a step (on cpu the ranks\' own threads do the exchange, so lanes change more than that)',
    '# host blocked µs = the host inside collective calls, mean per step of the slowest rank (cuda: queueing them; nccl: also waiting for the device splits; cpu: the exchange itself): a mean, so a few long waits can put it past the median step µs',
    ...notes.map((n) => (n === CPU_NOTE ? `# ${n}` : `# note: ${n}`)),
    problems.length === 0
      ? `# checksums: every row ended with the same loss, tables and parameters (loss ${rows[0].checksums.loss}, tables ${rows[0].checksums.tables}, params ${rows[0].checksums.params}); checksum = a digest of the three, one per row`
      : `# CHECKSUMS DIFFER: ${problems.join('; ')}`,
  ];
  return [...head, ...alignColumns([columns.map((c) => c.title), ...rows.map((r) => columns.map((c) => c.cell(r)))], [0, 1])].join('\n') + '\n';
}

export function formatPipelineJson(results: readonly PipelineResult[]): string {
  const { rows, problems, notes } = pipelineRows(results);
  const { shape, ranks, device, date, warmup, iters, seed } = results[0];
  // The host's share, where cpu ran (it may not be the first backend of the run).
  const { cores, load } = results.find((r) => r.backend === 'cpu') ?? {};
  const clocks = Object.fromEntries(results.map((r) => [r.backend, r.clock]));
  const gemms = Object.fromEntries(results.map((r) => [r.backend, r.gemm]));
  return JSON.stringify({ op: 'pipeline', shape, ranks, device, date, cores, load, warmup, iters, seed, clocks, gemms, rows, checksumsAgree: problems.length === 0, problems, notes }, null, 2) + '\n';
}
