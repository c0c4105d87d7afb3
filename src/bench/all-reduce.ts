// `a2av bench allreduce`: comm.allReduce timed size by size (eager, and on cuda in graphs of 20
// calls up to 4 MiB), every size checked first against the host sum, for one backend or several in
// one table (vs nccl = NCCL's time / this row's). Inputs are small integers (benchValue), so the
// check is exact whatever order a backend sums in.
import type { BackendName, Comm, ReduceDtype } from '../backends/backend.js';
import { CPU_MAX_BUFFER_BYTES } from '../backends/cpu/buffer.js';
import { bf16ToF32, ELEMENT_BYTES, f32ToBf16 } from '../collectives/reduce.js';
import { UsageError } from '../errors.js';
import { runJob } from '../world/job.js';
import type { RankContext } from '../world/ranks.js';
import { Agreement } from '../collectives/agree.js';
import { measure, slowestRank, TARGET_LOOP_MS } from './measure.js';
import { captureBatch, timeReplay, usingBatch } from './rank.js';
import { checkSameOptions } from './same-options.js';
import { alignColumns, counted, formatGBps, formatMicros, hostShareNote, loopsOf } from './table.js';
import { formatBytes, formatBytesExact } from './units.js';
import { hostShare } from './host-share.js';

const GRAPH_CALLS = 20;
const GRAPH_MAX_BYTES = 4 << 20;
/** Elements checked per size (evenly spread, first and last included). */
const CHECKED = 4099;
/** Bytes past the output's `count` elements that must stay as they were. */
const CANARY_BYTES = 256;
const CANARY = 0xa5;

export interface AllReduceBenchArg {
  /** Bytes per rank, ascending; runAllReduceBench rounds each down to whole elements. */
  sizes: number[];
  dtype: ReduceDtype;
  repeats: number;
  iters?: number;
}

export interface AllReduceRow {
  bytes: number;
  count: number;
  timeUs: number;
  timeMinUs: number;
  timeMaxUs: number;
  /** Per call in a graph of GRAPH_CALLS (cuda, up to GRAPH_MAX_BYTES); absent elsewhere. */
  graphUs?: number;
  /** bytes / time, and NCCL's bus bandwidth convention: algbw * 2(W-1)/W. */
  algbwGBps: number;
  busbwGBps: number;
}

export type AllReduceReport = { type: 'row'; index: number; count: number; row: AllReduceRow; device: string };

export interface AllReduceBenchResult {
  backend: BackendName;
  ranks: number;
  dtype: ReduceDtype;
  device: string;
  /** cpu: the host's cores and its load at the start (host-share.ts). */
  cores?: number;
  load?: number;
  date: string;
  /** Timed loops per size (the median is each row's time). */
  repeats: number;
  /** Calls in each timed loop, where --iters fixed it; absent: enough for about 20 ms. */
  iters?: number;
  /** A run a signal ended: which, and how many of its sizes it had finished (the rows). */
  interrupted?: string;
  /** The CLI's note on stderr where the sizes run are not the --min and --max given. */
  notes?: string[];
  rows: AllReduceRow[];
}


/** Ranks at most: the sums benchValue's integers make stay exact in bf16 (below). */
export const ALL_REDUCE_MAX_RANKS = 64;

/**
 * Rank r's element i: an integer in [-3, 3]. Any partial sum over <= 64 ranks stays within 192,
 * exact in bf16 (8 significant bits) as in f32, so a backend that rounds as it adds (NCCL's bf16)
 * meets the same exact sum as one that adds in f32.
 */
export function benchValue(rank: number, i: number): number {
  return ((i * 5 + rank * 3) % 7) - 3;
}

function encode(dtype: ReduceDtype, values: Float32Array): Uint8Array {
  if (dtype === 'f32') return new Uint8Array(values.buffer, values.byteOffset, values.byteLength);
  return new Uint8Array(Uint16Array.from(values, f32ToBf16).buffer);
}

function decodeAt(dtype: ReduceDtype, bytes: Uint8Array): number {
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  return dtype === 'f32' ? view.getFloat32(0, true) : bf16ToF32(view.getUint16(0, true));
}

