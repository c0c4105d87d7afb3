// The splits exchange's rules on the host: which call is refused and why, where each rank's rows
// land, and what each rank sends where. The cpu and nccl backends run these on the whole split
// matrix; the cuda kernels reach the same verdict and layout from their share of it
// (kernels/exchange.cuh), so all backends refuse the same calls with the same fields.
//
// Three kinds of call share them. Counts are rows; C[q][r][e] = rows rank q sends to expert e of
// rank r (E = 1 for the 1-D call):
//   1d        q's rows are packed in (r) order; r receives them packed by source.
//   dispatch  q's rows are packed in (r, e) order; r receives them expert-major (for each expert
//             e, the chunks from sources 0..W-1), each expert's block starting at a multiple of
//             `align` rows and taking at least `align` rows.
//   combine   q's chunk (r, e) starts where q's explicit offset says; r receives source-major
//             (for each source, its experts' chunks), packed.
//
// Verdict: the first of these, in this order (every rank computes the same one):
//   mismatch  the lowest rank q whose call differs from rank 0's in kind, row size, output
//             buffer, experts or align (first differing field: needed = q's, available = 0's);
//   negative  the lowest (q, r, e) with C < 0 (needed = C);
//   input     1d, dispatch: the lowest q whose rows sum past its input, at the first (r, e)
//             where the running sum passes (needed = the whole sum); combine: the lowest (q, r, e)
//             whose chunk is not inside q's input (needed = its end, or its offset if negative);
//   output    the lowest receiver r whose layout passes its output, at the first (source,
//             expert) where it does, peer -1 when an expert's padding does (needed = the whole
//             layout's rows).
// Sums saturate at INT64_MAX: an overflowing sum is reported as INT64_MAX, never wrapped.
import { INT64_MAX, satAdd, StatusCode, type StatusEntry } from './status.js';

export const ExchangeKind = { '1d': 1, dispatch: 2, combine: 3 } as const;
export type ExchangeKind = keyof typeof ExchangeKind;

/** What rank q publishes for a call: its header and its row of the split matrix. */
export interface RankCall {
  kind: ExchangeKind;
  rowBytes: number;
  /** The output buffer's symmetric id. */
  outId: number;
  experts: number;
  align: number;
  inRows: number;
  outRows: number;
  /** count(r, e): rows this rank sends to expert e of rank r, exactly. */
  count(r: number, e: number): bigint;
  /** combine: offset(r, e), the row where that chunk starts in this rank's input. */
  offset?(r: number, e: number): bigint;
}

/** Where one chunk of rows goes: `rows` from source row `srcRow` to row `dstRow` of rank `peer`'s output. */
export interface Chunk {
  peer: number;
  expert: number;
  rows: number;
  srcRow: number;
  dstRow: number;
}

const HEADER: (keyof RankCall)[] = ['kind', 'rowBytes', 'outId', 'experts', 'align'];
const headerValue = (c: RankCall, k: keyof RankCall): bigint => (k === 'kind' ? BigInt(ExchangeKind[c.kind]) : BigInt(c[k] as number));

/** The verdict on the call every rank published (`calls`, by rank), or undefined when it may run. */
export function verdict(calls: readonly RankCall[], reportedBy: number): StatusEntry | undefined {
  const W = calls.length;
  const entry = (code: StatusCode, rank: number, peer: number, expert: number, needed: bigint, available: bigint): StatusEntry => ({
    code, rank, peer, needed, available, reportedBy, expert: calls[0].kind === '1d' ? -1 : expert,
  });
  for (let q = 1; q < W; q++) {
    const k = HEADER.find((f) => headerValue(calls[q], f) !== headerValue(calls[0], f));
    if (k !== undefined) return entry(StatusCode.mismatch, q, 0, -1, headerValue(calls[q], k), headerValue(calls[0], k));
  }
  const E = calls[0].experts;
  for (let q = 0; q < W; q++) {
    for (let r = 0; r < W; r++) {
      for (let e = 0; e < E; e++) {
        const c = calls[q].count(r, e);
        if (c < 0n) return entry(StatusCode.negative, q, r, e, c, 0n);
      }
    }
  }
  for (let q = 0; q < W; q++) {
    const fault = inputFault(calls[q], W);
    if (fault) return entry(StatusCode.inputOverflow, q, fault.peer, fault.expert, fault.needed, BigInt(calls[q].inRows));
  }
  for (let r = 0; r < W; r++) {
    const fault = outputFault(calls, r);
    if (fault) return entry(StatusCode.outputOverflow, r, fault.peer, fault.expert, fault.needed, BigInt(calls[r].outRows));
  }
  return undefined;
}

