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
