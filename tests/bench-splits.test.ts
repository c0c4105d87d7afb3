import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { makeSplits, SPLITS_KINDS, type SplitsOptions } from '../src/bench/splits.js';

const received = (rows: readonly (readonly number[])[], dst: number) => rows.reduce((sum, row) => sum + row[dst], 0);

describe('makeSplits', () => {
  const cases: SplitsOptions[] = [];
  for (const kind of SPLITS_KINDS) {
    for (const worldSize of [1, 2, 3, 4, 8, 13]) {
      for (const [bytesPerRank, rowBytes] of [[512 << 10, 1024], [1 << 20, 7], [100, 1024], [5000, 1000], [4 << 30, 1024]]) {
        cases.push({ kind, worldSize, bytesPerRank, rowBytes, seed: 42 });
      }
    }
  }

  it('sends exactly floor(S / rowBytes) rows from every rank, none negative, whole numbers', () => {
    for (const opts of cases) {
      const s = makeSplits(opts);
      assert.equal(s.rowsPerRank, Math.floor(opts.bytesPerRank / opts.rowBytes));
      assert.equal(s.rows.length, opts.worldSize);
      for (const row of s.rows) {
        assert.equal(row.length, opts.worldSize);
        assert.ok(row.every((n) => Number.isInteger(n) && n >= 0), `${JSON.stringify(opts)}: ${row}`);
        assert.equal(row.reduce((a, b) => a + b, 0), s.rowsPerRank, JSON.stringify(opts));
      }
    }
  });

  it('reports the largest number of rows any rank receives', () => {
    for (const opts of cases) {
      const s = makeSplits(opts);
      const all = Array.from({ length: opts.worldSize }, (_, dst) => received(s.rows, dst));
      assert.equal(s.maxRowsReceived, Math.max(...all));
    }
  });

  it('is deterministic from the seed', () => {
    const opts: SplitsOptions = { kind: 'zipf', worldSize: 8, bytesPerRank: 32 << 20, rowBytes: 1024, seed: 7 };
    assert.deepEqual(makeSplits(opts), makeSplits({ ...opts }));
    assert.notDeepEqual(makeSplits(opts).rows, makeSplits({ ...opts, seed: 8 }).rows);
  });

  it('uniform: every peer gets S/W rows, the remainder spread so receivers stay balanced', () => {
    const s = makeSplits({ kind: 'uniform', worldSize: 4, bytesPerRank: 10 * 64, rowBytes: 64, seed: 1 });
    for (const row of s.rows) assert.ok(row.every((n) => n === 2 || n === 3));
    const perReceiver = [0, 1, 2, 3].map((dst) => received(s.rows, dst));
    assert.ok(Math.max(...perReceiver) - Math.min(...perReceiver) <= 1, String(perReceiver));
  });

  it('zipf: each sender has a hot peer with about 1/H share, and hot peers differ between senders', () => {
    const w = 8;
    const s = makeSplits({ kind: 'zipf', worldSize: w, bytesPerRank: 64 << 20, rowBytes: 1024, seed: 3 });
    let norm = 0;
    for (let k = 1; k <= w; k++) norm += 1 / k ** 1.1;
    const hottest = s.rows.map((row) => row.indexOf(Math.max(...row)));
    for (const row of s.rows) {
      const sorted = [...row].sort((a, b) => b - a);
      assert.ok(Math.abs(sorted[0] - s.rowsPerRank / norm) <= 1);
      assert.ok(Math.abs(sorted[w - 1] - s.rowsPerRank / norm / w ** 1.1) <= 1);
    }
    assert.ok(new Set(hottest).size > 1, `every sender favours the same peer: ${hottest}`);
  });

  it('zipf exponent is configurable (0 is uniform up to rounding)', () => {
    const s = makeSplits({ kind: 'zipf', worldSize: 4, bytesPerRank: 4000, rowBytes: 1, seed: 5, zipfExponent: 0 });
    for (const row of s.rows) assert.deepEqual(row, [1000, 1000, 1000, 1000]);
  });
});

