// The MoE ops' table and JSON: the op in the header and the result, the same-run 1-D call beside
// every row (`1d µs`, `vs 1d`; on cuda its graph too), and cuda vs nccl in one table.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { compareBackends } from '../src/bench/compare.js';
import { formatJson, formatTable, makeRow, type BenchResult } from '../src/bench/table.js';

const t = (medianUs: number, minUs = medianUs, maxUs = medianUs) => ({ medianUs, minUs, maxUs });
const base = { ranks: 8, op: 'dispatch', experts: 16, align: 16, splits: 'uniform', rowBytes: 4096, device: 'NVIDIA H200 #0', date: '2026-12-01T00:00:00.000Z', repeats: 5 } as const;

const cuda: BenchResult = {
  backend: 'cuda',
  ...base,
  rows: [
    makeRow({ ranks: 8, bytes: 2 << 20, time: t(40, 39, 42), graph: t(16), ref: 'copy', refTime: t(4), checked: ['eager', 'graph'], oneD: { time: t(36), graph: t(12) } }),
    makeRow({ ranks: 8, bytes: 256 << 20, time: t(1000, 990, 1010), graph: t(995), ref: 'copy', refTime: t(900), checked: ['eager', 'graph'], oneD: { time: t(960), graph: t(955) } }),
  ],
};

