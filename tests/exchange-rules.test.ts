// The exchange rules (src/collectives/exchange-rules.ts) against a plain reference of the rules as
// its header states them, written the obvious way with exact BigInt sums: verdict and fields, every
// receiver's outSplitsOffsets and every sender's chunks, for the 1-D call, dispatch and combine,
// on random calls with every kind of fault, counts past 2^53 and sums past int64.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { recordsOf, sendChunks, splitsOffsets, verdict, type Chunk, type RankCall } from '../src/collectives/exchange-calls.js';
import { ExchangeKind, judge } from '../src/collectives/exchange-rules.js';
import { Routing } from '../src/collectives/exchange-routing.js';
import { MismatchCode, StatusCode, type StatusEntry } from '../src/collectives/status.js';
import { Rng } from './conformance/reference.js';

const MAX = 0x7fffffffffffffffn;
const cap = (x: bigint): bigint => (x > MAX ? MAX : x);
const FIELDS = ['kind', 'rowBytes', 'outId', 'experts', 'align'] as const;
/** What a mismatch of each names (its record's expert word). */
const NAMED = { kind: 'kind', rowBytes: 'rowBytes', outId: 'output', experts: 'expertsPerRank', align: 'majorAlign' } as const;

interface Call {
  kind: ExchangeKind;
  rowBytes: number;
  outId: number;
  experts: number;
  align: number;
  inRows: number;
  outRows: number;
  /** C[r][e]: rows to expert e of rank r; off[r][e] (combine) where that chunk starts. */
  C: bigint[][];
  off: bigint[][];
}

// A rank whose E differs (a mismatch) is asked for counts past its arrays: zeros.
const asRankCall = (c: Call): RankCall => ({ ...c, count: (r, e) => c.C[r][e] ?? 0n, offset: (r, e) => c.off[r][e] ?? 0n });

/** Receiver r's chunks in layout order, with their starts, and the padded total (exact, unbounded). */
function layout(calls: Call[], r: number): { src: number; e: number; start: bigint; rows: bigint }[] & { total?: bigint; padFault?: number } {
  const W = calls.length;
  const E = calls[0].experts;
  const out: { src: number; e: number; start: bigint; rows: bigint }[] & { total?: bigint } = [];
  let pos = 0n;
  if (calls[0].kind === 'dispatch') {
    const align = BigInt(calls[r].align);
    for (let e = 0; e < E; e++) {
      const begin = pos;
      for (let src = 0; src < W; src++) {
        out.push({ src, e, start: pos, rows: calls[src].C[r][e] });
        pos += calls[src].C[r][e];
      }
      const used = pos - begin;
      const len = used === 0n ? align : ((used + align - 1n) / align) * align;
      out.push({ src: -1, e, start: begin + len, rows: 0n }); // marks the block's end
      pos = begin + len;
    }
  } else {
    for (let src = 0; src < W; src++) {
      for (let e = 0; e < E; e++) {
        out.push({ src, e, start: pos, rows: calls[src].C[r][e] });
        pos += calls[src].C[r][e];
      }
    }
  }
  out.total = pos;
  return out;
}

function reference(calls: Call[], by: number): StatusEntry | undefined {
  const W = calls.length;
  const E = calls[0].experts;
  const x = (e: number) => (calls[0].kind === '1d' ? -1 : e);
  const entry = (code: StatusCode, rank: number, peer: number, expert: number, needed: bigint, available: bigint): StatusEntry => ({ code, rank, peer, needed, available, reportedBy: by, expert: x(expert) });
  const value = (c: Call, f: (typeof FIELDS)[number]) => BigInt(f === 'kind' ? ExchangeKind[c.kind] : c[f]);
  for (let q = 1; q < W; q++) {
    for (const f of FIELDS) {
      if (value(calls[q], f) !== value(calls[0], f)) return { code: StatusCode.mismatch, rank: q, peer: 0, needed: value(calls[q], f), available: value(calls[0], f), reportedBy: by, expert: MismatchCode[NAMED[f]] };
    }
  }
  for (let q = 0; q < W; q++) for (let r = 0; r < W; r++) for (let e = 0; e < E; e++) if (calls[q].C[r][e] < 0n) return entry(StatusCode.negative, q, r, e, calls[q].C[r][e], 0n);
  for (let q = 0; q < W; q++) {
    const c = calls[q];
    const inRows = BigInt(c.inRows);
    if (c.kind === 'combine') {
      for (let r = 0; r < W; r++) {
        for (let e = 0; e < E; e++) {
          if (c.off[r][e] < 0n) return entry(StatusCode.inputOverflow, q, r, e, c.off[r][e], inRows);
          const end = c.off[r][e] + c.C[r][e];
          if (end > inRows) return entry(StatusCode.inputOverflow, q, r, e, cap(end), inRows);
        }
      }
      continue;
    }
    const total = c.C.flat().reduce((a, b) => a + b, 0n);
    let sum = 0n;
    for (let r = 0; r < W; r++) for (let e = 0; e < E; e++) if ((sum += c.C[r][e]) > inRows) return entry(StatusCode.inputOverflow, q, r, e, cap(total), inRows);
  }
  for (let r = 0; r < W; r++) {
    const outRows = BigInt(calls[r].outRows);
    const lay = layout(calls, r);
    for (const p of lay) {
      const end = p.start + p.rows;
      if (p.src >= 0 && end > outRows) return entry(StatusCode.outputOverflow, r, p.src, p.e, cap(lay.total!), outRows);
      if (p.src < 0 && p.start > outRows) return entry(StatusCode.outputOverflow, r, -1, p.e, cap(lay.total!), outRows);
    }
  }
  return undefined;
}

