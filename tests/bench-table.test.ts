import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { formatJson, formatTable, makeRow, type BenchResult } from '../src/bench/table.js';

const result: BenchResult = {
  backend: 'cuda',
  ranks: 4,
  splits: 'uniform',
  rowBytes: 1024,
  device: 'H200 #0',
  date: '2025-01-01T00:00:00.000Z',
  rows: [makeRow(4, 512 << 10, 25, 18.5, 2.5), makeRow(4, 4 * 2 ** 30, 11392.123, 11380, 9000)],
};

describe('bench table', () => {
  it('derives bandwidths and the ratio from the times', () => {
    const row = result.rows[0];
    assert.equal(row.algbwGBps, (512 * 1024) / 25e-6 / 1e9);
    assert.equal(row.busbwGBps, (row.algbwGBps * 3) / 4);
    assert.equal(row.refRatio, 0.1);
  });

  it('aligns columns with human units', () => {
    const lines = formatTable(result).trimEnd().split('\n');
    assert.match(lines[0], /^# a2av bench: cuda, 4 ranks, uniform splits, 1024-byte rows, H200 #0, 2025-01-01/);
    assert.equal(new Set(lines.slice(1).map((l) => l.length)).size, 1, 'all lines the same width');
    assert.match(lines[2], /^\s*512 KiB\s+25\.00\s+18\.50\s+21\.0\s+15\.7\s+2\.50\s+0\.10$/);
    assert.match(lines[3], /^\s*4 GiB\s+11392\.1\s+11380\.0\s+377\.0\s+282\.8\s+9000\.0\s+0\.79$/);
  });

  it('writes the JSON form with the documented keys', () => {
    const parsed = JSON.parse(formatJson(result));
    assert.deepEqual(Object.keys(parsed), ['backend', 'ranks', 'splits', 'rowBytes', 'device', 'date', 'rows']);
    assert.deepEqual(Object.keys(parsed.rows[0]), ['bytes', 'timeUs', 'graphUs', 'algbwGBps', 'busbwGBps', 'refUs', 'refRatio']);
  });
});
