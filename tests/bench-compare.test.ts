// `a2av bench --backend cuda,nccl`: both sweeps in one table, rows by size, NCCL's host wait and the
// ratio to NCCL as columns; a single backend's table keeps its columns.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { compareBackends } from '../src/bench/compare.js';
import { formatJson, formatTable, makeRow, type BenchResult } from '../src/bench/table.js';

const base = { ranks: 4, splits: 'zipf', rowBytes: 1024, device: 'NVIDIA H200 #0', date: '2026-01-01T00:00:00.000Z' };
const t = (medianUs: number) => ({ medianUs, minUs: medianUs, maxUs: medianUs });
const cudaRow = (bytes: number, us: number, graphUs: number, refUs: number) =>
  makeRow({ ranks: 4, bytes, time: t(us), graph: t(graphUs), ref: 'copy', refTime: t(refUs), checked: ['eager', 'graph'] });
// nccl cannot capture: no graph; it reports the host's wait for the splits
const ncclRow = (bytes: number, us: number, refUs: number, hostSyncUs: number) =>
  makeRow({ ranks: 4, bytes, time: t(us), ref: 'copy', refTime: t(refUs), checked: ['eager'], hostSyncUs });
const cuda: BenchResult = { ...base, backend: 'cuda', rows: [cudaRow(512 << 10, 12, 10, 2.5), cudaRow(1 << 30, 2500, 2490, 2000)] };
const nccl: BenchResult = { ...base, backend: 'nccl', rows: [ncclRow(512 << 10, 60, 2.5, 31.5), ncclRow(1 << 30, 3000, 2000, 30.25)] };

describe('bench table of several backends', () => {
  const both = compareBackends([cuda, nccl]);

  it('interleaves the rows by size and rates each against NCCL at that size', () => {
    assert.equal(both.backend, 'cuda,nccl');
    assert.deepEqual(both.rows.map((r) => [r.bytes, r.backend]), [[512 << 10, 'cuda'], [512 << 10, 'nccl'], [1 << 30, 'cuda'], [1 << 30, 'nccl']]);
    assert.equal(both.rows[0].vsNccl, 5);
    assert.equal(both.rows[2].vsNccl, 1.2);
    assert.equal(both.rows[1].vsNccl, undefined, 'no ratio of NCCL to itself');
    assert.equal(both.rows[1].hostSyncUs, 31.5);
  });

  it('prints backend, sync and ratio columns, with - where a backend has no value', () => {
    const lines = formatTable(both).trimEnd().split('\n');
    assert.match(lines[0], /^# a2av bench: cuda,nccl, 4 ranks, zipf splits, 1024-byte rows, NVIDIA H200 #0, 2026-01-01/);
    const notes = lines.filter((l) => l.startsWith('#'));
    assert.ok(notes.some((l) => /^# vs nccl = NCCL's time \/ this row's time/.test(l)));
    assert.ok(notes.some((l) => /^# sync µs = host wait/.test(l)));
    const table = lines.slice(notes.length);
    assert.match(table[0], /^\s*bytes\s+backend\s+time µs\s+min-max µs\s+graph µs\s+sync µs\s+algbw GB\/s\s+busbw GB\/s\s+ref µs\s+ref ratio\s+checked\s+vs nccl$/);
    assert.match(table[1], /^\s*512 KiB\s+cuda\s+12\.00\s+12\.00-12\.00\s+10\.00\s+-\s+43\.7\s+32\.8\s+2\.50\s+0\.21\s+eager\+graph\s+5\.00$/);
    assert.match(table[2], /^\s*512 KiB\s+nccl\s+60\.00\s+60\.00-60\.00\s+-\s+31\.50\s+8\.7\s+6\.6\s+2\.50\s+0\.042\s+eager\s+-$/);
    assert.match(table[3], /^\s*1 GiB\s+cuda\s+2500\.0\s+2500\.0-2500\.0\s+2490\.0\s+-\s+429\.5\s+322\.1\s+2000\.0\s+0\.80\s+eager\+graph\s+1\.20$/);
    assert.equal(new Set(table.map((l) => l.length)).size, 1, 'aligned');
  });

  it('keeps the sizes only one sweep reached (memory may lower one more than the other)', () => {
    const short: BenchResult = { ...nccl, rows: nccl.rows.slice(0, 1) };
    const rows = compareBackends([cuda, short]).rows;
    assert.deepEqual(rows.map((r) => [r.backend, r.vsNccl]), [['cuda', 5], ['nccl', undefined], ['cuda', undefined]]);
  });

  it('writes rows with their backend first in JSON, the missing graph time as null', () => {
    const parsed = JSON.parse(formatJson(both));
    assert.deepEqual(Object.keys(parsed.rows[0]), [
      'backend', 'bytes', 'timeUs', 'timeMinUs', 'timeMaxUs', 'graphUs', 'graphMinUs', 'graphMaxUs', 'algbwGBps', 'busbwGBps',
      'ref', 'refUs', 'refMinUs', 'refMaxUs', 'refRatio', 'checked', 'vsNccl',
    ]);
    assert.equal(parsed.rows[1].graphUs, null);
    assert.equal(parsed.rows[1].hostSyncUs, 31.5);
    // print-bench reads JSON back: the table of parsed JSON is the same table.
    assert.equal(formatTable(parsed), formatTable(both));
  });
});

describe('bench table of one backend', () => {
  it('nccl alone: a sync column, no graph column (nccl cannot capture), no backend or ratio columns', () => {
    const lines = formatTable(nccl).trimEnd().split('\n');
    assert.ok(lines.some((l) => /^# sync µs = /.test(l)));
    const titles = lines.find((l) => /^\s*bytes/.test(l))!;
    assert.match(titles, /^\s*bytes\s+time µs\s+min-max µs\s+sync µs\s+algbw GB\/s\s+busbw GB\/s\s+ref µs\s+ref ratio\s+checked$/);
  });

  it('cuda alone: its graph column, no backend, sync or ratio columns', () => {
    const titles = formatTable(cuda).split('\n').find((l) => /^\s*bytes/.test(l))!;
    assert.match(titles, /^\s*bytes\s+time µs\s+min-max µs\s+graph µs\s+algbw GB\/s\s+busbw GB\/s\s+ref µs\s+ref ratio\s+checked$/);
  });
});
