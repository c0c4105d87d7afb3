// What the MoE ops must leave on a rank, from a split matrix with experts: the bench's host
// reference for dispatch (expert-major, each expert's block aligned) and combine (rank-major,
// packed: the dispatch's input given back). Written from the semantics (README, issue 9) rather
// than from src/collectives/exchange-rules.ts, so a mistake shared with the backends cannot pass
// its own check.
import type { InputPattern } from './data.js';
import { mulberry32, type Splits } from './splits.js';
import type { Expectation, ExpectedRow } from './verify.js';

/** Chunks whose rows a check samples at most (their first and last row each); the rest are left out at random. */
const MAX_SAMPLED_CHUNKS = 256;

/** One chunk of rows a rank receives. */
export interface Placed {
  /** The rank that sends it (dispatch: the token's rank; combine: the expert's rank). */
  src: number;
  expert: number;
  rows: number;
  /** Where it lands in the receiver's output. */
  dstRow: number;
  /** Where its rows are in the input they came from (combine: the receiver's own dispatch input). */
  srcRow: number;
}

/** Rows an expert block takes: its rows rounded up to a multiple of `align`, and `align` when it got none. */
export function blockRows(used: number, align: number): number {
  return used === 0 ? align : Math.ceil(used / align) * align;
}

/** Where rank `src`'s chunk for (peer, expert) starts in its input: inputs are packed rank-major. */
function inputRow(splits: Splits, src: number, peer: number, expert: number): number {
  const row = splits.chunks[src];
  let at = 0;
  for (let k = 0; k < peer * splits.experts + expert; k++) at += row[k];
  return at;
}

/** Receiver `me`'s dispatch: its chunks in outSplitsOffsets order (expert, then source), and the rows its layout takes. */
export function dispatchLayout(splits: Splits, me: number, align: number): { placed: Placed[]; totalRows: number } {
  const E = splits.experts;
  const w = splits.chunks.length;
  const starts = Array.from({ length: w }, (_, src) => inputRow(splits, src, me, 0));
  const placed: Placed[] = [];
  let pos = 0;
  for (let e = 0; e < E; e++) {
    const block = pos;
    for (let src = 0; src < w; src++) {
      const rows = splits.chunks[src][me * E + e];
      placed.push({ src, expert: e, rows, dstRow: pos, srcRow: starts[src] });
      starts[src] += rows;
      pos += rows;
    }
    pos = block + blockRows(pos - block, align);
  }
  return { placed, totalRows: pos };
}

/** Rows the fullest receiver's dispatch layout takes: the output every rank allocates. */
export function maxDispatchRows(splits: Splits, align: number): number {
  const E = splits.experts;
  let most = 0;
  for (let r = 0; r < splits.chunks.length; r++) {
    let total = 0;
    for (let e = 0; e < E; e++) total += blockRows(splits.chunks.reduce((sum, row) => sum + row[r * E + e], 0), align);
    most = Math.max(most, total);
  }
  return most;
}

/** Rank `me`'s combine: what each peer's experts give back, in outSplitsOffsets order (peer, then expert), packed as me sent them. */
export function combineLayout(splits: Splits, me: number): Placed[] {
  const E = splits.experts;
  const placed: Placed[] = [];
  let pos = 0;
  splits.chunks[me].forEach((rows, k) => {
    placed.push({ src: Math.floor(k / E), expert: k % E, rows, dstRow: pos, srcRow: pos });
    pos += rows;
  });
  return placed;
}

/** outSplitsOffsets as the op writes it: the chunks' counts, then their offsets (int64[2][n], in `placed` order). */
export function splitsOffsetsOf(placed: readonly Placed[]): BigInt64Array {
  const out = new BigInt64Array(2 * placed.length);
  placed.forEach((p, i) => {
    out[i] = BigInt(p.rows);
    out[placed.length + i] = BigInt(p.dstRow);
  });
  return out;
}

/** What receiver `me`'s dispatch must leave: every count and offset, sampled rows of every source and expert, nothing past the layout. */
export function expectDispatch(splits: Splits, me: number, align: number, rowBytes: number, patterns: readonly InputPattern[], seed: number): Expectation {
  const { placed, totalRows } = dispatchLayout(splits, me, align);
  const samples = sampleRows(placed, rowBytes, seed ^ Math.imul(me + 1, 0x27d4eb2f), (p, row) => ({
    expected: patterns[p.src].bytes((p.srcRow + row) * rowBytes, rowBytes),
    name: `row ${row} from rank ${p.src} for expert ${p.expert}`,
  }));
  // Padding between blocks is the op's to leave as it likes; past the whole layout it must write nothing.
  return { splitsOffsets: splitsOffsetsOf(placed), samples, end: totalRows * rowBytes };
}

/** What rank `me`'s combine must leave: its own dispatch input, row for row. */
export function expectCombine(splits: Splits, me: number, rowBytes: number, patterns: readonly InputPattern[], seed: number): Expectation {
  const placed = combineLayout(splits, me);
  const samples = sampleRows(placed, rowBytes, seed ^ Math.imul(me + 1, 0x165667b1), (p, row) => ({
    expected: patterns[me].bytes((p.srcRow + row) * rowBytes, rowBytes),
    name: `row ${row} back from expert ${p.expert} of rank ${p.src}`,
  }));
  return { splitsOffsets: splitsOffsetsOf(placed), samples, end: splits.rowsPerRank * rowBytes };
}

/** The first and last row of the non-empty chunks (of MAX_SAMPLED_CHUNKS of them, picked by `seed`), in output order. */
function sampleRows(placed: readonly Placed[], rowBytes: number, seed: number, rowOf: (p: Placed, row: number) => Omit<ExpectedRow, 'outOffset'>): ExpectedRow[] {
  let chunks = placed.filter((p) => p.rows > 0);
  if (chunks.length > MAX_SAMPLED_CHUNKS) {
    const random = mulberry32(seed);
    const keep = new Set<Placed>([chunks[0], chunks[chunks.length - 1]]);
    while (keep.size < MAX_SAMPLED_CHUNKS) keep.add(chunks[Math.floor(random() * chunks.length)]);
    chunks = [...keep];
  }
  const samples: ExpectedRow[] = [];
  for (const p of chunks) {
    for (const row of new Set([0, p.rows - 1])) samples.push({ outOffset: (p.dstRow + row) * rowBytes, ...rowOf(p, row) });
  }
  return samples.sort((a, b) => a.outOffset - b.outOffset);
}
