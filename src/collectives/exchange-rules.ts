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
//   mismatch  the lowest rank q whose call differs from rank 0's in kind, plan (a direct call, a
//             plan's exchange, or a move of which plan), row size, output buffer, experts or
//             align (first differing field: needed = q's, available = 0's);
//   negative  the lowest (q, r, e) with C < 0 (needed = C);
//   input     1d, dispatch: the lowest q whose rows sum past its input, at the first (r, e)
//             where the running sum passes (needed = the whole sum); combine: the lowest (q, r, e)
//             whose chunk is not inside q's input (needed = its end, or its offset if negative);
//   output    the lowest receiver r whose layout passes its output, at the first (source,
//             expert) where it does, peer -1 when an expert's padding does (needed = the whole
//             layout's rows).
// Sums saturate at INT64_MAX: an overflowing sum is reported as INT64_MAX, never wrapped.
//
// Each rank publishes its call as a record (exchange-records.ts: a header, then its counts). A
// plan's exchange publishes rowBytes 0 and outId -1 (no payload yet); its moves compare only the
// header (mismatchOf).
//
// Cost: the backends run this on every call, W·W·E counts per rank. Counts are read as doubles:
// exact below 2^53, and past it still ordered, so every comparison against a capacity (a safe
// integer) comes out as with exact arithmetic. Only the numbers an error reports are recomputed
// exactly, with BigInt. Each receiver's layout is walked once per call, and the walk also records
// where this rank's chunks land (Routing).
import { INT64_MAX, MismatchCode, satAdd, StatusCode, type StatusEntry } from './status.js';
import type { Routing } from './exchange-routing.js';
import { exact, num, RecordField, TWO32, type Records } from './exchange-records.js';

export { ExchangeKind, putInt64, RECORD_HEADER_WORDS, recordDataWords, RecordField, Records, writeAllReduceHeader, writeHeader, type RecordHeader } from './exchange-records.js';

/** The fields ranks must agree on, in the order the mismatch rule compares them, with the code each is named by. */
const AGREED = [
  [RecordField.kind, MismatchCode.kind],
  [RecordField.plan, MismatchCode.plan],
  [RecordField.rowBytes, MismatchCode.rowBytes],
  [RecordField.outId, MismatchCode.output],
  [RecordField.experts, MismatchCode.expertsPerRank],
  [RecordField.align, MismatchCode.majorAlign],
] as const;

type Entry = (code: StatusCode, rank: number, peer: number, expert: number, needed: bigint, available: bigint) => StatusEntry;

function entryMaker(m: Records, reportedBy: number): Entry {
  const oneD = m.kind(0) === '1d';
  return (code, rank, peer, expert, needed, available) => ({ code, rank, peer, needed, available, reportedBy, expert: oneD ? -1 : expert });
}

/** The mismatch rule alone: the lowest rank whose header differs from rank 0's (its expert word names the field), else undefined. */
export function mismatchOf(m: Records, reportedBy: number): StatusEntry | undefined {
  for (let q = 1; q < m.world; q++) {
    for (const [f, code] of AGREED) {
      if (m.header(q, f) === m.header(0, f)) continue;
      const [mine, zero] = [exact(m.words[q], m.base[q] + 2 * f), exact(m.words[0], m.base[0] + 2 * f)];
      return { code: StatusCode.mismatch, rank: q, peer: 0, needed: mine, available: zero, reportedBy, expert: code };
    }
  }
  return undefined;
}

/**
 * The verdict on the call every rank published, or undefined when it may run. When it may, and
 * `routing` is given, fills it with what rank `me` sends and receives.
 */
export function judge(m: Records, reportedBy: number, routing?: Routing): StatusEntry | undefined {
  const refused = mismatchOf(m, reportedBy) ?? negativeOf(m, reportedBy) ?? inputOf(m, reportedBy) ?? layOut(m, reportedBy, routing);
  if (refused === undefined && routing !== undefined) routing.finish(m);
  return refused;
}

