// The nccl backend's host side, with no GPU: the 1-D call's records gathered as ncclAllGather lays
// them out, judged by the shared rules (src/collectives/exchange-rules.ts) against a plain reference
// of the 1-D rules; and the copies and send/receive pairs of src/backends/nccl/transfers.ts, run on
// host memory for every rank of random dispatch, combine and 1-D calls, against the rows the
// routing says should land.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { routingOf, type RankCall } from '../src/collectives/exchange-calls.js';
import { judge, RECORD_HEADER_WORDS, Records, writeHeader } from '../src/collectives/exchange-rules.js';
import { Routing } from '../src/collectives/exchange-routing.js';
import { MismatchCode, readStatus, StatusCode, type StatusEntry } from '../src/collectives/status.js';
import { firstGatherWords, INLINE_EXPERTS, transfers, type TransferPlan } from '../src/backends/nccl/transfers.js';
import { Rng } from './conformance/reference.js';

interface Call {
  S: bigint[][];
  inRows: bigint[];
  outRows: bigint[];
  rowBytes: bigint[];
  outId: bigint[];
}

/** What every rank's ncclAllGather delivers for a 1-D call: each rank's record, W + 7 words apart. */
function gathered(c: Call): Records {
  const W = c.S.length;
  const PW = firstGatherWords('1d', W);
  const all = new BigInt64Array(W * PW);
  const w = new Int32Array(all.buffer);
  const m = new Records(W);
  for (let q = 0; q < W; q++) {
    writeHeader(w, 2 * q * PW, { kind: '1d', rowBytes: Number(c.rowBytes[q]), outId: Number(c.outId[q]), experts: 1, align: 1, inRows: Number(c.inRows[q]), outRows: Number(c.outRows[q]), plan: 0 });
    all.set(c.S[q], q * PW + RECORD_HEADER_WORDS);
    m.words[q] = w;
    m.base[q] = 2 * q * PW;
  }
  return m;
}

/** The 1-D rules as the README states them, written the obvious way. */
function reference(c: Call, by: number): StatusEntry | undefined {
  const W = c.S.length;
  const e = (code: StatusCode, rank: number, peer: number, needed: bigint, available: bigint): StatusEntry => ({ code, rank, peer, needed, available, reportedBy: by, expert: -1 });
  for (let q = 0; q < W; q++) {
    if (c.rowBytes[q] !== c.rowBytes[0]) return { ...e(StatusCode.mismatch, q, 0, c.rowBytes[q], c.rowBytes[0]), expert: MismatchCode.rowBytes };
    if (c.outId[q] !== c.outId[0]) return { ...e(StatusCode.mismatch, q, 0, c.outId[q], c.outId[0]), expert: MismatchCode.output };
  }
  for (let q = 0; q < W; q++) for (let r = 0; r < W; r++) if (c.S[q][r] < 0n) return e(StatusCode.negative, q, r, c.S[q][r], 0n);
  const cap = (x: bigint) => (x > 0x7fffffffffffffffn ? 0x7fffffffffffffffn : x);
  for (let q = 0; q < W; q++) {
    let sum = 0n;
    const total = c.S[q].reduce((a, b) => a + b, 0n);
    for (let r = 0; r < W; r++) if ((sum += c.S[q][r]) > c.inRows[q]) return e(StatusCode.inputOverflow, q, r, cap(total), c.inRows[q]);
  }
  for (let r = 0; r < W; r++) {
    let sum = 0n;
    const total = c.S.reduce((a, row) => a + row[r], 0n);
    for (let q = 0; q < W; q++) if ((sum += c.S[q][r]) > c.outRows[r]) return e(StatusCode.outputOverflow, r, q, cap(total), c.outRows[r]);
  }
  return undefined;
}

