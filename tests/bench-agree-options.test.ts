// Ranks started with different bench options (a launcher's ranks each parse their own command line)
// all stop at once with a UsageError naming the option and both values, before the sweep allocates
// or calls anything: not a wrong result, a buffer-size mismatch, or a wait until the timeout.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { Outcome, RankRun } from './fixtures/bench-options-rank.js';
import { runRanks } from '../src/world/threads.js';

const rankProgram = new URL('./fixtures/bench-options-rank.js', import.meta.url);
const sweepArg = { sizes: [4096], splits: 'uniform', rowBytes: 64, seed: 1, dataKey: 7, iters: 1, repeats: 1 };
const moeArg = { op: 'moe-dispatch', tokens: [1], numExperts: 8, topk: 2, hidden: 32, layout: 'expanded', seed: 1, repeats: 1 };
const allReduceArg = { sizes: [4096], dtype: 'f32', repeats: 1, iters: 1 };

/** Runs rank r's program and argument on 2 cpu ranks; every rank's outcome, and the wall time. */
async function run(runs: RankRun[]): Promise<{ outcomes: Outcome[]; ms: number }> {
  const start = Date.now();
  // A 30 s bound, so a hang shows as the time check failing rather than the test timing out.
  const outcomes = await runRanks<RankRun[], Outcome>({ backend: 'cpu', ranks: 2, timeoutMs: 30_000 }, rankProgram, 'perRankOptions', runs);
  return { outcomes, ms: Date.now() - start };
}

/** Every rank threw a UsageError with its line, and fast. */
async function assertRefused(runs: RankRun[], messages: string[]): Promise<void> {
  const { outcomes, ms } = await run(runs);
  assert.deepEqual(outcomes.map(({ name, message }) => ({ name, message })), messages.map((message) => ({ name: 'UsageError', message })));
  for (const o of outcomes) assert.ok(o.ms < 5000, `a rank took ${o.ms} ms`);
  assert.ok(ms < 5000, `the job took ${ms} ms`);
}

const differ = (what: string, here: string, there: string, peer: number, command = 'bench') =>
  `${command}: ranks were started with different options: ${what} is ${here} here, ${there} on rank ${peer}`;

test('--splits differs: both ranks name it, not a wrong result', { timeout: 30_000 }, async () => {
  await assertRefused(
    [{ program: 'sweep', arg: sweepArg }, { program: 'sweep', arg: { ...sweepArg, splits: 'zipf' } }],
    [differ('splits', "'uniform'", "'zipf'", 1), differ('splits', "'zipf'", "'uniform'", 0)],
  );
});

test('--op differs (dispatch, combine): refused at once, not a wait until the timeout', { timeout: 30_000 }, async () => {
  await assertRefused(
    [{ program: 'sweep', arg: { ...sweepArg, op: 'dispatch' } }, { program: 'sweep', arg: { ...sweepArg, op: 'combine' } }],
    [differ('op', "'dispatch'", "'combine'", 1), differ('op', "'combine'", "'dispatch'", 0)],
  );
});

test('--op differs between the sweep and the token MoE program: op is named first', { timeout: 30_000 }, async () => {
  await assertRefused(
    [{ program: 'sweep', arg: { ...sweepArg, op: 'dispatch' } }, { program: 'moeTokenSweep', arg: moeArg }],
    [differ('op', "'dispatch'", "'moe-dispatch'", 1), differ('op', "'moe-dispatch'", "'dispatch'", 0)],
  );
});

test('--row-bytes differs: named by its flag, not a symmetric buffer size', { timeout: 30_000 }, async () => {
  await assertRefused(
    [{ program: 'sweep', arg: sweepArg }, { program: 'sweep', arg: { ...sweepArg, rowBytes: 48 } }],
    [differ('--row-bytes', '64', '48', 1), differ('--row-bytes', '48', '64', 0)],
  );
});

test('--max differs: the sizes, and the flags that set them', { timeout: 30_000 }, async () => {
  await assertRefused(
    [{ program: 'sweep', arg: sweepArg }, { program: 'sweep', arg: { ...sweepArg, sizes: [4096, 8192] } }],
    [differ('sizes (--min, --max, --rows-per-expert)', '[4096]', '[4096,8192]', 1), differ('sizes (--min, --max, --rows-per-expert)', '[4096,8192]', '[4096]', 0)],
  );
});

test('token MoE sweep: --num-experts differs', { timeout: 30_000 }, async () => {
  await assertRefused(
    [{ program: 'moeTokenSweep', arg: moeArg }, { program: 'moeTokenSweep', arg: { ...moeArg, numExperts: 16 } }],
    [differ('--num-experts', '8', '16', 1), differ('--num-experts', '16', '8', 0)],
  );
});

test('bench allreduce: dtype differs', { timeout: 30_000 }, async () => {
  await assertRefused(
    [{ program: 'allReduceSweep', arg: allReduceArg }, { program: 'allReduceSweep', arg: { ...allReduceArg, dtype: 'bf16' } }],
    [differ('dtype', "'f32'", "'bf16'", 1, 'bench allreduce'), differ('dtype', "'bf16'", "'f32'", 0, 'bench allreduce')],
  );
});

test('different commands (bench allreduce, bench): named as such', { timeout: 30_000 }, async () => {
  await assertRefused(
    [{ program: 'allReduceSweep', arg: allReduceArg }, { program: 'sweep', arg: sweepArg }],
    [
      "bench allreduce: ranks were started with different commands: 'bench allreduce' here, 'bench' on rank 1",
      "bench: ranks were started with different commands: 'bench' here, 'bench allreduce' on rank 0",
    ],
  );
});

test('the same options run, each process drawing its own data key (a per-rank field)', { timeout: 60_000 }, async () => {
  const { outcomes } = await run([{ program: 'sweep', arg: sweepArg }, { program: 'sweep', arg: { ...sweepArg, dataKey: 8 } }]);
  assert.deepEqual(outcomes.map((o) => o.message), [undefined, undefined]);
  const same = await run([{ program: 'allReduceSweep', arg: allReduceArg }, { program: 'allReduceSweep', arg: allReduceArg }]);
  assert.deepEqual(same.outcomes.map((o) => o.message), [undefined, undefined]);
});