function negativeOf(m: Records, reportedBy: number): StatusEntry | undefined {
  const W = m.world;
  const E = m.header(0, RecordField.experts);
  const n = W * E;
  for (let q = 0; q < W; q++) {
    const w = m.words[q];
    const first = m.countAt(q, 0, 0, false, E);
    // Every kind keeps its n counts first: a quick scan, then the lowest (r, e) if one is negative.
    let i = 0;
    while (i < n && w[first + 2 * i + 1] >= 0) i++;
    if (i < n) return lowestNegative(m, q, reportedBy);
  }
  return undefined;
}

function lowestNegative(m: Records, q: number, reportedBy: number): StatusEntry {
  const E = m.header(0, RecordField.experts);
  const combine = m.kind(0) === 'combine';
  const w = m.words[q];
  for (let r = 0; r < m.world; r++) {
    for (let e = 0; e < E; e++) {
      const at = m.countAt(q, r, e, combine, E);
      if (w[at + 1] < 0) return entryMaker(m, reportedBy)(StatusCode.negative, q, r, e, exact(w, at), 0n);
    }
  }
  throw new Error('exchange rules: a negative count vanished');
}

function inputOf(m: Records, reportedBy: number): StatusEntry | undefined {
  const W = m.world;
  const E = m.header(0, RecordField.experts);
  const combine = m.kind(0) === 'combine';
  const n = W * E;
  for (let q = 0; q < W; q++) {
    const w = m.words[q];
    const cap = m.header(q, RecordField.inRows);
    const first = m.countAt(q, 0, 0, false, E);
    if (combine) {
      // Offsets follow the counts, index for index: any chunk outside? Then find the lowest (r, e).
      const offsets = first + 2 * n;
      let k = 0;
      while (k < n && w[offsets + 2 * k + 1] >= 0 && num(w, offsets + 2 * k) + num(w, first + 2 * k) <= cap) k++;
      if (k < n) return combineInputFault(m, q, reportedBy);
      continue;
    }
    // Packed in (r, e) order, the record's own order.
    let sum = 0;
    for (let i = 0; i < n; i++) {
      const c = w[first + 2 * i + 1] * TWO32 + (w[first + 2 * i] >>> 0);
      if (c > cap - sum) {
        let total = 0n;
        for (let k = 0; k < n; k++) total = satAdd(total, exact(w, first + 2 * k));
        return entryMaker(m, reportedBy)(StatusCode.inputOverflow, q, Math.floor(i / E), i % E, total, BigInt(cap));
      }
      sum += c;
    }
  }
  return undefined;
}

function combineInputFault(m: Records, q: number, reportedBy: number): StatusEntry {
  const E = m.header(0, RecordField.experts);
  const w = m.words[q];
  const cap = m.header(q, RecordField.inRows);
  for (let r = 0; r < m.world; r++) {
    for (let e = 0; e < E; e++) {
      const oAt = m.offsetAt(q, r, e, E);
      const cAt = m.countAt(q, r, e, true, E);
      const negative = w[oAt + 1] < 0;
      if (!negative && num(w, oAt) + num(w, cAt) <= cap) continue;
      const needed = negative ? exact(w, oAt) : satAdd(exact(w, oAt), exact(w, cAt));
      return entryMaker(m, reportedBy)(StatusCode.inputOverflow, q, r, e, needed, BigInt(cap));
    }
  }
  throw new Error('exchange rules: a chunk outside the input vanished');
}

/**
 * Walks every receiver's layout once: the output rule, and (routing) where this rank's chunks land
 * in each receiver's output and where each source's land in its own. Sums first, in the records'
 * own order; only a receiver whose total passes its output is walked again, in layout order, to
 * find where.
 */