function randomCall(rng: Rng): Call {
  const W = 1 + rng.int(6);
  const S = Array.from({ length: W }, () => Array.from({ length: W }, () => BigInt(rng.int(4) === 0 ? 0 : rng.int(9))));
  const fault = rng.int(9);
  if (fault === 0) S[rng.int(W)][rng.int(W)] = -BigInt(1 + rng.int(3));
  if (fault === 5) S[rng.int(W)][rng.int(W)] = 0x7fffffffffffffffn;
  const rowSum = (q: number) => S[q].reduce((a, b) => a + (b > 0n && b < 1n << 40n ? b : 0n), 0n);
  const colSum = (r: number) => S.reduce((a, row) => a + (row[r] > 0n && row[r] < 1n << 40n ? row[r] : 0n), 0n);
  // Capacities at, just below or above what the matrix needs.
  const slack = () => BigInt(rng.int(5) - (fault === 1 || fault === 2 ? 2 : 0));
  const inRows = Array.from({ length: W }, (_, q) => { const v = rowSum(q) + slack(); return v < 0n ? 0n : v; });
  const outRows = Array.from({ length: W }, (_, r) => { const v = colSum(r) + slack(); return v < 0n ? 0n : v; });
  const rowBytes = Array.from({ length: W }, () => 16n);
  const outId = Array.from({ length: W }, () => 3n);
  if (fault === 3) rowBytes[rng.int(W)] = 17n;
  if (fault === 4) outId[rng.int(W)] = 4n;
  return { S, inRows, outRows, rowBytes, outId };
}

describe('nccl backend: the 1-D call\'s gathered records, judged by the shared rules', () => {
  it('refuses exactly what the reference refuses, with the same fields, on 5000 random calls', () => {
    const rng = new Rng(20260601);
    const seen = new Set<number>();
    for (let i = 0; i < 5000; i++) {
      const c = randomCall(rng);
      const by = rng.int(c.S.length);
      const got = judge(gathered(c), by);
      assert.deepEqual(got, reference(c, by), `call ${i}: ${JSON.stringify(c, (_, v) => (typeof v === 'bigint' ? Number(v) : v))}`);
      seen.add(got?.code ?? 0);
    }
    assert.deepEqual([...seen].sort(), [0, 1, 2, 3, 4], 'every outcome was exercised');
  });

  it('a refused entry decodes like the other backends\' status records', () => {
    const c: Call = { S: [[-3n]], inRows: [0n], outRows: [0n], rowBytes: [8n], outId: [0n] };
    const entry = judge(gathered(c), 0)!;
    const record = new BigInt64Array([BigInt(entry.code), 0n, 0n, -3n, 0n, 0n, 0n, -1n]);
    assert.deepEqual(readStatus(record), entry);
  });

  it('a MoE call\'s first gather holds the counts of up to 16 experts of combine, 32 of dispatch', () => {
    for (const W of [1, 2, 8, 72]) {
      assert.equal(firstGatherWords('moe', W) - RECORD_HEADER_WORDS, 2 * W * INLINE_EXPERTS);
      assert.equal(firstGatherWords('1d', W), RECORD_HEADER_WORDS + W);
      assert.equal(firstGatherWords('move', W), RECORD_HEADER_WORDS);
    }
  });
});

/** Runs every rank's transfer plan on host memory: copies, then each send matched with its receive. */
function simulate(plans: TransferPlan[], inputs: Uint8Array[], outputs: Uint8Array[]): void {
  const scratch = plans.map((t) => new Uint8Array(t.scratchBytes));
  const copy = (dst: Uint8Array, src: Uint8Array, c: { dst: number; src: number; bytes: number }) => dst.set(src.subarray(c.src, c.src + c.bytes), c.dst);
  plans.forEach((t, q) => {
    for (const c of t.gather) copy(scratch[q], inputs[q], c);
    for (const c of t.local) copy(outputs[q], inputs[q], c);
  });
  plans.forEach((t, q) => {
    for (const s of t.sends) {
      const matches = plans[s.peer].recvs.filter((r) => r.peer === q);
      assert.equal(matches.length, 1, `rank ${s.peer} posts one receive from rank ${q}`);
      const r = matches[0];
      assert.equal(r.bytes, s.bytes, `rank ${q} -> ${s.peer}: send and receive sizes`);
      const from = (s.scratch ? scratch[q] : inputs[q]).subarray(s.offset, s.offset + s.bytes);
      (r.scratch ? scratch[s.peer] : outputs[s.peer]).set(from, r.offset);
    }
    for (const r of t.recvs) assert.ok(plans[r.peer].sends.some((s) => s.peer === q), `rank ${r.peer} sends what rank ${q} receives`);
  });
  plans.forEach((t, q) => {
    for (const c of t.scatter) copy(outputs[q], scratch[q], c);
  });
}

