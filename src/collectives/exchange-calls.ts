// The exchange rules over plain descriptions of every rank's call (RankCall), for tests and host
// tools: each call is written into a record as a backend would publish it, then judged by
// exchange-rules.ts, so there is one implementation of the rules.
import { ExchangeKind, judge, RECORD_HEADER_WORDS, recordDataWords, Records, writeHeader, type RecordHeader } from './exchange-rules.js';
import { Routing } from './exchange-routing.js';
import type { StatusEntry } from './status.js';

/** What rank q publishes for a call: its header and its row of the split matrix. */
export interface RankCall extends Omit<RecordHeader, 'plan'> {
  /** RecordHeader's plan word (default 0: a direct call). */
  plan?: number;
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

/** Every rank's record, as the backends publish them. */
export function recordsOf(calls: readonly RankCall[]): Records {
  const W = calls.length;
  const m = new Records(W);
  calls.forEach((c, q) => {
    const E = c.experts;
    const words = new BigInt64Array(RECORD_HEADER_WORDS + recordDataWords(c.kind, W, E));
    const w = new Int32Array(words.buffer);
    writeHeader(w, 0, { ...c, plan: c.plan ?? 0 });
    for (let r = 0; r < W; r++) {
      for (let e = 0; e < E; e++) {
        const i = c.kind === 'combine' ? e * W + r : r * E + e;
        words[RECORD_HEADER_WORDS + i] = c.count(r, e);
        if (c.kind === 'combine') words[RECORD_HEADER_WORDS + E * W + i] = c.offset!(r, e);
      }
    }
    m.words[q] = w;
    m.base[q] = 0;
  });
  return m;
}

/** The verdict on the calls every rank made (by rank), or undefined when they may run. */
export function verdict(calls: readonly RankCall[], reportedBy: number): StatusEntry | undefined {
  return judge(recordsOf(calls), reportedBy);
}

/** Rank `me`'s routing of an accepted call (throws if the call is refused). */
export function routingOf(calls: readonly RankCall[], me: number): Routing {
  const routing = new Routing(me, calls.length);
  const refused = judge(recordsOf(calls), me, routing);
  if (refused) throw new Error(`the call is refused (code ${refused.code}, rank ${refused.rank})`);
  return routing;
}

/** outSplitsOffsets of receiver r for an accepted call: int64[2][W·E] in the kind's order. */
export function splitsOffsets(calls: readonly RankCall[], r: number): BigInt64Array {
  const routing = routingOf(calls, r);
  const out = new BigInt64Array(routing.splitsOffsetsWords);
  routing.writeSplitsOffsets(new Int32Array(out.buffer));
  return out;
}

/** What rank q sends for an accepted call: one chunk per (peer, expert) with rows, in (peer, expert) order. */
export function sendChunks(calls: readonly RankCall[], q: number): Chunk[] {
  const t = routingOf(calls, q);
  return Array.from({ length: t.chunks }, (_, k) => ({ peer: t.peer[k], expert: t.expert[k], rows: t.rows[k], srcRow: t.srcRow[k], dstRow: t.dstRow[k] }));
}

export { ExchangeKind };
