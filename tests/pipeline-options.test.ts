// The pipeline's library entry points refuse what would otherwise run something else than asked,
// by name and before any step: a misspelt option, a seed past the kernels' 32 bits, a two-lane arm
// on a one-lane communicator. And the trace gives every (arm, rank) its own process, past 1000 ranks.
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, test } from 'node:test';
import { pipelineRank, type PipelineArg } from '../src/pipeline/rank.js';
import { runPipeline } from '../src/pipeline/run.js';
import { chromeTrace, writeChromeTrace, type ArmTrace, type Span } from '../src/pipeline/trace.js';
import type { Arm } from '../src/pipeline/train.js';
import { runRanks } from '../src/world/threads.js';

const base = { backend: 'cpu' as const, ranks: 1, shape: 'tiny' as const, arms: ['one-lane' as Arm], warmup: 0, iters: 1, seed: 1, trace: false };

describe('pipeline options', () => {
  test('runPipeline refuses unknown keys, a seed past 2^32 - 1, a non-boolean trace and a bad inputDistBlocks', async () => {
    const bad: [Record<string, unknown>, RegExp][] = [
      [{ inputDistBlock: 4 }, /^pipeline: unknown option 'inputDistBlock' \(known: backend, ranks, timeoutMs, shape, arms, warmup, iters, seed, trace, inputDistBlocks, gemm\)$/],
      [{ itres: 5, gemms: 'kernel' }, /pipeline: unknown options 'itres', 'gemms' /],
      [{ seed: 2 ** 32 }, /pipeline: seed must be at most 4294967295 \(the kernels draw from a 32-bit seed: 4294967296 would train as 0\), got 4294967296$/],
      [{ trace: 'yes' }, /pipeline: trace must be true or false, got 'yes' \(a string\)$/],
      [{ inputDistBlocks: -1 }, /pipeline: inputDistBlocks must be an integer >= 1, got -1$/],
      [{ inputDistBlocks: 2.5 }, /pipeline: inputDistBlocks must be an integer >= 1, got 2\.5$/],
      // Every timed step's times are kept: 2e8 failed as an array length after the ranks started.
      [{ shape: undefined }, /^pipeline: shape is required \(tiny, dlrm, /],
      [{ shape: 'big' }, /^pipeline: unknown shape 'big' \(choose from tiny, /],
      [{ iters: 2e8 }, /pipeline: iters \+ warmup must be at most 10000000 steps an arm .*, got 200000000 \+ 0$/],
      [{ iters: 9e6, warmup: 2e6 }, /pipeline: iters \+ warmup must be at most 10000000 /],
      // No default: the CLI's (one per GPU) would start the driver to count them.
      [{ ranks: undefined }, /^runPipeline: ranks is required /],
    ];
    for (const [change, message] of bad) {
      await assert.rejects(runPipeline({ ...base, ...change } as never), (err: Error) => err.name === 'UsageError' && message.test(err.message), JSON.stringify(change));
    }
    // The largest seed runs; runPipeline's own keys (backend, ranks, timeoutMs) are not the ranks' unknown keys.
    const r = await runPipeline({ ...base, seed: 2 ** 32 - 1, timeoutMs: 30_000 });
    assert.equal(r?.seed, 2 ** 32 - 1);
  });

  test('runPipeline without a backend reports the one its ranks ran on; options that are not an object are a UsageError', async () => {
    // Where no GPU is visible the ranks pick cpu: the result must say so, and time with the host clock.
    const { backend: _named, ...unnamed } = base;
    const r = await runPipeline(unnamed);
    const ran = r?.backend;
    assert.ok(ran === 'cpu' || ran === 'cuda', `backend ${String(ran)}`);
    if (ran === 'cpu') assert.match(r!.clock, /^host clock/);
    else assert.match(r!.clock, /^device events/);
    for (const bad of [null, undefined, 'cpu']) {
      await assert.rejects(runPipeline(bad as never), (err: Error) => err.name === 'UsageError' && /^runPipeline takes one object of options, got /.test(err.message), String(bad));
    }
  });

  test('runPipeline and pipelineRank take the CLI\'s defaults for arms, warmup, seed and trace; what is given is still checked', async () => {
    const r = await runPipeline({ backend: 'cpu', ranks: 2, shape: 'tiny', iters: 1, warmup: 0 });
    assert.deepEqual([r?.arms.map((a) => a.arm), r?.seed, r?.warmup, r?.traces], [['one-lane', 'two-lanes', 'two-lanes-serialized'], 1, 0, undefined]);
    // pipelineRank: 20 warm-up steps before the one timed (its start report counts them).
    const reports: { type: string; steps?: number }[] = [];
    const given = { shape: 'tiny', arms: ['one-lane'], iters: 1 };
    await runRanks({ backend: 'cpu', ranks: 1, onReport: (_r, m) => reports.push(m as never) }, new URL('../src/pipeline/rank.js', import.meta.url), 'pipelineRank', given);
    assert.equal(reports.find((m) => m.type === 'start')?.steps, 21);
    // A default never hides a bad value beside it.
    await assert.rejects(runPipeline({ backend: 'cpu', ranks: 1, shape: 'tiny', iters: 0 }), (err: Error) => err.name === 'UsageError' && /pipeline: iters must be an integer >= 1, got 0$/.test(err.message));
  });

  test('runPipeline refuses what the named backend cannot do before any rank starts: cuBLAS on cpu, an SM budget off cuda', async () => {
    for (const [change, message] of [
      [{ gemm: 'cublas' }, /^pipeline: gemm 'cublas' is for cuda and nccl /],
      [{ inputDistBlocks: 8 }, /^pipeline: inputDistBlocks is the cuda backend's SM budget .*; cpu has none$/],
    ] as const) {
      const err = (await runPipeline({ ...base, ...change }).catch((e: unknown) => e)) as Error & { failedRank?: number };
      assert.equal(err?.name, 'UsageError', String(err));
      assert.match(err.message, message);
      assert.equal(err.failedRank, undefined, 'refused on the host, not by a rank');
    }
  });

  test('pipelineRank: a rank refusing its own options says why, and its peers name it rather than wait (a BigInt seed too)', async () => {
    const said = await runRanks({ backend: 'cpu', ranks: 3, timeoutMs: 30_000 }, new URL('./pipeline/programs.js', import.meta.url), 'oneRankRefuses', { refuse: 1 });
    assert.deepEqual(said, [
      'UsageError: pipeline: rank 1 refused its options: pipeline: iters must be an integer >= 1, got 0',
      'UsageError: pipeline: iters must be an integer >= 1, got 0',
      'UsageError: pipeline: rank 1 refused its options: pipeline: iters must be an integer >= 1, got 0',
    ]);
  });

  test('pipelineRank on a one-lane communicator refuses a two-lane arm before any arm runs', async () => {
    const reports: unknown[] = [];
    const arg: PipelineArg = { shape: 'tiny', arms: ['one-lane', 'two-lanes'], warmup: 0, iters: 1, seed: 1, trace: false };
    await assert.rejects(
      runRanks({ backend: 'cpu', ranks: 2, lanes: 1, timeoutMs: 30_000, onReport: (_r, m) => reports.push(m) }, new URL('../src/pipeline/rank.js', import.meta.url), 'pipelineRank', arg),
      (err: Error) => err.name === 'UsageError' && /pipeline arm two-lanes needs 2 lanes; the communicator has 1$/.test(err.message),
    );
    assert.deepEqual(reports, [], 'no arm started (no start or step report)');
    assert.equal(typeof pipelineRank, 'function');
  });

  test('chromeTrace: distinct pids for every (arm, rank), also past 1000 ranks', () => {
    const arms = (w: number): ArmTrace[] => ['one-lane', 'two-lanes'].map((arm) => ({ backend: 'cpu', arm, ranks: Array.from({ length: w }, (_, rank) => ({ rank, spans: [] })) }));
    for (const w of [2, 1001]) {
      const events = (chromeTrace(arms(w), 'test').traceEvents as Array<{ name: string; pid: number }>);
      const pids = events.filter((e) => e.name === 'process_name').map((e) => e.pid);
      assert.equal(new Set(pids).size, 2 * w, `${w} ranks`);
      if (w === 2) assert.deepEqual(pids, [0, 1, 1000, 1001], 'under 1000 ranks: arm * 1000 + rank');
    }
  });

  test('writeChromeTrace: the file parses back to the trace, across its write batches', () => {
    const dir = mkdtempSync(join(tmpdir(), 'a2av-trace-'));
    try {
      // 2 ranks x 5000 spans: events past one 4096-event batch, and a batch boundary mid-rank.
      const spans = (rank: number): Span[] => Array.from({ length: 5000 }, (_, i) => ({ track: 'compute', name: 'lookup', step: i, startUs: i * 10 + rank, endUs: i * 10 + rank + 4 }));
      const trace = chromeTrace([{ backend: 'cpu', arm: 'one-lane', ranks: [0, 1].map((rank) => ({ rank, spans: spans(rank) })) }], 'test clock');
      for (const events of [trace.traceEvents, trace.traceEvents.slice(0, 4096), []]) {
        const file = join(dir, `t${events.length}.json`);
        writeChromeTrace(file, { ...trace, traceEvents: events });
        assert.deepEqual(JSON.parse(readFileSync(file, 'utf8')), { ...trace, traceEvents: events }, `${events.length} events`);
      }
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
