// a2av bench allreduce: the inputs' sums are exact whatever the order (bf16 included), every size
// is checked (a wrong element is named), the table compares each backend with NCCL.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { benchValue, formatAllReduceTable, runAllReduceBench, type AllReduceBenchResult } from '../src/bench/all-reduce.js';
import { runRanks } from '../src/world/threads.js';

test('every partial sum of the inputs over up to 64 ranks is an integer within 192: exact in bf16 and f32', () => {
  for (let i = 0; i < 500; i++) {
    let partial = 0;
    for (let r = 0; r < 64; r++) {
      const v = benchValue(r, i);
      assert.ok(Number.isInteger(v) && Math.abs(v) <= 3);
      partial += v;
      assert.ok(Math.abs(partial) <= 192);
    }
  }
});

test('cpu, 2 ranks, f32 and bf16: every size checked and timed', { timeout: 60_000 }, async () => {
  for (const dtype of ['f32', 'bf16'] as const) {
    const rows: number[] = [];
    const result = await runAllReduceBench({ backend: 'cpu', ranks: 2, sizes: [4096, 8192, 12_290], dtype, repeats: 1, iters: 2 }, (r) => rows.push(r.index));
    assert.ok(result);
    assert.deepEqual(rows, [0, 1, 2]);
    assert.deepEqual(result.rows.map((r) => r.count), [4096, 8192, 12_290].map((b) => Math.floor(b / (dtype === 'f32' ? 4 : 2))));
    for (const r of result.rows) assert.ok(r.timeUs > 0 && r.busbwGBs > 0 && r.graphUs === undefined);
  }
});

test('a wrong element is named with its index and the expected sum', { timeout: 60_000 }, async () => {
  const seen = await runRanks({ backend: 'cpu', ranks: 2, timeoutMs: 10_000 }, new URL('./fixtures/all-reduce-wrong-rank.js', import.meta.url), 'wrongSum', {
    sizes: [4096],
    dtype: 'f32',
    repeats: 1,
    iters: 1,
  });
  assert.match(seen[1] as string, /rank 1, 1024 f32 elements: element 512 is 1000000, the sum over ranks is -?\d+/);
});

test('the table: a row per size and backend, each against NCCL', () => {
  const row = (timeUs: number) => ({ bytes: 4096, count: 1024, timeUs, timeMinUs: timeUs, timeMaxUs: timeUs, algbwGBs: 1, busbwGBs: 1 });
  const base = { ranks: 2, dtype: 'f32' as const, device: 'NVIDIA H200 #0', date: 'd' };
  const results: AllReduceBenchResult[] = [
    { ...base, backend: 'cuda', rows: [{ ...row(5), graphUs: 4 }] },
    { ...base, backend: 'nccl', rows: [row(15)] },
  ];
  const lines = formatAllReduceTable(results).trim().split('\n');
  assert.match(lines[0]!, /cuda,nccl, 2 ranks, f32/);
  assert.match(lines[4]!, /4 KiB\s+cuda\s+5\.00\s+5\.00-5\.00\s+4\.00.*3\.00$/);
  assert.match(lines[5]!, /4 KiB\s+nccl\s+15\.00.*-$/);
});
