// The benchmark's result: the JSON form and an aligned text table of the same rows.
import { TARGET_LOOP_MS } from './measure.js';
import type { BenchOp } from './ops.js';
import { formatBytesExact } from './units.js';
import type { HostShare } from './host-share.js';

/**
 * The same-run reference a row's ratio is taken against. `copy`: one device's own copy of the bytes
 * all ranks on it send (cuMemcpyDtoD; TypedArray.set on cpu), for ranks that share one device.
 * `peer-copy`: ranks on several GPUs, every rank at once copying what it sends to ranks on other
 * GPUs into their buffers with the copy engine, the bound of the exchange. `none`: no reference
 * (nccl across GPUs, whose buffers peers cannot address).
 */
export type RefKind = 'copy' | 'rank-copy' | 'peer-copy' | 'none';

/** The forms of the call whose result was checked at a size before it was timed. */
export type CheckedForm = 'eager' | 'graph';

/** One timed quantity over the repeats: each repeat's figure is the slowest rank's. */
export interface Timing {
  medianUs: number;
  minUs: number;
  maxUs: number;
}

export interface BenchRow {
  /** Input bytes per rank (whole rows). */
  bytes: number;
  /** Eager calls, back to back: median over the timed loops of µs per call (slowest rank). */
  timeUs: number;
  /** Fastest and slowest timed loop. */
  timeMinUs: number;
  timeMaxUs: number;
  /** The same call replayed from a captured graph; NaN (null in JSON) where there is no graph (cpu, nccl). */
  graphUs: number;
  graphMinUs: number;
  graphMaxUs: number;
  /** bytes / timeUs (eager), in GB/s (1e9 B/s). */
  algbwGBps: number;
  /** algbw × (W−1)/W: the part that crosses between ranks (nccl-tests' convention). */
  busbwGBps: number;
  /** Which reference refUs measures. */
  ref: RefKind;
  /** The reference's median µs per call, same run; NaN (null) for `none`. */
  refUs: number;
  refMinUs: number;
  refMaxUs: number;
  /** refUs / timeUs: >= 1 means the all-to-all-v beat the reference. */
  refRatio: number;
  /** Forms whose result matched a host reference at this size (a wrong one ends the run instead). */
  checked: CheckedForm[];
  /** nccl only: median µs the host waits per call for the device splits (copy to host, count exchange). */
  hostSyncUs?: number;
  /** Tables of several backends (compareBackends): whose row this is. */
  backend?: string;
  /** Tables of several backends: NCCL's time at this size / this row's time (> 1: faster than NCCL). */
  vsNccl?: number;
  /** MoE ops: the 1-D allToAllV of the same bytes in the same run, eager, median µs per call (a round trip: there and back). */
  oneDUs?: number;
  /** oneDUs / timeUs: >= 1 means the MoE op is at least as fast as the 1-D call. */
  vsOneD?: number;
  /** MoE ops on cuda: the 1-D calls replayed from a graph, and oneDGraphUs / graphUs. */
  oneDGraphUs?: number;
  graphVsOneD?: number;
}

export interface BenchResult {
  backend: string;
  ranks: number;
  /** The MoE ops (absent for the 1-D alltoallv): which, experts per rank, the dispatch's majorAlign. */
  op?: BenchOp;
  experts?: number;
  align?: number;
  /** The calls' SM budget (--max-blocks), when the sweep had one. */
  maxBlocks?: number;
  splits: string;
  /** zipf: the seed its layouts came from (--seed); absent for uniform splits, which have none. */
  seed?: number;
  rowBytes: number;
  device: string;
  /** ISO 8601, when the sweep started. */
  date: string;
  /** cpu: the host's cores (its ranks share them). */
  cores?: number;
  /** cpu: the host's 1-minute load average when the run started, before its ranks ran (host-share.ts). */
  load?: number;
  /** Timed loops per size (absent in results written before it was recorded). */
  repeats?: number;
  /** Calls in each timed loop, where --iters fixed it; absent: enough calls for a loop of at least 20 ms. */
  iters?: number;
  /** A run a signal ended: which, and how many of its sizes it had finished (the rows), e.g. `SIGINT after 3 of 8 sizes`. */
  interrupted?: string;
  /**
   * The CLI's notes on stderr of the sizes it ran, where they are not the --min and --max given:
   * a sweep started or stopped elsewhere (whole rows, the doubling ladder), or lowered to fit memory.
   */
  notes?: string[];
  rows: BenchRow[];
}