/** The rank program: every size checked, then timed; rank 0 reports each row and returns them all. */
export async function allReduceSweep(comm: Comm, arg: AllReduceBenchArg, ctx: RankContext): Promise<{ rows: AllReduceRow[]; device: string }> {
  const W = comm.worldSize;
  await checkSameOptions(comm, { command: 'bench allreduce', options: arg, flags: { sizes: 'sizes (--min, --max)' } });
  if (W > ALL_REDUCE_MAX_RANKS) throw new UsageError(`bench allreduce: at most ${ALL_REDUCE_MAX_RANKS} ranks (the check's sums stay exact), got ${W}`);
  const eb = ELEMENT_BYTES[arg.dtype];
  const maxBytes = arg.sizes[arg.sizes.length - 1]!;
  const agree = await Agreement.create(comm, Math.max(4, arg.repeats));
  const input = comm.alloc(maxBytes);
  const output = await comm.allocSymmetric(maxBytes + CANARY_BYTES);
  const stream = comm.lane(0).stream;
  const rows: AllReduceRow[] = [];
  try {
    // This rank's input, written in chunks (the largest sizes do not fit one host array comfortably).
    const chunk = 1 << 22;
    for (let first = 0; first < maxBytes / eb; first += chunk) {
      const n = Math.min(chunk, maxBytes / eb - first);
      comm.write(input, encode(arg.dtype, Float32Array.from({ length: n }, (_, k) => benchValue(comm.rank, first + k))), first * eb);
    }
    for (const [index, bytes] of arg.sizes.entries()) {
      const count = Math.floor(bytes / eb);
      const call = () => comm.allReduce({ input, output, count, dtype: arg.dtype, op: 'sum', lane: comm.lane(0), stream });
      comm.write(output, new Uint8Array(count * eb + CANARY_BYTES).fill(CANARY));
      call().wait();
      checkSums(comm, output, count, arg.dtype, W);
      const t = slowestRank(agree, measure(comm, stream, () => void call(), { repeats: arg.repeats, fixedIters: arg.iters, agree }));
      let graphUs: number | undefined;
      if (comm.backend === 'cuda' && bytes <= GRAPH_MAX_BYTES) {
        const batch = await captureBatch(comm, stream, call, bytes, GRAPH_CALLS);
        graphUs = await usingBatch(comm, batch, (b) => timeReplay(comm, agree, stream, { repeats: arg.repeats }, b).medianUs);
      }
      const algbw = bytes / (t.medianUs * 1e3);
      const row: AllReduceRow = { bytes, count, timeUs: t.medianUs, timeMinUs: t.minUs, timeMaxUs: t.maxUs, graphUs, algbwGBps: algbw, busbwGBps: (algbw * 2 * (W - 1)) / W };
      rows.push(row);
      if (comm.rank === 0) ctx.report({ type: 'row', index, count: arg.sizes.length, row, device: comm.deviceName } satisfies AllReduceReport);
    }
  } finally {
    agree.close();
    comm.free(input);
    comm.free(output);
  }
  return { rows: comm.rank === 0 ? rows : [], device: comm.deviceName };
}

/** Sampled elements equal the exact sum over ranks, and the canary past `count` is untouched. */
function checkSums(comm: Comm, output: Parameters<Comm['read']>[0], count: number, dtype: ReduceDtype, W: number): void {
  const eb = ELEMENT_BYTES[dtype];
  const picks = new Set<number>([0, count - 1]);
  for (let k = 0; k < CHECKED && count > 0; k++) picks.add(Math.floor((k * count) / CHECKED));
  for (const i of picks) {
    if (i < 0) continue;
    let want = 0;
    for (let r = 0; r < W; r++) want += benchValue(r, i);
    const got = decodeAt(dtype, comm.read(output, i * eb, eb));
    if (got !== want) throw new UsageError(`bench allreduce: rank ${comm.rank}, ${count} ${dtype} elements: element ${i} is ${got}, the sum over ranks is ${want}`);
  }
  const canary = comm.read(output, count * eb, CANARY_BYTES);
  const bad = canary.findIndex((b) => b !== CANARY);
  if (bad >= 0) throw new UsageError(`bench allreduce: rank ${comm.rank}, ${count} ${dtype} elements: byte ${count * eb + bad} past the sum was written`);
}

export interface AllReduceBenchOptions extends AllReduceBenchArg {
  backend: BackendName;
  ranks: number;
  timeoutMs?: number;
}

/** Checked before the ranks allocate (and by the CLI before its progress starts): the ranks' error would name neither --max nor the canary. */
export function refuseCpuAllReduceSize(backend: BackendName, sizes: readonly number[]): void {
  const most = sizes[sizes.length - 1]! + CANARY_BYTES;
  if (backend === 'cpu' && most > CPU_MAX_BUFFER_BYTES)
    throw new UsageError(`bench allreduce: ${formatBytes(most - CANARY_BYTES)} (the largest size up to --max) on cpu: the output, its sum and a ${CANARY_BYTES}-byte canary ` +
      `past it, needs ${formatBytesExact(most)}, past the cpu backend's ${formatBytes(CPU_MAX_BUFFER_BYTES)} per buffer: lower --max`);
}