interface Fault {
  peer: number;
  expert: number;
  needed: bigint;
}

/** Rank q's own input check (its counts are all >= 0). */
export function inputFault(call: RankCall, W: number): Fault | undefined {
  const E = call.experts;
  const cap = BigInt(call.inRows);
  if (call.kind === 'combine') {
    for (let r = 0; r < W; r++) {
      for (let e = 0; e < E; e++) {
        const off = call.offset!(r, e);
        const end = off < 0n ? off : satAdd(off, call.count(r, e));
        if (off < 0n || end > cap) return { peer: r, expert: e, needed: end };
      }
    }
    return undefined;
  }
  let sum = 0n;
  let at: Fault | undefined;
  for (let r = 0; r < W; r++) {
    for (let e = 0; e < E; e++) {
      const c = call.count(r, e);
      if (at === undefined && c > cap - sum) at = { peer: r, expert: e, needed: 0n };
      sum = satAdd(sum, c);
    }
  }
  return at && { ...at, needed: sum };
}

/**
 * Receiver r's layout: where each source's chunk for each expert starts in r's output, and the
 * rows it needs in all (saturated). `start(src, e)`; `total`.
 */
export function receiveLayout(calls: readonly RankCall[], r: number): { start: (src: number, e: number) => bigint; total: bigint; fault?: Fault } {
  const W = calls.length;
  const E = calls[r].experts;
  const cap = BigInt(calls[r].outRows);
  const starts = new Array<bigint>(W * E);
  let pos = 0n;
  let fault: Fault | undefined;
  const place = (src: number, e: number): void => {
    const c = calls[src].count(r, e);
    if (fault === undefined && c > cap - pos) fault = { peer: src, expert: e, needed: 0n };
    starts[src * E + e] = pos;
    pos = satAdd(pos, c);
  };
  if (calls[r].kind === 'dispatch') {
    const align = BigInt(calls[r].align);
    for (let e = 0; e < E; e++) {
      const blockStart = pos;
      for (let src = 0; src < W; src++) place(src, e);
      const used = pos - blockStart;
      const len = used === 0n ? align : satAdd(used, (align - (used % align)) % align);
      const end = satAdd(blockStart, len);
      if (fault === undefined && end > cap) fault = { peer: -1, expert: e, needed: 0n };
      pos = end;
    }
  } else {
    for (let src = 0; src < W; src++) for (let e = 0; e < E; e++) place(src, e);
  }
  return { start: (src, e) => starts[src * E + e], total: pos, fault: fault && { ...fault, needed: pos } };
}

/** Receiver r's output check (the counts are all >= 0). */
export function outputFault(calls: readonly RankCall[], r: number): Fault | undefined {
  return receiveLayout(calls, r).fault;
}

/**
 * outSplitsOffsets of receiver r for an accepted call, int64[2][n] in the kind's order: dispatch
 * expert-major (e·W + src), 1d and combine source-major (src·E + e).
 */
export function splitsOffsets(calls: readonly RankCall[], r: number): BigInt64Array {
  const W = calls.length;
  const E = calls[r].experts;
  const n = W * E;
  const out = new BigInt64Array(2 * n);
  const { start } = receiveLayout(calls, r);
  for (let src = 0; src < W; src++) {
    for (let e = 0; e < E; e++) {
      const i = calls[r].kind === 'dispatch' ? e * W + src : src * E + e;
      out[i] = calls[src].count(r, e);
      out[n + i] = start(src, e);
    }
  }
  return out;
}

/** What rank q sends for an accepted call: one chunk per (peer, expert) with rows, in (peer, expert) order. */
export function sendChunks(calls: readonly RankCall[], q: number): Chunk[] {
  const W = calls.length;
  const E = calls[q].experts;
  const chunks: Chunk[] = [];
  const layouts = calls.map((_, r) => receiveLayout(calls, r));
  let src = 0;
  for (let r = 0; r < W; r++) {
    for (let e = 0; e < E; e++) {
      const rows = Number(calls[q].count(r, e));
      const srcRow = calls[q].kind === 'combine' ? Number(calls[q].offset!(r, e)) : src;
      src += rows;
      if (rows > 0) chunks.push({ peer: r, expert: e, rows, srcRow, dstRow: Number(layouts[r].start(q, e)) });
    }
  }
  return chunks;
}

/** INT64_MAX, for callers that build counts: what a saturated sum reads as. */
export { INT64_MAX };
