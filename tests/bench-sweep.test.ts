import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { runBench } from '../src/bench/run.js';
import type { SweepArg, SweepResult } from '../src/bench/rank.js';
import { formatTable, type BenchRow } from '../src/bench/table.js';
import { runRanks } from '../src/world/threads.js';

describe('runBench on the cpu backend', () => {
  it('sweeps doubling sizes, checking each, and reports every column', async () => {
    const progress: string[] = [];
    const streamed: BenchRow[] = [];
    const result = await runBench(
      { backend: 'cpu', ranks: 3, minBytes: 4 << 10, maxBytes: 16 << 10, splits: 'zipf', rowBytes: 7, seed: 3, iters: 3, repeats: 3 },
      {
        onPlan: ({ sizes }) => progress.push(`plan ${sizes.length}`),
        onProgress: ({ index, stage }) => progress.push(`${index} ${stage}`),
        onRow: ({ row }) => streamed.push(row),
      },
    );
    assert.ok(result, 'threads of this process: this process is rank 0 and gets the result');
    assert.equal(result.backend, 'cpu');
    assert.equal(result.ranks, 3);
    assert.equal(result.repeats, 3);
    assert.equal(result.device, 'cpu thread');
    assert.deepEqual(result.rows.map((r) => r.bytes), [586 * 7, 1171 * 7, 2340 * 7]);
    assert.deepEqual(streamed, result.rows);
    for (const r of result.rows) {
      for (const v of [r.timeUs, r.refUs, r.algbwGBps, r.busbwGBps, r.refRatio]) assert.ok(Number.isFinite(v) && v > 0, JSON.stringify(r));
      assert.ok(r.timeMinUs <= r.timeUs && r.timeUs <= r.timeMaxUs, JSON.stringify(r));
      assert.ok(r.refMinUs <= r.refUs && r.refUs <= r.refMaxUs, JSON.stringify(r));
      // cpu: every rank copies its own bytes at once (the ranks are threads on the host's cores, as in
      // the exchange); there is no graph to replay or check.
      assert.equal(r.ref, 'rank-copy');
      assert.ok(Number.isNaN(r.graphUs), 'no graph time on cpu');
      assert.deepEqual(r.checked, ['eager']);
    }
    assert.deepEqual(progress.slice(0, 4), ['plan 3', '0 verify', '0 eager', '0 reference']);

    const lines = formatTable(result).trimEnd().split('\n');
    assert.ok(lines.some((l) => /^# time µs = median of 3 timed loops/.test(l)));
    assert.ok(lines.some((l) => /^# ref = rank-copy: every rank at once/.test(l)));
    assert.ok(lines.some((l) => /^# checked = /.test(l)));
    const titles = lines.find((l) => /^\s*bytes/.test(l))!;
    assert.match(titles, /^\s*bytes\s+time µs\s+min-max µs\s+algbw GB\/s\s+busbw GB\/s\s+ref µs\s+ref ratio\s+checked$/);
    const n = '\\d+\\.\\d+';
    assert.match(lines.at(-1)!, new RegExp(`^\\s*16\\.0 KiB \\(16380 B\\)\\s+${n}\\s+${n}-${n}\\s+${n}\\s+${n}\\s+${n}\\s+${n}\\s+eager$`));
  });

  it('ranks on several devices: every rank times its peer copies at once, and the rows say peer-copy', async () => {
    const arg: SweepArg = { sizes: [4 << 10, 8 << 10], splits: 'zipf', rowBytes: 8, seed: 2, dataKey: 9, iters: 2, repeats: 2 };
    const results = await runRanks<SweepArg, SweepResult & { copies: number }>(
      { backend: 'cpu', ranks: 4, timeoutMs: 30_000 }, new URL('./fixtures/bench-peer-rank.js', import.meta.url), 'peerSweep', arg);
    const rows = results[0].rows;
    assert.equal(rows.length, 2);
    for (const r of rows) {
      assert.equal(r.ref, 'peer-copy');
      assert.ok(Number.isFinite(r.refUs) && r.refMinUs <= r.refUs && r.refUs <= r.refMaxUs, JSON.stringify(r));
    }
    for (const { copies } of results) assert.ok(copies > 0, 'every rank copied to its peers on the other device');
  });

  it('--max-blocks: every call of the op and of the 1-D comparison carries the budget, and the result names it', async () => {
    for (const op of ['alltoallv', 'roundtrip'] as const) {
      const arg: SweepArg = { sizes: [64 << 10], splits: 'uniform', rowBytes: 24, seed: 1, dataKey: 5, iters: 2, repeats: 1, op, ...(op === 'roundtrip' ? { experts: 2 } : {}), maxBlocks: 12 };
      const results = await runRanks<SweepArg, SweepResult & { budgets: string[] }>(
        { backend: 'cpu', ranks: 2, timeoutMs: 30_000 }, new URL('./fixtures/bench-budget-rank.js', import.meta.url), 'budgetSweep', arg);
      for (const r of results) assert.deepEqual(r.budgets, ['12'], `${op}: every call's maxBlocks`);
      const none = await runRanks<SweepArg, SweepResult & { budgets: string[] }>(
        { backend: 'cpu', ranks: 2, timeoutMs: 30_000 }, new URL('./fixtures/bench-budget-rank.js', import.meta.url), 'budgetSweep', { ...arg, maxBlocks: undefined });
      for (const r of none) assert.deepEqual(r.budgets, ['undefined'], `${op}: no budget unless asked`);
    }
    const result = await runBench({ backend: 'cpu', ranks: 2, minBytes: 4 << 10, maxBytes: 4 << 10, splits: 'uniform', rowBytes: 16, seed: 1, iters: 2, repeats: 1, maxBlocks: 12 });
    assert.equal(result?.maxBlocks, 12);
    assert.match(formatTable(result!).split('\n')[0]!, /, at most 12 thread blocks a call \(--max-blocks\), uniform splits/);
  });

  it('stops every rank when one finds a wrong result, and names it', async () => {
    const arg: SweepArg = { sizes: [4096 * 7], splits: 'uniform', rowBytes: 7, seed: 1, dataKey: 5, iters: 2, repeats: 1 };
    const started = Date.now();
    await assert.rejects(
      runRanks({ backend: 'cpu', ranks: 2, timeoutMs: 30_000 }, new URL('./fixtures/bench-faulty-rank.js', import.meta.url), 'faultySweep', arg),
      (err: Error & { code?: string }) =>
        err.code === 'A2AV_BENCH_WRONG_RESULT' && /rank 1 failed: eager all-to-all-v .*: output byte 0: row 0 from rank 0, byte 0 of the row, is 0x/.test(err.message),
    );
    assert.ok(Date.now() - started < 10_000, 'rank 0 waited for a timeout instead of stopping');
  });
});
