// What each rank publishes for a splits exchange (its record), and a view of every rank's records
// wherever a backend holds them. The rules that judge them: exchange-rules.ts.
//
// A record, int64 words:
//   [0, 8)  header: kind (ExchangeKind; ALL_REDUCE_KIND: an allReduce), rowBytes, outId, experts,
//           align, inRows, outRows, plan
//           (0: a direct call; -1: a plan's exchange; a move: its plan, by the lane call number of
//           the plan's exchange, the same on every rank whose exchanges met)
//   [8, ..) 1d: counts[W]; dispatch: counts[W·E] (index r·E + e); combine: its inSplitsOffsets as
//           given, int64[2][E·W] (counts at e·W + r, offsets at E·W + e·W + r).
// Read as int32 pairs, so judging a call allocates no BigInt.
import { ALL_REDUCE_KIND, ExchangeKind } from '../codes.js';

export { ExchangeKind };
const KIND_NAMES: Record<number, ExchangeKind> = { 1: '1d', 2: 'dispatch', 3: 'combine' };

/** Word index of each header field in a record. */
export const RecordField = { kind: 0, rowBytes: 1, outId: 2, experts: 3, align: 4, inRows: 5, outRows: 6, plan: 7 } as const;
export const RECORD_HEADER_WORDS = 8;

export interface RecordHeader {
  kind: ExchangeKind;
  rowBytes: number;
  outId: number;
  experts: number;
  align: number;
  inRows: number;
  outRows: number;
  /** 0: a direct call; -1: a plan's exchange; a move: the lane call number of its plan's exchange. */
  plan: number;
}

/** int64 words of a record's data (after the header). */
export const recordDataWords = (kind: ExchangeKind, world: number, experts: number): number =>
  (kind === 'combine' ? 2 : 1) * world * experts;

export const TWO32 = 4294967296;
/** int64 at int32 index `at` as a double (exact below 2^53 in magnitude; ordered beyond). */
export const num = (w: Int32Array, at: number): number => w[at + 1] * TWO32 + (w[at] >>> 0);
export const exact = (w: Int32Array, at: number): bigint => BigInt(w[at + 1]) * 4294967296n + BigInt(w[at] >>> 0);

/** Stores a safe integer as int64 at int32 index `at`. */
export function putInt64(w: Int32Array, at: number, v: number): void {
  if ((v | 0) === v) {
    // Small (the usual case): the low word, and the sign.
    w[at] = v;
    w[at + 1] = v < 0 ? -1 : 0;
    return;
  }
  const hi = Math.floor(v / TWO32);
  w[at] = v - hi * TWO32;
  w[at + 1] = hi;
}

/** Writes a record's header at int32 index `at`. */
export function writeHeader(w: Int32Array, at: number, h: RecordHeader): void {
  putInt64(w, at, ExchangeKind[h.kind]);
  putInt64(w, at + 2, h.rowBytes);
  putInt64(w, at + 4, h.outId);
  putInt64(w, at + 6, h.experts);
  putInt64(w, at + 8, h.align);
  putInt64(w, at + 10, h.inRows);
  putInt64(w, at + 12, h.outRows);
  putInt64(w, at + 14, h.plan);
}

/**
 * An allReduce's record (header only: kind ALL_REDUCE_KIND, every other word 0), so that the
 * mismatch rule finds a peer in an exchange call beside it; allReduce compares its own fields
 * (count, dtype, op, output) apart.
 */
export function writeAllReduceHeader(w: Int32Array, at: number): void {
  putInt64(w, at, ALL_REDUCE_KIND);
  for (let f = 1; f < RECORD_HEADER_WORDS; f++) putInt64(w, at + 2 * f, 0);
}

/**
 * Every rank's record of one call, where the backend put them: rank q's starts at int32 index
 * base[q] of words[q] (the cpu backend: each rank's pad; nccl: the gathered records).
 */
export class Records {
  readonly world: number;
  readonly words: Int32Array[];
  readonly base: Int32Array;

  constructor(world: number) {
    this.world = world;
    this.words = new Array<Int32Array>(world);
    this.base = new Int32Array(world);
  }

  header(q: number, field: number): number {
    return num(this.words[q], this.base[q] + 2 * field);
  }

  kind(q: number): ExchangeKind {
    return KIND_NAMES[this.header(q, RecordField.kind)] ?? '1d';
  }

  /** int32 index of count(r, e) in rank q's record (the kind and E are rank 0's: they agree). */
  countAt(q: number, r: number, e: number, combine: boolean, E: number): number {
    return this.base[q] + 2 * (RECORD_HEADER_WORDS + (combine ? e * this.world + r : r * E + e));
  }

  /** int32 index of combine's offset(r, e) in rank q's record. */
  offsetAt(q: number, r: number, e: number, E: number): number {
    return this.base[q] + 2 * (RECORD_HEADER_WORDS + E * this.world + e * this.world + r);
  }
}
