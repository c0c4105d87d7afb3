// The nccl backend's host-side check and layout (src/backends/nccl/plan.ts) against a plain
// reference of the documented rules, on random matrices with every kind of fault. Needs no GPU.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { HEADER_WORDS, payloadWords, SplitPlan } from '../src/backends/nccl/plan.js';
import { readStatus, StatusCode, type StatusEntry } from '../src/collectives/status.js';
import { Rng } from './conformance/reference.js';

interface Call {
  S: bigint[][];
  inRows: bigint[];
  outRows: bigint[];
  rowBytes: bigint[];
  outId: bigint[];
}

/** What every rank's ncclAllGather delivers: each rank's header, then its splits. */
function gathered(c: Call): BigInt64Array {
  const W = c.S.length;
  const PW = payloadWords(W);
  const all = new BigInt64Array(W * PW);
  for (let q = 0; q < W; q++) {
    all.set([c.inRows[q], c.outRows[q], c.rowBytes[q], c.outId[q], ...c.S[q]], q * PW);
  }
  return all;
}

/** The rules as the README and the CPU backend state them, written the obvious way. */
function reference(c: Call, by: number): StatusEntry | undefined {
  const W = c.S.length;
  const e = (code: StatusCode, rank: number, peer: number, needed: bigint, available: bigint): StatusEntry => ({ code, rank, peer, needed, available, reportedBy: by, expert: -1 });
  for (let q = 0; q < W; q++) {
    if (c.rowBytes[q] !== c.rowBytes[0]) return e(StatusCode.mismatch, q, 0, c.rowBytes[q], c.rowBytes[0]);
    if (c.outId[q] !== c.outId[0]) return e(StatusCode.mismatch, q, 0, c.outId[q], c.outId[0]);
  }
  for (let q = 0; q < W; q++) for (let r = 0; r < W; r++) if (c.S[q][r] < 0n) return e(StatusCode.negative, q, r, c.S[q][r], 0n);
  for (let q = 0; q < W; q++) {
    let sum = 0n;
    const total = c.S[q].reduce((a, b) => a + b, 0n);
    for (let r = 0; r < W; r++) if ((sum += c.S[q][r]) > c.inRows[q]) return e(StatusCode.inputOverflow, q, r, total, c.inRows[q]);
  }
  for (let r = 0; r < W; r++) {
    let sum = 0n;
    const total = c.S.reduce((a, row) => a + row[r], 0n);
    for (let q = 0; q < W; q++) if ((sum += c.S[q][r]) > c.outRows[r]) return e(StatusCode.outputOverflow, r, q, total, c.outRows[r]);
  }
  return undefined;
}

function randomCall(rng: Rng): Call {
  const W = 1 + rng.int(6);
  const S = Array.from({ length: W }, () => Array.from({ length: W }, () => BigInt(rng.int(4) === 0 ? 0 : rng.int(9))));
  const fault = rng.int(8);
  if (fault === 0) S[rng.int(W)][rng.int(W)] = -BigInt(1 + rng.int(3));
  const rowSum = (q: number) => S[q].reduce((a, b) => a + (b > 0n ? b : 0n), 0n);
  const colSum = (r: number) => S.reduce((a, row) => a + (row[r] > 0n ? row[r] : 0n), 0n);
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

describe('nccl backend: host-side split check', () => {
  it('refuses exactly what the reference refuses, with the same fields, on 5000 random calls', () => {
    const rng = new Rng(20260601);
    const seen = new Set<number>();
    for (let i = 0; i < 5000; i++) {
      const c = randomCall(rng);
      const by = rng.int(c.S.length);
      const got = new SplitPlan(c.S.length).check(gathered(c), by);
      const want = reference(c, by);
      assert.deepEqual(got, want, `call ${i}: ${JSON.stringify(c, (_, v) => (typeof v === 'bigint' ? Number(v) : v))}`);
      seen.add(got?.code ?? 0);
    }
    assert.deepEqual([...seen].sort(), [0, 1, 2, 3, 4], 'every outcome was exercised');
  });

  it('names the first row past the input, and the rows the splits need in all', () => {
    const plan = new SplitPlan(3);
    const c: Call = { S: [[1n, 5n, 9n], [0n, 0n, 0n], [0n, 0n, 0n]], inRows: [5n, 0n, 0n], outRows: [99n, 99n, 99n], rowBytes: [1n, 1n, 1n], outId: [0n, 0n, 0n] };
    assert.deepEqual(plan.check(gathered(c), 2), { code: StatusCode.inputOverflow, rank: 0, peer: 1, needed: 15n, available: 5n, reportedBy: 2, expert: -1 });
  });

  it('saturates the total like the kernel when splits sum past int64', () => {
    const big = 0x7fffffffffffffffn;
    const c: Call = { S: [[big, big], [0n, 0n]], inRows: [1n, 0n], outRows: [0n, 0n], rowBytes: [1n, 1n], outId: [0n, 0n] };
    assert.equal(new SplitPlan(2).check(gathered(c), 0)?.needed, big);
  });

  it('a refused entry decodes like the other backends\' status records', () => {
    const c: Call = { S: [[-3n]], inRows: [0n], outRows: [0n], rowBytes: [8n], outId: [0n] };
    const entry = new SplitPlan(1).check(gathered(c), 0)!;
    const record = new BigInt64Array([BigInt(entry.code), 0n, 0n, -3n, 0n, 0n, 0n, -1n]);
    assert.deepEqual(readStatus(record), entry);
  });
});

describe('nccl backend: layout of a valid call', () => {
  it('sends each peer its contiguous rows and receives by source in rank order', () => {
    const rng = new Rng(7);
    for (let i = 0; i < 500; i++) {
      const W = 1 + rng.int(8);
      const rowBytes = 1 + rng.int(40);
      const S = Array.from({ length: W }, () => Array.from({ length: W }, () => BigInt(rng.int(6))));
      const c: Call = { S, inRows: Array(W).fill(1000n), outRows: Array(W).fill(1000n), rowBytes: Array(W).fill(BigInt(rowBytes)), outId: Array(W).fill(0n) };
      const me = rng.int(W);
      const plan = new SplitPlan(W);
      const all = gathered(c);
      assert.equal(plan.check(all, me), undefined);
      plan.layout(all, me, rowBytes);
      let src = 0;
      let dst = 0;
      for (let k = 0; k < W; k++) {
        assert.equal(plan.sendOffset[k], src * rowBytes);
        assert.equal(plan.sendBytes[k], Number(S[me][k]) * rowBytes);
        assert.equal(plan.recvOffset[k], dst * rowBytes);
        assert.equal(plan.recvBytes[k], Number(S[k][me]) * rowBytes);
        assert.equal(plan.splitsOffsets[k], S[k][me]);
        assert.equal(plan.splitsOffsets[W + k], BigInt(dst));
        src += Number(S[me][k]);
        dst += Number(S[k][me]);
      }
    }
  });

  it('publishes the capacities in whole rows', () => {
    const payload = new BigInt64Array(HEADER_WORDS + 2);
    SplitPlan.header(payload, { inputBytes: 100, outputBytes: 29, rowBytes: 7, outId: 5 });
    assert.deepEqual([...payload.subarray(0, HEADER_WORDS)], [14n, 4n, 7n, 5n]);
  });
});
