// The benchmark's result: the JSON form and an aligned text table of the same rows.
import { formatBytes } from './units.js';

export interface BenchRow {
  /** Input bytes per rank (whole rows). */
  bytes: number;
  /** Eager calls, back to back: median µs per call (slowest rank). */
  timeUs: number;
  /** The same call replayed from a captured graph. */
  graphUs: number;
  /** bytes / timeUs (eager), in GB/s (1e9 B/s). */
  algbwGBps: number;
  /** algbw × (W−1)/W: the part that crosses between ranks (nccl-tests' convention). */
  busbwGBps: number;
  /** The device's own copy of the bytes all ranks on it move, same run. */
  refUs: number;
  /** refUs / timeUs: >= 1 means the all-to-all-v beat the copy. */
  refRatio: number;
}

export interface BenchResult {
  backend: string;
  ranks: number;
  splits: string;
  rowBytes: number;
  device: string;
  /** ISO 8601, when the sweep started. */
  date: string;
  rows: BenchRow[];
}

/** Derives the bandwidth columns from the measured times. */
export function makeRow(ranks: number, bytes: number, timeUs: number, graphUs: number, refUs: number): BenchRow {
  const algbwGBps = bytes / timeUs / 1e3;
  return { bytes, timeUs, graphUs, algbwGBps, busbwGBps: (algbwGBps * (ranks - 1)) / ranks, refUs, refRatio: refUs / timeUs };
}

interface Column {
  title: string;
  cell(row: BenchRow): string;
}

const COLUMNS: Column[] = [
  { title: 'bytes', cell: (r) => formatBytes(r.bytes) },
  { title: 'time µs', cell: (r) => formatMicros(r.timeUs) },
  { title: 'graph µs', cell: (r) => formatMicros(r.graphUs) },
  { title: 'algbw GB/s', cell: (r) => r.algbwGBps.toFixed(1) },
  { title: 'busbw GB/s', cell: (r) => r.busbwGBps.toFixed(1) },
  { title: 'ref µs', cell: (r) => formatMicros(r.refUs) },
  { title: 'ref ratio', cell: (r) => r.refRatio.toFixed(2) },
];

/** Two decimals below 1000 µs, one above: enough digits to compare runs, no noise digits. */
export function formatMicros(us: number): string {
  return us.toFixed(us < 1000 ? 2 : 1);
}

/** A one-line description of the run, then the columns right-aligned. */
export function formatTable(result: BenchResult): string {
  const head = `# a2av bench: ${result.backend}, ${result.ranks} rank${result.ranks === 1 ? '' : 's'}, ${result.splits} splits, ` +
    `${result.rowBytes}-byte rows, ${result.device}, ${result.date}`;
  const cells = [COLUMNS.map((c) => c.title), ...result.rows.map((r) => COLUMNS.map((c) => c.cell(r)))];
  const widths = COLUMNS.map((_, i) => Math.max(...cells.map((line) => line[i].length)));
  const lines = cells.map((line) => line.map((cell, i) => cell.padStart(widths[i])).join('  '));
  return [head, ...lines].join('\n') + '\n';
}

export function formatJson(result: BenchResult): string {
  return JSON.stringify(result, null, 2) + '\n';
}