/** A random accepted call of `kind` on every rank: dispatch's offsets feed combine. */
function randomMoe(rng: Rng, kind: '1d' | 'dispatch' | 'combine'): RankCall[] {
  const W = 1 + rng.int(5);
  const E = kind === '1d' ? 1 : rng.pick([1, 2, 3, 5]);
  const align = kind === 'dispatch' ? rng.pick([1, 4]) : 1;
  const C = Array.from({ length: W }, () => Array.from({ length: W }, () => Array.from({ length: E }, () => (rng.int(3) === 0 ? 0 : rng.int(4)))));
  const big = 1 << 20;
  if (kind !== 'combine') return C.map((rows) => ({ kind, rowBytes: 1, outId: 0, experts: E, align, inRows: big, outRows: big, count: (r, e) => BigInt(rows[r][e]) }));
  // combine: rank q returns what it received in a dispatch of C, from dispatch's padded offsets.
  const dispatched = randomMoeFrom(C, E, rng.pick([1, 4]));
  return Array.from({ length: W }, (_, q) => ({ kind, rowBytes: 1, outId: 0, experts: E, align: 1, inRows: big, outRows: big, count: (r, e) => dispatched[q].counts[e * W + r], offset: (r, e) => dispatched[q].starts[e * W + r] }));
}

function randomMoeFrom(C: number[][][], E: number, align: number): { counts: bigint[]; starts: bigint[] }[] {
  const W = C.length;
  const calls: RankCall[] = C.map((rows) => ({ kind: 'dispatch', rowBytes: 1, outId: 0, experts: E, align, inRows: 1 << 20, outRows: 1 << 20, count: (r, e) => BigInt(rows[r][e]) }));
  return Array.from({ length: W }, (_, r) => {
    const t = routingOf(calls, r);
    return { counts: [...t.outCounts.subarray(0, W * E)].map(BigInt), starts: [...t.outStarts.subarray(0, W * E)].map(BigInt) };
  });
}

describe('nccl backend: rows moved by copies and one send/receive pair per peer', () => {
  it('land where the routing says, for 1500 random dispatch, combine and 1-D calls and row sizes', () => {
    const rng = new Rng(77);
    for (let i = 0; i < 1500; i++) {
      const kind = rng.pick(['1d', 'dispatch', 'combine'] as const);
      const calls = randomMoe(rng, kind);
      const W = calls.length;
      const rowBytes = rng.pick([1, 3, 16]);
      const routings: Routing[] = calls.map((_, q) => routingOf(calls, q));
      const inputs = calls.map(() => Uint8Array.from({ length: 64 * rowBytes * W * 6 }, () => rng.int(256)));
      const outputs = calls.map(() => new Uint8Array(64 * rowBytes * W * 6).fill(0xee));
      const want = outputs.map((o) => o.slice());
      routings.forEach((t, q) => {
        for (let k = 0; k < t.chunks; k++) want[t.peer[k]].set(inputs[q].subarray(t.srcRow[k] * rowBytes, (t.srcRow[k] + t.rows[k]) * rowBytes), t.dstRow[k] * rowBytes);
      });
      const plans = routings.map((t) => transfers(t, rowBytes));
      simulate(plans, inputs, outputs);
      for (let r = 0; r < W; r++) assert.deepEqual(outputs[r], want[r], `call ${i} (${kind}, W ${W}, rowBytes ${rowBytes}): rank ${r}'s output`);
      for (const [q, t] of plans.entries()) {
        assert.ok(t.sends.length <= W - 1 && t.recvs.length <= W - 1, `rank ${q}: at most one send and one receive per peer`);
        if (kind === '1d') assert.equal(t.scratchBytes, 0, '1-D rows go straight from the input into the output');
      }
    }
  });
});