/** What one size measured; makeRow derives the rest. */
export interface RowMeasurements {
  ranks: number;
  bytes: number;
  time: Timing;
  /** Absent where the backend has no graph. */
  graph?: Timing;
  ref: RefKind;
  /** Absent for `none`. */
  refTime?: Timing;
  checked: CheckedForm[];
  hostSyncUs?: number;
  /** MoE ops: the 1-D call of the same bytes, same run (graph: cuda). */
  oneD?: { time: Timing; graph?: Timing };
}

const NO_TIMING: Timing = { medianUs: NaN, minUs: NaN, maxUs: NaN };

/** Derives the bandwidth columns and the ratio from the measured times. */
export function makeRow(m: RowMeasurements): BenchRow {
  const { time, graph = NO_TIMING, refTime = NO_TIMING } = m;
  const algbwGBps = m.bytes / time.medianUs / 1e3;
  const row: BenchRow = {
    bytes: m.bytes,
    timeUs: time.medianUs,
    timeMinUs: time.minUs,
    timeMaxUs: time.maxUs,
    graphUs: graph.medianUs,
    graphMinUs: graph.minUs,
    graphMaxUs: graph.maxUs,
    algbwGBps,
    busbwGBps: (algbwGBps * (m.ranks - 1)) / m.ranks,
    ref: m.ref,
    refUs: refTime.medianUs,
    refMinUs: refTime.minUs,
    refMaxUs: refTime.maxUs,
    refRatio: refTime.medianUs / time.medianUs,
    checked: m.checked,
  };
  if (m.hostSyncUs !== undefined) row.hostSyncUs = m.hostSyncUs;
  if (m.oneD) {
    row.oneDUs = m.oneD.time.medianUs;
    row.vsOneD = row.oneDUs / time.medianUs;
    if (m.oneD.graph) {
      row.oneDGraphUs = m.oneD.graph.medianUs;
      row.graphVsOneD = row.oneDGraphUs / graph.medianUs;
    }
  }
  return row;
}

interface Column {
  title: string;
  cell(row: BenchRow): string;
  /** Shown only when some row has a value here (JSON read back has null where a row had NaN). */
  shown?(rows: readonly BenchRow[]): boolean;
}

const has = (key: keyof BenchRow) => (rows: readonly BenchRow[]) => rows.some((r) => r[key] !== undefined);
const hasNumber = (key: keyof BenchRow) => (rows: readonly BenchRow[]) => rows.some((r) => Number.isFinite(r[key]));

const COLUMNS: Column[] = [
  { title: 'bytes', cell: (r) => formatBytesExact(r.bytes) },
  { title: 'backend', cell: (r) => r.backend ?? '-', shown: has('backend') },
  { title: 'time µs', cell: (r) => formatMicros(r.timeUs) },
  { title: 'min-max µs', cell: (r) => formatRange(r.timeMinUs, r.timeMaxUs), shown: hasNumber('timeMinUs') },
  { title: 'graph µs', cell: (r) => formatMicros(r.graphUs), shown: hasNumber('graphUs') },
  { title: 'sync µs', cell: (r) => formatMicros(r.hostSyncUs), shown: has('hostSyncUs') },
  { title: 'algbw GB/s', cell: (r) => formatGBps(r.algbwGBps) },
  { title: 'busbw GB/s', cell: (r) => formatGBps(r.busbwGBps) },
  // Only a table mixing references (several backends) needs to say it per row.
  { title: 'ref', cell: (r) => refOf(r), shown: (rows) => new Set(rows.map(refOf)).size > 1 },
  { title: 'ref µs', cell: (r) => formatMicros(r.refUs) },
  { title: 'ref ratio', cell: (r) => formatRatio(r.refRatio) },
  { title: '1d µs', cell: (r) => formatMicros(r.oneDUs), shown: has('oneDUs') },
  { title: 'vs 1d', cell: (r) => formatRatio(r.vsOneD), shown: has('vsOneD') },
  { title: '1d graph µs', cell: (r) => formatMicros(r.oneDGraphUs), shown: hasNumber('oneDGraphUs') },
  { title: 'graph vs 1d', cell: (r) => formatRatio(r.graphVsOneD), shown: hasNumber('graphVsOneD') },
  { title: 'checked', cell: (r) => (r.checked?.length ? r.checked.join('+') : '-'), shown: has('checked') },
  { title: 'vs nccl', cell: (r) => formatRatio(r.vsNccl), shown: has('vsNccl') },
];

