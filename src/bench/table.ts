// The benchmark's result: the JSON form and an aligned text table of the same rows.
import { formatBytes } from './units.js';

export interface BenchRow {
  /** Input bytes per rank (whole rows). */
  bytes: number;
  /** Eager calls, back to back: median µs per call (slowest rank). */
  timeUs: number;
  /** The same call replayed from a captured graph; NaN (null in JSON) where the backend cannot capture (nccl). */
  graphUs: number;
  /** bytes / timeUs (eager), in GB/s (1e9 B/s). */
  algbwGBps: number;
  /** algbw × (W−1)/W: the part that crosses between ranks (nccl-tests' convention). */
  busbwGBps: number;
  /** The device's own copy of the bytes all ranks on it move, same run. */
  refUs: number;
  /** refUs / timeUs: >= 1 means the all-to-all-v beat the copy. */
  refRatio: number;
  /** nccl only: median µs the host waits per call for the device splits (copy to host, count exchange). */
  hostSyncUs?: number;
  /** Tables of several backends (compareBackends): whose row this is. */
  backend?: string;
  /** Tables of several backends: NCCL's time at this size / this row's time (> 1: faster than NCCL). */
  vsNccl?: number;
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
export function makeRow(ranks: number, bytes: number, timeUs: number, graphUs: number, refUs: number, hostSyncUs?: number): BenchRow {
  const algbwGBps = bytes / timeUs / 1e3;
  const row: BenchRow = { bytes, timeUs, graphUs, algbwGBps, busbwGBps: (algbwGBps * (ranks - 1)) / ranks, refUs, refRatio: refUs / timeUs };
  if (hostSyncUs !== undefined) row.hostSyncUs = hostSyncUs;
  return row;
}

interface Column {
  title: string;
  cell(row: BenchRow): string;
  /** Shown only when some row has this field. */
  optional?: keyof BenchRow;
}

const COLUMNS: Column[] = [
  { title: 'bytes', cell: (r) => formatBytes(r.bytes) },
  { title: 'backend', cell: (r) => r.backend ?? '-', optional: 'backend' },
  { title: 'time µs', cell: (r) => formatMicros(r.timeUs) },
  { title: 'graph µs', cell: (r) => formatMicros(r.graphUs) },
  { title: 'sync µs', cell: (r) => formatMicros(r.hostSyncUs), optional: 'hostSyncUs' },
  { title: 'algbw GB/s', cell: (r) => r.algbwGBps.toFixed(1) },
  { title: 'busbw GB/s', cell: (r) => r.busbwGBps.toFixed(1) },
  { title: 'ref µs', cell: (r) => formatMicros(r.refUs) },
  { title: 'ref ratio', cell: (r) => r.refRatio.toFixed(2) },
  { title: 'vs nccl', cell: (r) => (r.vsNccl === undefined ? '-' : r.vsNccl.toFixed(2)), optional: 'vsNccl' },
];

/** Two decimals below 1000 µs, one above: enough digits to compare runs, no noise digits. '-' for none. */
export function formatMicros(us: number | null | undefined): string {
  if (typeof us !== 'number' || !Number.isFinite(us)) return '-';
  return us.toFixed(us < 1000 ? 2 : 1);
}

/** A one-line description of the run, then the columns right-aligned. */
export function formatTable(result: BenchResult): string {
  let head = `# a2av bench: ${result.backend}, ${result.ranks} rank${result.ranks === 1 ? '' : 's'}, ${result.splits} splits, ` +
    `${result.rowBytes}-byte rows, ${result.device}, ${result.date}`;
  const columns = COLUMNS.filter((c) => c.optional === undefined || result.rows.some((r) => r[c.optional!] !== undefined));
  const notes: string[] = [];
  if (columns.some((c) => c.optional === 'vsNccl')) notes.push("vs nccl = NCCL's time / this row's time (> 1: faster than NCCL)");
  if (columns.some((c) => c.optional === 'hostSyncUs')) notes.push('sync µs = host wait per call for the device splits (nccl: copy to the host, count exchange)');
  if (notes.length > 0) head += `\n# ${notes.join('; ')}`;
  const cells = [columns.map((c) => c.title), ...result.rows.map((r) => columns.map((c) => c.cell(r)))];
  const widths = columns.map((_, i) => Math.max(...cells.map((line) => line[i].length)));
  const lines = cells.map((line) => line.map((cell, i) => cell.padStart(widths[i])).join('  '));
  return [head, ...lines].join('\n') + '\n';
}

export function formatJson(result: BenchResult): string {
  return JSON.stringify(result, null, 2) + '\n';
}
