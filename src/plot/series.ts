// Bench results (the JSON `a2av bench --json` writes) as the lines of a bandwidth plot: checked on the
// way in, so a wrong file is named in one line instead of drawing an empty or broken picture.
import type { BenchResult, BenchRow } from '../bench/table.js';
import { formatBytes } from '../bench/units.js';
import { UsageError } from '../errors.js';

/** One bench result and where it came from (a file name, or `bench` for the run just made). */
export interface PlotInput {
  source: string;
  result: BenchResult;
}

export interface Point {
  /** Input bytes per rank. */
  bytes: number;
  /** algbw: input bytes per rank / median time, GB/s (1e9 B/s). */
  gbps: number;
}

export interface Series {
  label: string;
  /** A same-run reference (drawn dashed), not a measured call. */
  reference: boolean;
  /** Which measured series, counted in order, gives the line its colour: a reference takes its run's. */
  colourOf: number;
  points: Point[];
}

export interface Chart {
  /** What every line has in common: device, ranks, splits, row bytes, date. */
  title: string;
  series: Series[];
}

/** Checks parsed JSON is a bench result with rows to draw; `source` names it in the error. */
export function checkResult(value: unknown, source: string): BenchResult {
  const shape = "not an a2av bench result (want the JSON of 'a2av bench --json': backend, ranks and rows of {bytes, timeUs})";
  if (typeof value !== 'object' || value === null) throw new UsageError(`${source}: ${shape}`);
  const result = value as Partial<BenchResult>;
  const described = typeof result.backend === 'string' && typeof result.device === 'string' && typeof result.splits === 'string' &&
    typeof result.ranks === 'number' && typeof result.rowBytes === 'number';
  if (!described || !Array.isArray(result.rows)) {
    throw new UsageError(`${source}: ${shape}`);
  }
  if (result.rows.length === 0) throw new UsageError(`${source}: no rows: the sweep measured no size, nothing to plot`);
  result.rows.forEach((row: Partial<BenchRow>, i) => {
    if (!isPositive(row?.bytes) || !isPositive(row?.timeUs)) {
      throw new UsageError(`${source}: row ${i} has no positive bytes and timeUs: ${shape}`);
    }
  });
  return result as BenchResult;
}

/** Reads a result file's text: JSON that checkResult accepts. */
export function parseResult(text: string, source: string): BenchResult {
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (err) {
    throw new UsageError(`${source}: not JSON (${(err as Error).message}); want the output of 'a2av bench --json'`);
  }
  return checkResult(value, source);
}

/**
 * Fields shown in the title when every input shares them, else beside each line's name. Order is the
 * title's: the machine, then the shape of the call.
 */
const FIELDS: { name: string; value(r: BenchResult): string }[] = [
  { name: 'device', value: (r) => r.device.replace(/ #\d+/g, '') },
  { name: 'ranks', value: (r) => `${r.ranks} rank${r.ranks === 1 ? '' : 's'}` },
  { name: 'op', value: (r) => (r.op === undefined || r.op === 'alltoallv' ? 'all-to-all-v' : `${r.op}, ${r.experts} experts per rank`) },
  { name: 'splits', value: (r) => `${r.splits} splits` },
  { name: 'rowBytes', value: (r) => `${formatBytes(r.rowBytes)} rows` },
  { name: 'date', value: (r) => (r.date ?? '').slice(0, 10) },
];

/**
 * The lines: per input, one per backend (a table comparing backends has rows naming theirs), then
 * the same-run reference of each backend that has one. Several inputs: what tells them apart goes
 * into the labels (their splits, ranks... or, when nothing in the JSON does, the file name).
 */
export function chartOf(inputs: readonly PlotInput[]): Chart {
  if (inputs.length === 0) throw new UsageError('no bench results to plot');
  const shared = FIELDS.filter((f) => new Set(inputs.map((i) => f.value(i.result))).size === 1);
  const differing = FIELDS.filter((f) => !shared.includes(f) && f.name !== 'date');
  const tagOf = (input: PlotInput): string => {
    if (inputs.length === 1) return '';
    const parts = differing.map((f) => f.value(input.result));
    return ` (${parts.length > 0 ? parts.join(', ') : baseName(input.source)})`;
  };
  const series: Series[] = [];
  for (const input of inputs) {
    const tag = tagOf(input);
    const byBackend = groupRows(input.result);
    // A table of backends names each reference's owner only when more than one of them has one.
    const owned = [...byBackend.values()].filter((rows) => rows.some((r) => isPositive(r.refUs))).length > 1;
    const refs: Series[] = [];
    for (const [backend, rows] of byBackend) {
      const colourOf = series.filter((s) => !s.reference).length;
      series.push({ label: `${backend}${tag}`, reference: false, colourOf, points: pointsOf(rows, (r) => r.timeUs) });
      const refRows = rows.filter((r) => isPositive(r.refUs));
      if (refRows.length === 0) continue;
      const kinds = [...new Set(refRows.map((r) => r.ref ?? 'copy'))].join('/');
      refs.push({ label: `${kinds} ref${owned ? ` of ${backend}` : ''}${tag}`, reference: true, colourOf, points: pointsOf(refRows, (r) => r.refUs) });
    }
    series.push(...refs);
  }
  const title = `a2av bench: ${shared.map((f) => f.value(inputs[0].result)).filter((v) => v !== '').join(', ')}`;
  return { title, series };
}

/** Rows by backend, in the order they first appear; a single-backend result's rows under its name. */
function groupRows(result: BenchResult): Map<string, BenchRow[]> {
  const groups = new Map<string, BenchRow[]>();
  for (const row of result.rows) {
    const backend = row.backend ?? result.backend;
    groups.set(backend, [...(groups.get(backend) ?? []), row]);
  }
  return groups;
}

function pointsOf(rows: readonly BenchRow[], micros: (row: BenchRow) => number): Point[] {
  return rows.map((r) => ({ bytes: r.bytes, gbps: r.bytes / micros(r) / 1e3 })).sort((a, b) => a.bytes - b.bytes);
}

/** `docs/results/run/bench-w2.json` → `bench-w2`. */
function baseName(path: string): string {
  return path.replace(/^.*[\\/]/, '').replace(/\.json$/i, '');
}

/** JSON read back has null where a row had NaN. */
function isPositive(x: unknown): x is number {
  return typeof x === 'number' && Number.isFinite(x) && x > 0;
}