const REF_NOTES: Record<RefKind, string> = {
  copy: 'ref = copy: the device copying the bytes all its ranks send (cuMemcpyDtoD), same run',
  'rank-copy': 'ref = rank-copy: every rank at once copying the bytes it sends, each on its own (a thread, or its process under a2av launch; cpu: the ranks run on the ' +
    "host's cores, as the exchange does), same run",
  'peer-copy': 'ref = peer-copy: every rank at once copying what it sends to ranks on other GPUs into their buffers ' +
    '(copy engine, cuMemcpyAsync), same run: the bound of the exchange',
  none: "ref = -: no same-run reference (nccl across GPUs: peers' buffers are not addressable)",
};

const OP_BYTES: Partial<Record<BenchOp, string>> = {
  combine: 'which the combine gives back',
  roundtrip: 'moved there by the dispatch and back by the combine',
};
const ONE_D_DIRECTIONS: Partial<Record<BenchOp, string>> = {
  dispatch: "the dispatch's rows per peer",
  combine: 'the transposed matrix: the rows going back',
  roundtrip: 'there and back: two calls',
};

/** Results written before rows named their reference all used the device's copy. */
function refOf(row: BenchRow): RefKind {
  return row.ref ?? 'copy';
}

/** `uniform splits`, `zipf splits (seed 7)`: the seed where it picked the layouts. */
export function splitsOf(result: Pick<BenchResult, 'splits' | 'seed'>): string {
  return `${result.splits} splits${result.seed === undefined ? '' : ` (seed ${result.seed})`}`;
}

/** The note of a cpu table whose ranks outnumber the host's cores, or whose host was busy (host-share.ts), else undefined. */
export function hostShareNote(ranks: number, share: Partial<HostShare>): string | undefined {
  const { cores, load } = share;
  if (cores === undefined) return undefined;
  if (ranks > cores) {
    return `# note: ${counted(ranks, 'cpu rank')} on ${counted(cores, 'core')}: each waits for a core as well as for its peers, ` +
      "so the times depend on the scheduler (small sizes' by up to 100x between runs)";
  }
  // Other work on the cores the ranks need: a rank that sleeps in a wait wakes late.
  if (load !== undefined && load > cores - ranks + 0.5) {
    return `# note: the host was busy when the run started (load average ${load} on ${counted(cores, 'core')}, before the ` +
      `${counted(ranks, 'rank')} ran): ${ranks === 1 ? 'the rank waits for a core' : 'the ranks wait for cores as well as for their peers'}, so the times depend on that work (small sizes' by up to 100x)`;
  }
  return undefined;
}

/** `5 timed loops`, or `the timed loops` for a result written before their count was recorded. */
export function loopsOf(repeats: number | undefined, iters?: number): string {
  const loops = repeats === undefined ? 'the timed loops' : counted(repeats, 'timed loop');
  return iters === undefined ? loops : `${loops} of ${counted(iters, 'call')}`;
}

/** `1 rank`, `8 ranks`: a count and its noun, singular for one. */
export function counted(n: number, noun: string): string {
  return `${n} ${noun}${n === 1 ? '' : 's'}`;
}

/**
 * GB/s with one decimal, and two significant digits below 1 GB/s: small sizes (and the cpu backend)
 * would otherwise all read 0.0, hiding a tenfold difference between them.
 */
export function formatGBps(gbps: number): string {
  return gbps > 0 && gbps < 1 ? twoSignificant(gbps) : gbps.toFixed(1);
}

/** Two significant digits in plain decimals (0.00000084, never 8.4e-7, which a column beside 0.0000014 hides). */
function twoSignificant(x: number): string {
  const decimals = Math.min(100, Math.max(0, 1 - Math.floor(Math.log10(Math.abs(x)))));
  const text = x.toFixed(decimals);
  // Rounding up can carry into a third digit (0.0995 -> 0.100): one decimal fewer then.
  return decimals > 0 && Math.abs(Number(text)) >= 10 ** (1 - decimals + 1) ? x.toFixed(decimals - 1) : text;
}

/** Two decimals below 1000 µs, one above: enough digits to compare runs, no noise digits. '-' for none. */
export function formatMicros(us: number | null | undefined): string {
  if (typeof us !== 'number' || !Number.isFinite(us)) return '-';
  return us.toFixed(us < 1000 ? 2 : 1);
}

function formatRange(min: number | null | undefined, max: number | null | undefined): string {
  const [lo, hi] = [formatMicros(min), formatMicros(max)];
  return lo === '-' || hi === '-' ? '-' : `${lo}-${hi}`;
}