/** Runs the sweep (ranks as threads, or this rank of a launched job); rank 0 gets the result. */
/**
 * Runs the sweep; rank 0's result (undefined on a launched job's other ranks). `onRow` gets each
 * size as it finishes, with the result as far as it goes (what an interrupted run can still show).
 */
export async function runAllReduceBench(opts: AllReduceBenchOptions, onRow: (r: AllReduceReport, soFar: AllReduceBenchResult) => void = () => {}): Promise<AllReduceBenchResult | undefined> {
  const date = new Date().toISOString();
  const { backend, ranks, timeoutMs, ...asked } = opts;
  const share = hostShare(backend);
  const arg = { ...asked, sizes: wholeElements(asked.sizes, asked.dtype) };
  refuseCpuAllReduceSize(backend, arg.sizes);
  const resultOf = (device: string, rows: AllReduceRow[]): AllReduceBenchResult =>
    ({ backend, ranks, dtype: arg.dtype, device, ...share, date, repeats: arg.repeats, ...(arg.iters === undefined ? {} : { iters: arg.iters }), rows });
  const rows: AllReduceRow[] = [];
  const { rank, result } = await runJob<AllReduceBenchArg, { rows: AllReduceRow[]; device: string }>(
    { backend, ranks, timeoutMs, onReport: (_r, m) => {
      const r = m as AllReduceReport;
      rows.push(r.row);
      onRow(r, resultOf(r.device, rows));
    } },
    new URL(import.meta.url),
    'allReduceSweep',
    arg,
  );
  if (rank !== 0) return undefined;
  return resultOf(result.device, result.rows);
}

/**
 * Each size of a list given here rounded down to whole elements (the CLI's sweep is whole already,
 * each size rounded up from --min): a row's bytes are then its count × the element's size. A size
 * below one element is a UsageError.
 */
export function wholeElements(sizes: readonly number[], dtype: ReduceDtype): number[] {
  const eb = ELEMENT_BYTES[dtype];
  const small = sizes.find((bytes) => bytes < eb);
  if (small !== undefined) throw new UsageError(`bench allreduce: ${small} bytes is less than one ${dtype} element (${eb} bytes)`);
  return sizes.map((bytes) => bytes - (bytes % eb));
}

/** One table: a row per size and backend; with nccl among them, each row's NCCL time / its time. */
export function formatAllReduceTable(results: readonly AllReduceBenchResult[]): string {
  const first = results[0]!;
  const nccl = results.find((r) => r.backend === 'nccl');
  const lines = [
    `# a2av bench allreduce: ${results.map((r) => r.backend).join(',')}, ${counted(first.ranks, 'rank')}, ${first.dtype}, ${first.device}, ${first.date}`,
    `# time µs = median of ${loopsOf(first.repeats, first.iters)}${first.iters === undefined ? ` of about ${TARGET_LOOP_MS} ms each` : ''} (slowest rank in each), min-max their spread; graph µs = per call in a graph of ` +
      `${GRAPH_CALLS} (cuda, up to ${formatBytes(GRAPH_MAX_BYTES)}); every size checked against the host sum first`,
    '# algbw = bytes per rank / time; busbw = algbw * 2(W-1)/W (NCCL\'s convention); vs nccl = NCCL time / this row\'s time',
    ...results.flatMap((r) => hostShareNote(r.ranks, r) ?? []),
    ...results.flatMap((r) => (r.interrupted === undefined ? [] : [`# interrupted: ${r.backend}: ${r.interrupted}; its rows are the sizes it finished`])),
  ];
  const head = ['bytes', 'backend', 'time µs', 'min-max µs', 'graph µs', 'algbw GB/s', 'busbw GB/s', 'vs nccl'];
  // Columns no row fills are left out: graph µs where no backend ran graphs, vs nccl without a second backend beside nccl.
  const shown = [true, true, true, true, results.some((r) => r.rows.some((x) => x.graphUs !== undefined)), true, true, nccl !== undefined && results.length > 1];
  const table: string[][] = [];
  for (const [i, row] of first.rows.entries()) {
    for (const r of results) {
      const x = r.rows[i];
      if (!x) continue;
      const ref = nccl?.rows[i];
      table.push([
        formatBytesExact(x.bytes),
        r.backend,
        formatMicros(x.timeUs),
        `${formatMicros(x.timeMinUs)}-${formatMicros(x.timeMaxUs)}`,
        formatMicros(x.graphUs),
        formatGBps(x.algbwGBps),
        formatGBps(x.busbwGBps),
        ref && r.backend !== 'nccl' ? (ref.timeUs / x.timeUs).toFixed(2) : '-',
      ]);
    }
  }
  const kept = (cells: string[]) => cells.filter((_, c) => shown[c]);
  return [...lines, ...alignColumns([kept(head), ...table.map(kept)], [1])].join('\n') + '\n';
}
