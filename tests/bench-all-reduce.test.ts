// a2av bench allreduce: the inputs' sums are exact whatever the order (bf16 included), every size
// is checked (a wrong element is named), the table compares each backend with NCCL.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { benchValue, formatAllReduceTable, runAllReduceBench, wholeElements, type AllReduceBenchResult } from '../src/bench/all-reduce.js';
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
    for (const r of result.rows) assert.ok(r.timeUs > 0 && r.busbwGBps > 0 && r.graphUs === undefined);
    // The JSON keys of the all-to-all sweep's rows where they mean the same, and its loop count.
    assert.equal(result.repeats, 1);
    for (const r of result.rows) assert.ok(r.algbwGBps > 0 && Math.abs(r.algbwGBps - r.bytes / (r.timeUs * 1e3)) < 1e-9 * r.algbwGBps + 1e-12);
  }
});

test('sizes are whole elements: a list given rounded down, the CLI sweep rounded up from --min', { timeout: 60_000 }, () => {
  assert.deepEqual(wholeElements([6, 12], 'f32'), [4, 12]);
  assert.deepEqual(wholeElements([3, 6], 'bf16'), [2, 6]);
  assert.throws(() => wholeElements([1, 2], 'bf16'), { name: 'UsageError', message: 'bench allreduce: 1 bytes is less than one bf16 element (2 bytes)' });
  const cli = fileURLToPath(new URL('../src/cli.js', import.meta.url));
  const run = spawnSync(process.execPath, [cli, 'bench', 'allreduce', '--backend', 'cpu', '--min', '6', '--max', '20', '--repeats', '1', '--iters', '1', '--json'], { encoding: 'utf8' });
  assert.equal(run.status, 0, run.stderr);
  const rows = (JSON.parse(run.stdout) as AllReduceBenchResult).rows;
  assert.deepEqual(rows.map((r) => [r.bytes, r.count]), [[8, 2], [12, 3]]);
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
  const row = (timeUs: number) => ({ bytes: 4096, count: 1024, timeUs, timeMinUs: timeUs, timeMaxUs: timeUs, algbwGBps: 1, busbwGBps: 1 });
  const base = { ranks: 2, dtype: 'f32' as const, device: 'NVIDIA H200 #0', date: 'd', repeats: 5 };
  const results: AllReduceBenchResult[] = [
    { ...base, backend: 'cuda', rows: [{ ...row(5), graphUs: 4 }] },
    { ...base, backend: 'nccl', rows: [row(15)] },
  ];
  const lines = formatAllReduceTable(results).trim().split('\n');
  assert.match(lines[0]!, /cuda,nccl, 2 ranks, f32/);
  assert.match(lines[1]!, /^# time µs = median of 5 timed loops of about 20 ms each /);
  assert.match(formatAllReduceTable(results.map((r) => ({ ...r, iters: 7 }))), /^# time µs = median of 5 timed loops of 7 calls \(/m);
  assert.match(lines[4]!, /4 KiB\s+cuda\s+5\.00\s+5\.00-5\.00\s+4\.00.*3\.00$/);
  assert.match(lines[5]!, /4 KiB\s+nccl\s+15\.00.*-$/);
});