/** Two decimals, or two significant digits below 0.1, where two decimals would read 0.00 or 0.01. */
export function formatRatio(x: number | null | undefined): string {
  if (typeof x !== 'number' || !Number.isFinite(x)) return '-';
  return x !== 0 && Math.abs(x) < 0.1 ? twoSignificant(x) : x.toFixed(2);
}

/** A line describing the run, a line per note on the columns, then the columns right-aligned. */
export function formatTable(result: BenchResult): string {
  const { rows } = result;
  const op = result.op === undefined || result.op === 'alltoallv' ? '' : `${result.op}, ${counted(result.experts!, 'expert')} per rank, align ${result.align}, `;
  const budget = result.maxBlocks === undefined ? '' : `at most ${counted(result.maxBlocks, 'thread block')} a call (--max-blocks), `;
  const head = [`# a2av bench: ${result.backend}, ${counted(result.ranks, 'rank')}, ${op}${budget}${splitsOf(result)}, ` +
    `${result.rowBytes}-byte rows, ${result.device}, ${result.date}`];
  const columns = COLUMNS.filter((c) => c.shown === undefined || c.shown(rows));
  const shown = (title: string) => columns.some((c) => c.title === title);
  // Results written before iters was recorded say nothing of it; since, absent means the automatic count.
  const loops = loopsOf(result.repeats, result.iters) + (result.iters === undefined && result.repeats !== undefined ? ` of about ${TARGET_LOOP_MS} ms each` : '');
  if (shown('min-max µs')) head.push(`# time µs = median of ${loops} (slowest rank in each), min-max = the fastest and slowest loop`);
  // nccl-tests' factor assumes every rank sends each peer the same: with uneven splits it is a convention, not the bytes that crossed.
  if (shown('busbw GB/s') && !op) head.push(`# algbw = input bytes per rank / time; busbw = algbw × (W-1)/W, nccl-tests' all-to-all factor${result.splits === 'uniform' ? '' : ` (uniform traffic's: with ${result.splits} splits the share sent to other ranks differs)`}`);
  // The ratio's direction is said where its column is: ref µs over the row's, as vs 1d and vs nccl are.
  const ratio = '; ref ratio = ref µs / time µs (>= 1: faster than the reference)';
  for (const kind of new Set(rows.map(refOf))) head.push(`# ${REF_NOTES[kind]}${kind === 'none' ? '' : ratio}`);
  if (shown('checked')) {
    head.push('# checked = calls whose result matched a host reference before timing (outSplitsOffsets, sampled rows from ' +
      'every source, a canary past the end); a wrong result ends the run with exit status 1 and names the first wrong byte');
  }
  if (op) head.push(`# bytes = each rank's dispatch input${result.op === 'dispatch' ? '' : ` (${OP_BYTES[result.op!]})`}; algbw = bytes / time`);
  if (shown('1d µs')) {
    head.push(`# 1d µs = allToAllV of the same rows between the same ranks, same run (${ONE_D_DIRECTIONS[result.op!]}); ` +
      'vs 1d = 1d µs / time µs (>= 1: at least as fast as the 1-D call)' + (shown('graph vs 1d') ? '; graph vs 1d = 1d graph µs / graph µs' : ''));
  }
  if (shown('vs nccl')) head.push("# vs nccl = NCCL's time / this row's time (> 1: faster than NCCL)");
  if (shown('sync µs')) head.push('# sync µs = host wait per call for the device splits (nccl: copy to the host, count exchange)');
  const shared = hostShareNote(result.ranks, result);
  if (shared !== undefined) head.push(shared);
  if (result.interrupted !== undefined) head.push(`# interrupted: ${result.interrupted}; the rows are the sizes it finished`);
  return [...head, ...alignColumns([columns.map((c) => c.title), ...rows.map((r) => columns.map((c) => c.cell(r)))])].join('\n') + '\n';
}

/** The lines of a table: each column as wide as its widest cell, right-aligned but for the columns in `left`. */
export function alignColumns(cells: readonly (readonly string[])[], left: readonly number[] = []): string[] {
  const widths = cells[0]!.map((_, i) => Math.max(...cells.map((line) => line[i]!.length)));
  return cells.map((line) => line.map((cell, i) => (left.includes(i) ? cell.padEnd(widths[i]!) : cell.padStart(widths[i]!))).join('  '));
}

export function formatJson(result: BenchResult): string {
  return JSON.stringify(result, null, 2) + '\n';
}