describe('makeSplits with experts (the MoE ops)', () => {
  const sum = (xs: readonly number[]) => xs.reduce((a, b) => a + b, 0);

  it('E = 1 is the 1-D matrix: chunks are the rows', () => {
    for (const kind of SPLITS_KINDS) {
      const opts: SplitsOptions = { kind, worldSize: 5, bytesPerRank: 1 << 20, rowBytes: 7, seed: 4 };
      const s = makeSplits({ ...opts, experts: 1 });
      assert.equal(s.experts, 1);
      assert.deepEqual(s.chunks, s.rows);
      assert.deepEqual(makeSplits(opts), s, 'experts defaults to 1');
    }
  });

  it('splits every rank\'s rows over W×E (peer, expert) chunks; rows are the sums per peer', () => {
    for (const kind of SPLITS_KINDS) {
      for (const [worldSize, experts] of [[2, 16], [8, 16], [3, 5], [4, 256]]) {
        const s = makeSplits({ kind, worldSize, bytesPerRank: 3 << 20, rowBytes: 1024, seed: 6, experts });
        assert.equal(s.experts, experts);
        assert.equal(s.chunks.length, worldSize);
        s.chunks.forEach((chunks, src) => {
          assert.equal(chunks.length, worldSize * experts);
          assert.ok(chunks.every((n) => Number.isInteger(n) && n >= 0));
          assert.equal(sum(chunks), s.rowsPerRank);
          for (let peer = 0; peer < worldSize; peer++) assert.equal(s.rows[src][peer], sum(chunks.slice(peer * experts, (peer + 1) * experts)));
        });
        const received = Array.from({ length: worldSize }, (_, dst) => sum(s.rows.map((row) => row[dst])));
        assert.equal(s.maxRowsReceived, Math.max(...received));
      }
    }
  });

  it('uniform: the same rows to every chunk (the small MoE step: 4 rows per expert per source)', () => {
    const s = makeSplits({ kind: 'uniform', worldSize: 8, bytesPerRank: 8 * 16 * 4 * 4096, rowBytes: 4096, seed: 1, experts: 16 });
    for (const chunks of s.chunks) assert.ok(chunks.every((n) => n === 4));
    // A remainder spreads over chunks, one row at most each, starting at the sender's own chunks.
    const odd = makeSplits({ kind: 'uniform', worldSize: 3, bytesPerRank: 3 * 4 * 10 + 5, rowBytes: 1, seed: 1, experts: 4 });
    odd.chunks.forEach((chunks, src) => {
      assert.ok(chunks.every((n) => n === 10 || n === 11));
      assert.deepEqual(chunks.map((n, k) => (n === 11 ? k : -1)).filter((k) => k >= 0), [0, 1, 2, 3, 4].map((k) => (src * 4 + k) % 12).sort((a, b) => a - b));
    });
  });

  it('zipf: deterministic from the seed, hot (peer, expert) chunks differ between senders', () => {
    const opts: SplitsOptions = { kind: 'zipf', worldSize: 4, bytesPerRank: 16 << 20, rowBytes: 1024, seed: 3, experts: 8 };
    assert.deepEqual(makeSplits(opts), makeSplits({ ...opts }));
    const s = makeSplits(opts);
    const hottest = s.chunks.map((row) => row.indexOf(Math.max(...row)));
    assert.ok(new Set(hottest).size > 1, `every sender favours the same chunk: ${hottest}`);
    assert.ok(s.chunks.every((row) => row.some((n) => n > s.rowsPerRank / 8)), 'a hot chunk takes far more than an even 1/32');
  });

  it('rejects experts < 1', () => {
    assert.throws(() => makeSplits({ kind: 'uniform', worldSize: 2, bytesPerRank: 100, rowBytes: 1, seed: 1, experts: 0 }), /experts must be a positive integer/);
  });
});