function refSplitsOffsets(calls: Call[], r: number): bigint[] {
  const W = calls.length;
  const E = calls[0].experts;
  const n = W * E;
  const out = new Array<bigint>(2 * n).fill(0n);
  for (const p of layout(calls, r)) {
    if (p.src < 0) continue;
    const i = calls[0].kind === 'dispatch' ? p.e * W + p.src : p.src * E + p.e;
    out[i] = p.rows;
    out[n + i] = p.start;
  }
  return out;
}

function refChunks(calls: Call[], q: number): Chunk[] {
  const W = calls.length;
  const E = calls[0].experts;
  const chunks: Chunk[] = [];
  let src = 0n;
  for (let r = 0; r < W; r++) {
    const lay = layout(calls, r);
    for (let e = 0; e < E; e++) {
      const rows = calls[q].C[r][e];
      const srcRow = calls[q].kind === 'combine' ? calls[q].off[r][e] : src;
      src += rows;
      if (rows === 0n) continue;
      const at = lay.find((p) => p.src === q && p.e === e)!;
      chunks.push({ peer: r, expert: e, rows: Number(rows), srcRow: Number(srcRow), dstRow: Number(at.start) });
    }
  }
  return chunks;
}

/** A random call of every rank: valid, or with one fault of any kind, capacities at the edge. */
function randomCalls(rng: Rng): Call[] {
  const W = 1 + rng.int(6);
  const E = rng.pick([1, 1, 2, 3, 5, 8]);
  const kind = rng.pick(['1d', 'dispatch', 'combine'] as const);
  const experts = kind === '1d' ? 1 : E;
  const align = kind === 'dispatch' ? rng.pick([1, 1, 2, 3, 8, 16]) : 1;
  const calls: Call[] = Array.from({ length: W }, () => ({
    kind, rowBytes: 16, outId: 3, experts, align, inRows: 0, outRows: 0,
    C: Array.from({ length: W }, () => Array.from({ length: experts }, () => BigInt(rng.int(3) === 0 ? 0 : rng.int(9)))),
    off: Array.from({ length: W }, () => new Array<bigint>(experts).fill(0n)),
  }));
  const fault = rng.int(12);
  const [q, r, e] = [rng.int(W), rng.int(W), rng.int(experts)];
  if (fault === 0) calls[q].C[r][e] = -BigInt(1 + rng.int(3));
  if (fault === 1) calls[q].C[r][e] = rng.pick([1n << 53n, (1n << 53n) + 1n, 1n << 62n, MAX]);
  if (fault === 2 && W > 1) calls[q].C[r][e] = calls[(q + 1) % W].C[r][e] = rng.pick([1n << 62n, MAX]);
  for (const c of calls) {
    // combine: explicit offsets, chunks in (e, r) order with random gaps (as dispatch's padding).
    let at = 0n;
    for (let e2 = 0; e2 < experts; e2++) for (let r2 = 0; r2 < W; r2++) { at += BigInt(rng.int(3)); c.off[r2][e2] = cap(at); at += c.C[r2][e2] > 0n ? c.C[r2][e2] : 0n; }
    const need = kind === 'combine' ? at : c.C.flat().reduce((a, b) => a + (b > 0n ? b : 0n), 0n);
    c.inRows = Number(need > 1n << 50n ? 1n << 50n : need) + rng.int(4) - (fault === 3 ? 2 : 0);
  }
  if (fault === 4 && kind === 'combine') calls[q].off[r][e] = rng.pick([-1n, -(1n << 40n), BigInt(calls[q].inRows), MAX]);
  for (let r2 = 0; r2 < W; r2++) {
    const total = layout(calls.map((c) => ({ ...c, C: c.C.map((row) => row.map((x) => (x > 0n ? x : 0n))) })), r2).total!;
    calls[r2].outRows = Number(total > 1n << 50n ? 1n << 50n : total) + rng.int(4) - (fault === 5 ? 2 : 0);
  }
  for (const c of calls) [c.inRows, c.outRows] = [Math.max(0, c.inRows), Math.max(0, c.outRows)];
  if (fault >= 6 && fault <= 10 && W > 1) {
    const f = FIELDS[fault - 6];
    const odd = calls[rng.int(W)];
    if (f === 'kind') odd.kind = kind === 'combine' ? 'dispatch' : 'combine';
    else odd[f] += 1 + rng.int(2);
  }
  return calls;
}

