import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { runBench } from '../src/bench/run.js';
import type { SweepArg } from '../src/bench/rank.js';
import type { BenchRow } from '../src/bench/table.js';
import { runRanks } from '../src/world/threads.js';

describe('runBench on the cpu backend', () => {
  it('sweeps doubling sizes, checking each, and reports every column', async () => {
    const progress: string[] = [];
    const streamed: BenchRow[] = [];
    const result = await runBench(
      { backend: 'cpu', ranks: 3, minBytes: 4 << 10, maxBytes: 16 << 10, splits: 'zipf', rowBytes: 7, seed: 3, iters: 3, repeats: 2 },
      {
        onPlan: ({ sizes }) => progress.push(`plan ${sizes.length}`),
        onProgress: ({ index, stage }) => progress.push(`${index} ${stage}`),
        onRow: ({ row }) => streamed.push(row),
      },
    );
    assert.ok(result, 'threads of this process: this process is rank 0 and gets the result');
    assert.equal(result.backend, 'cpu');
    assert.equal(result.ranks, 3);
    assert.equal(result.device, 'cpu thread');
    assert.deepEqual(result.rows.map((r) => r.bytes), [585 * 7, 1170 * 7, 2340 * 7]);
    assert.deepEqual(streamed, result.rows);
    for (const r of result.rows) {
      for (const v of [r.timeUs, r.graphUs, r.refUs, r.algbwGBps, r.busbwGBps, r.refRatio]) assert.ok(Number.isFinite(v) && v > 0, JSON.stringify(r));
    }
    assert.deepEqual(progress.slice(0, 5), ['plan 3', '0 verify', '0 eager', '0 graph', '0 reference']);
  });

  it('stops every rank when one finds a wrong result, and names it', async () => {
    const arg: SweepArg = { sizes: [4096 * 7], splits: 'uniform', rowBytes: 7, seed: 1, dataKey: 5, iters: 2, repeats: 1 };
    const started = Date.now();
    await assert.rejects(
      runRanks({ backend: 'cpu', ranks: 2, timeoutMs: 30_000 }, new URL('./fixtures/bench-faulty-rank.js', import.meta.url), 'faultySweep', arg),
      (err: Error & { code?: string }) =>
        err.code === 'A2AV_BENCH_WRONG_RESULT' && /rank 1: eager all-to-all-v .* row 0 from rank 0 differs at byte 0/.test(err.message),
    );
    assert.ok(Date.now() - started < 10_000, 'rank 0 waited for a timeout instead of stopping');
  });
});