describe('bench table of a MoE op', () => {
  it('derives vs 1d (1-D time / the op\'s time), eager and graph', () => {
    const [small, large] = cuda.rows;
    assert.deepEqual([small.oneDUs, small.vsOneD, small.oneDGraphUs, small.graphVsOneD], [36, 0.9, 12, 0.75]);
    assert.equal(large.vsOneD, 0.96);
  });

  it('names the op, experts and align in the header, says what bytes and 1d mean, and shows the 1-D columns', () => {
    const lines = formatTable(cuda).trimEnd().split('\n');
    assert.match(lines[0], /^# a2av bench: cuda, 8 ranks, dispatch, 16 experts per rank, align 16, uniform splits, 4096-byte rows, NVIDIA H200 #0, /);
    const notes = lines.filter((l) => l.startsWith('#'));
    assert.ok(notes.includes("# bytes = each rank's dispatch input; algbw = bytes / time"), notes.join('\n'));
    assert.ok(notes.some((l) => /^# 1d µs = allToAllV of the same rows between the same ranks, same run \(the dispatch's rows per peer\); vs 1d = 1d µs \/ time µs .*; graph vs 1d = 1d graph µs \/ graph µs$/.test(l)), notes.join('\n'));
    const table = lines.slice(notes.length);
    assert.match(table[0], /^\s*bytes\s+time µs\s+min-max µs\s+graph µs\s+algbw GB\/s\s+busbw GB\/s\s+ref µs\s+ref ratio\s+1d µs\s+vs 1d\s+1d graph µs\s+graph vs 1d\s+checked$/);
    assert.match(table[1], /^\s*2 MiB\s+40\.00\s+39\.00-42\.00\s+16\.00\s+52\.4\s+45\.9\s+4\.00\s+0\.10\s+36\.00\s+0\.90\s+12\.00\s+0\.75\s+eager\+graph$/);
    assert.match(table[2], /^\s*256 MiB\s+1000\.0\s+990\.00-1010\.0\s+995\.00\s+268\.4\s+234\.9\s+900\.00\s+0\.90\s+960\.00\s+0\.96\s+955\.00\s+0\.96\s+eager\+graph$/);
  });

  it('one expert a rank and one thread block a call are said in the singular', () => {
    const one: BenchResult = { ...cuda, ranks: 1, experts: 1, maxBlocks: 1 };
    assert.match(formatTable(one).split('\n')[0], /^# a2av bench: cuda, 1 rank, dispatch, 1 expert per rank, align 16, at most 1 thread block a call \(--max-blocks\), uniform splits, /);
  });

  it('writes op, experts and align in the JSON, and the 1-D figures in every row', () => {
    const parsed = JSON.parse(formatJson(cuda));
    assert.deepEqual(Object.keys(parsed), ['backend', 'ranks', 'op', 'experts', 'align', 'splits', 'rowBytes', 'device', 'date', 'repeats', 'rows']);
    assert.deepEqual([parsed.op, parsed.experts, parsed.align], ['dispatch', 16, 16]);
    assert.deepEqual(Object.keys(parsed.rows[0]).slice(-4), ['oneDUs', 'vsOneD', 'oneDGraphUs', 'graphVsOneD']);
    assert.equal(formatTable(parsed), formatTable(cuda), 'the table of the JSON read back is the same table');
  });

  it('cpu: the eager 1-D columns only; combine and roundtrip say which way the 1-D calls go', () => {
    for (const [op, bytesNote, directions] of [
      ['combine', 'which the combine gives back', 'the transposed matrix: the rows going back'],
      ['roundtrip', 'moved there by the dispatch and back by the combine', 'there and back: two calls'],
    ] as const) {
      const cpu: BenchResult = {
        ...base, op, backend: 'cpu', device: 'cpu thread',
        rows: [makeRow({ ranks: 8, bytes: 1 << 20, time: t(500, 480, 520), ref: 'copy', refTime: t(250), checked: ['eager'], oneD: { time: t(450) } })],
      };
      const lines = formatTable(cpu).trimEnd().split('\n');
      assert.ok(lines.includes(`# bytes = each rank's dispatch input (${bytesNote}); algbw = bytes / time`), lines.join('\n'));
      assert.ok(lines.some((l) => l.startsWith(`# 1d µs = allToAllV of the same rows between the same ranks, same run (${directions}); vs 1d`)));
      assert.ok(!lines.some((l) => /graph vs 1d/.test(l)));
      const titles = lines.find((l) => /^\s*bytes/.test(l))!;
      assert.match(titles, /^\s*bytes\s+time µs\s+min-max µs\s+algbw GB\/s\s+busbw GB\/s\s+ref µs\s+ref ratio\s+1d µs\s+vs 1d\s+checked$/);
      assert.match(lines.at(-1)!, /^\s*1 MiB\s+500\.00\s+480\.00-520\.00\s+2\.1\s+1\.8\s+250\.00\s+0\.50\s+450\.00\s+0\.90\s+eager$/);
      const row = JSON.parse(formatJson(cpu)).rows[0];
      assert.deepEqual([row.oneDUs, row.vsOneD, 'oneDGraphUs' in row], [450, 0.9, false]);
    }
  });

  it('cuda vs nccl in one table: the 1-D columns and vs nccl side by side', () => {
    const nccl: BenchResult = {
      ...base, backend: 'nccl',
      rows: [makeRow({ ranks: 8, bytes: 2 << 20, time: t(200), ref: 'copy', refTime: t(4), checked: ['eager'], hostSyncUs: 30, oneD: { time: t(150) } })],
    };
    const both = compareBackends([cuda, nccl]);
    assert.equal(both.op, 'dispatch');
    const lines = formatTable(both).trimEnd().split('\n');
    const table = lines.filter((l) => !l.startsWith('#'));
    assert.match(table[0], /^\s*bytes\s+backend\s+time µs\s+min-max µs\s+graph µs\s+sync µs\s+algbw GB\/s\s+busbw GB\/s\s+ref µs\s+ref ratio\s+1d µs\s+vs 1d\s+1d graph µs\s+graph vs 1d\s+checked\s+vs nccl$/);
    assert.match(table[1], /^\s*2 MiB\s+cuda\s+40\.00\s+.*\s+36\.00\s+0\.90\s+12\.00\s+0\.75\s+eager\+graph\s+5\.00$/);
    assert.match(table[2], /^\s*2 MiB\s+nccl\s+200\.00\s+.*\s+150\.00\s+0\.75\s+-\s+-\s+eager\s+-$/);
  });
});