describe('exchange rules', () => {
  it('judge the same as the reference on 6000 random calls of every kind, with the same fields', () => {
    const rng = new Rng(20261130);
    const seen = new Set<string>();
    for (let i = 0; i < 6000; i++) {
      const calls = randomCalls(rng);
      const by = rng.int(calls.length);
      const rank = calls.map(asRankCall);
      const got = verdict(rank, by);
      const want = reference(calls, by);
      const show = () => `call ${i}: ${JSON.stringify(calls, (_, v) => (typeof v === 'bigint' ? v.toString() : v))}`;
      assert.deepEqual(got, want, show());
      seen.add(`${calls[0].kind} ${got?.code ?? 0}${got?.peer === -1 ? ' padding' : ''}${got && got.needed >= MAX ? ' overflow' : ''}`);
      if (got) continue;
      for (let r = 0; r < calls.length; r++) {
        assert.deepEqual([...splitsOffsets(rank, r)], refSplitsOffsets(calls, r), `${show()}: outSplitsOffsets of rank ${r}`);
        assert.deepEqual(sendChunks(rank, r), refChunks(calls, r), `${show()}: chunks of rank ${r}`);
      }
    }
    for (const kind of ['1d', 'dispatch', 'combine']) {
      for (const code of [0, 1, 2, 3, 4]) assert.ok(seen.has(`${kind} ${code}`), `${kind} with outcome ${code} was exercised`);
      assert.ok(seen.has(`${kind} 2 overflow`), `${kind}: an input sum past int64`);
    }
    assert.ok(seen.has('dispatch 3 padding'), 'an expert\'s padding past the output');
  });

  it('an expert that receives nothing still takes `align` rows', () => {
    const C = [[0n, 3n]];
    const call: Call = { kind: 'dispatch', rowBytes: 1, outId: 0, experts: 2, align: 4, inRows: 3, outRows: 8, C, off: [[0n, 0n]] };
    assert.deepEqual([...splitsOffsets([asRankCall(call)], 0)], [0n, 3n, 0n, 4n]);
    assert.deepEqual(verdict([asRankCall({ ...call, outRows: 7 })], 0), { code: StatusCode.outputOverflow, rank: 0, peer: -1, expert: 1, needed: 8n, available: 7n, reportedBy: 0 });
  });

  it('judges W = 72, E = 256 (1.3 M counts) in well under a second, and routes every rank', () => {
    const W = 72;
    const E = 256;
    const rng = new Rng(9);
    const C = Array.from({ length: W }, () => Array.from({ length: W }, () => Array.from({ length: E }, () => BigInt(rng.int(3)))));
    const calls: RankCall[] = C.map((rows) => ({ kind: 'dispatch', rowBytes: 8, outId: 0, experts: E, align: 8, inRows: 1 << 20, outRows: 1 << 20, count: (r, e) => rows[r][e] }));
    const m = recordsOf(calls);
    const routing = new Routing(5, W);
    const started = performance.now();
    assert.equal(judge(m, 5, routing), undefined);
    const ms = performance.now() - started;
    assert.equal(routing.chunks, C[5].flat().filter((x) => x > 0n).length);
    assert.ok(ms < 1000, `took ${ms.toFixed(0)} ms`);
  });
});
