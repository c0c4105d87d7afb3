// a2av bench --op moe-dispatch|moe-combine: the routing (topk distinct experts per token, the same
// for a seed), and a short run on cpu, expanded and compact, every token count checked.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { runMoeTokenBench, tokenRouting } from '../src/bench/moe-tokens.js';
import { tokenValue } from '../src/bench/moe-token-check.js';
import { runRanks } from '../src/world/threads.js';
import type { FaultyTokenArg } from './fixtures/bench-faulty-token-rank.js';

test('routing: topk distinct experts per token in range, the same for the same seed, rank and count', () => {
  const ids = tokenRouting(5, 1, 200, 64, 8);
  assert.equal(ids.length, 1600);
  for (let t = 0; t < 200; t++) {
    const row = [...ids.slice(t * 8, t * 8 + 8)].map(Number);
    assert.equal(new Set(row).size, 8);
    for (const g of row) assert.ok(g >= 0 && g < 64);
  }
  assert.deepEqual(tokenRouting(5, 1, 200, 64, 8), ids);
  assert.notDeepEqual(tokenRouting(5, 2, 200, 64, 8), ids);
});

test('cpu, 2 ranks: dispatch and combine rows for every token count, expanded and compact', { timeout: 120_000 }, async () => {
  for (const [op, layout] of [['moe-dispatch', 'expanded'], ['moe-combine', 'compact']] as const) {
    const result = await runMoeTokenBench({ backend: 'cpu', ranks: 2, op, tokens: [1, 9], numExperts: 8, topk: 3, hidden: 64, layout, seed: 1, repeats: 1 });
    assert.ok(result);
    assert.deepEqual(result.rows.map((r) => r.tokens), [1, 9]);
    for (const r of result.rows) {
      assert.equal(r.selections, r.tokens * 3, 'every token picks topk experts');
      assert.equal(r.bytes, r.selections * 64 * 2);
      assert.ok(r.timeUs > 0 && r.oneDUs > 0);
    }
  }
});

for (const [corrupt, op, wrong] of [
  ['allToAllV2d', 'moe-dispatch', /^rank 1: eager moe-dispatch gave a wrong result at .*: recvX byte 0: expert 4's row 0 \(recvX row 0\) should be rank 0's token \d+: element 0 is /],
  ['allToAllV2dOffset', 'moe-combine', /^rank 1: eager moe-combine gave a wrong result at .*: out byte \d+: token \d+, element 0: .*, the 3 terms of its own row give /],
] as const) {
  test(`a wrong ${op === 'moe-dispatch' ? 'received row' : 'combined token'} ends the token bench, naming it (checked beyond the counts)`, { timeout: 60_000 }, async () => {
    const arg: FaultyTokenArg = { op, tokens: [32], numExperts: 8, topk: 3, hidden: 16, layout: 'expanded', seed: 1, repeats: 1, corrupt };
    await assert.rejects(
      runRanks({ backend: 'cpu', ranks: 2, timeoutMs: 30_000 }, new URL('./fixtures/bench-faulty-token-rank.js', import.meta.url), 'faultyTokenSweep', arg),
      (err: Error & { code?: string }) => {
        assert.equal(err.code, 'A2AV_BENCH_WRONG_RESULT', err.message);
        assert.match(err.message.replace(/^rank 1 failed: (rank 1: )?/, 'rank 1: '), wrong);
        return true;
      },
    );
  });
}

test('the check\'s x rows name their rank and token (the first three elements), for every token a rank can have here', () => {
  const seen = new Set<string>();
  for (let q = 0; q < 8; q++) for (let t = 0; t < 8192; t++) seen.add([0, 1, 2].map((h) => tokenValue(q, t, h)).join(','));
  assert.equal(seen.size, 8 * 8192);
  for (let h = 0; h < 64; h++) assert.ok(tokenValue(7, 8191, h) >= 1 && tokenValue(7, 8191, h) <= 256, 'exact in bf16, never 0 (the poison)');
});

for (const layout of ['expanded', 'compact'] as const) {
  test(`${layout}: the graph check's poison makes a replay that wrote nothing fail the check, and one that did pass it`, { timeout: 60_000 }, async () => {
    const said = await runRanks<{ layout: string }, string[]>({ backend: 'cpu', ranks: 2, timeoutMs: 30_000 }, new URL('./fixtures/bench-faulty-token-rank.js', import.meta.url), 'poisonedChecks', { layout });
    for (const s of said) assert.deepEqual(s, ['ok', 'WrongResultError', 'ok', 'ok', 'WrongResultError']);
  });
}

test('one rank, one expert, one token: the header and the progress line say them in the singular', { timeout: 60_000 }, () => {
  const cli = fileURLToPath(new URL('../src/cli.js', import.meta.url));
  const args = ['bench', '--op', 'moe-dispatch', '--backend', 'cpu', '--ranks', '1', '--num-experts', '1', '--topk', '1', '--tokens', '1', '--hidden', '8', '--repeats', '1', '--seed', '1'];
  const run = spawnSync(process.execPath, [cli, ...args], { encoding: 'utf8' });
  assert.equal(run.status, 0, run.stderr);
  assert.match(run.stdout, /^# a2av bench moe-dispatch: cpu, 1 rank, 1 expert, top-1, hidden 8 bf16, expanded, routing seed 1, /);
  assert.match(run.stdout, /^# time µs = median of 1 timed loop /m);
  assert.match(run.stderr, /^\[1\/1\] 1 token: [\d.]+ µs, /m);
  // The JSON keeps its numbers as they are.
  const json = spawnSync(process.execPath, [cli, ...args, '--json'], { encoding: 'utf8' });
  assert.equal(json.status, 0, json.stderr);
  const result = JSON.parse(json.stdout);
  assert.deepEqual([result.ranks, result.numExperts, result.rows[0].tokens], [1, 1, 1]);
  // What a rerun needs: the routing's seed and the timed loops.
  assert.deepEqual([result.seed, result.repeats], [1, 1]);
});

test('the CLI refuses experts that are not a multiple of the ranks, in one line', { timeout: 60_000 }, () => {
  const cli = fileURLToPath(new URL('../src/cli.js', import.meta.url));
  const run = spawnSync(process.execPath, [cli, 'bench', '--op', 'moe-dispatch', '--backend', 'cpu', '--ranks', '3', '--num-experts', '8', '--tokens', '1'], { encoding: 'utf8' });
  assert.equal(run.status, 1);
  assert.match(run.stderr, /--num-experts 8 is not a multiple of the 3 ranks/);
});