function layOut(m: Records, reportedBy: number, routing: Routing | undefined): StatusEntry | undefined {
  const W = m.world;
  const E = m.header(0, RecordField.experts);
  const dispatch = m.kind(0) === 'dispatch';
  const combine = m.kind(0) === 'combine';
  const me = routing?.rank ?? -1;
  routing?.begin(m);
  const dstOf = routing?.dstOf;
  const used = dispatch ? new Float64Array(E) : undefined;
  for (let r = 0; r < W; r++) {
    const cap = m.header(r, RecordField.outRows);
    let total = 0;
    if (used !== undefined) {
      // Expert-major: each source's counts for r are contiguous (r·E ..); sum them per expert.
      used.fill(0);
      for (let src = 0; src < W; src++) {
        const w = m.words[src];
        const at = m.countAt(src, r, 0, false, E);
        if (src === me) for (let e = 0; e < E; e++) dstOf![r * E + e] = used[e];
        for (let e = 0; e < E; e++) used[e] += w[at + 2 * e + 1] * TWO32 + (w[at + 2 * e] >>> 0);
      }
      const align = m.header(r, RecordField.align);
      for (let e = 0; e < E; e++) {
        const u = used[e];
        if (me >= 0) dstOf![r * E + e] += total; // the block's start
        total += u === 0 ? align : u + ((align - (u % align)) % align);
      }
      if (total <= cap && r === me) receivedDispatch(m, routing!, E);
    } else {
      const mine = r === me;
      for (let src = 0; src < W; src++) {
        const w = m.words[src];
        for (let e = 0; e < E; e++) {
          const c = num(w, m.countAt(src, r, e, combine, E));
          if (src === me) dstOf![r * E + e] = total;
          if (mine) routing!.received(src, e, c, total);
          total += c;
        }
      }
    }
    if (total > cap) return outputFault(m, r, reportedBy);
  }
  return undefined;
}

/** Rank me's own output of an accepted dispatch: where each (src, e) starts. */
function receivedDispatch(m: Records, routing: Routing, E: number): void {
  const W = m.world;
  const me = routing.rank;
  const align = m.header(me, RecordField.align);
  let pos = 0;
  for (let e = 0; e < E; e++) {
    const blockStart = pos;
    for (let src = 0; src < W; src++) {
      const c = num(m.words[src], m.countAt(src, me, e, false, E));
      routing.received(src, e, c, pos);
      pos += c;
    }
    const u = pos - blockStart;
    pos = blockStart + (u === 0 ? align : u + ((align - (u % align)) % align));
  }
}

/** Receiver r's layout passes its output: the first (source, expert) where it does, in layout order. */
function outputFault(m: Records, r: number, reportedBy: number): StatusEntry {
  const W = m.world;
  const E = m.header(0, RecordField.experts);
  const kind = m.kind(0);
  const cap = m.header(r, RecordField.outRows);
  const fault = (peer: number, expert: number): StatusEntry =>
    entryMaker(m, reportedBy)(StatusCode.outputOverflow, r, peer, expert, layoutTotal(m, r), BigInt(cap));
  let pos = 0;
  if (kind === 'dispatch') {
    const align = m.header(r, RecordField.align);
    for (let e = 0; e < E; e++) {
      const blockStart = pos;
      for (let src = 0; src < W; src++) {
        const c = num(m.words[src], m.countAt(src, r, e, false, E));
        if (c > cap - pos) return fault(src, e);
        pos += c;
      }
      const u = pos - blockStart;
      pos = blockStart + (u === 0 ? align : u + ((align - (u % align)) % align));
      if (pos > cap) return fault(-1, e);
    }
  } else {
    for (let src = 0; src < W; src++) {
      for (let e = 0; e < E; e++) {
        const c = num(m.words[src], m.countAt(src, r, e, kind === 'combine', E));
        if (c > cap - pos) return fault(src, e);
        pos += c;
      }
    }
  }
  throw new Error(`exchange rules: receiver ${r}'s total passes its output but no chunk does`);
}

/** Rows receiver r's layout takes in all, exactly (saturated): what an output refusal reports. */
export function layoutTotal(m: Records, r: number): bigint {
  const W = m.world;
  const E = m.header(0, RecordField.experts);
  const kind = m.kind(0);
  const at = (src: number, e: number): bigint => exact(m.words[src], m.countAt(src, r, e, kind === 'combine', E));
  let pos = 0n;
  if (kind !== 'dispatch') {
    for (let src = 0; src < W; src++) for (let e = 0; e < E; e++) pos = satAdd(pos, at(src, e));
    return pos;
  }
  const align = BigInt(m.header(r, RecordField.align));
  for (let e = 0; e < E; e++) {
    const blockStart = pos;
    for (let src = 0; src < W; src++) pos = satAdd(pos, at(src, e));
    const used = pos - blockStart;
    pos = satAdd(blockStart, used === 0n ? align : satAdd(used, (align - (used % align)) % align));
  }
  return pos;
}

/** INT64_MAX, for callers that build counts: what a saturated sum reads as. */
export { INT64_MAX };
