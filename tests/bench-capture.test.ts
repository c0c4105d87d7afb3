// The bench's graphs are captured on every rank before any rank replays one: instantiating a graph
// can wait for the kernels running in the context, and with ranks sharing a GPU as threads a rank
// that replayed first held its peers inside cuGraphInstantiate until its calls timed out.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { CaptureStamps } from './fixtures/capture-batch-rank.js';
import { runRanks } from '../src/world/threads.js';

const program = new URL('./fixtures/capture-batch-rank.js', import.meta.url);

test('captureBatch returns on no rank before the slowest rank has captured', { timeout: 60_000 }, async () => {
  for (const slowRank of [0, 2]) {
    const stamps = await runRanks<object, CaptureStamps>({ backend: 'cpu', ranks: 3, timeoutMs: 20_000 }, program, 'stampCapture', { slowRank, slowMs: 400 });
    const lastCapture = Math.max(...stamps.map((s) => s.capturedAt));
    for (const [rank, s] of stamps.entries()) {
      assert.equal(s.error, undefined);
      assert.ok(s.returnedAt >= lastCapture, `rank ${rank} returned ${lastCapture - s.returnedAt} ms before rank ${slowRank} had captured`);
      assert.equal(s.closed, 1, 'the replay is closed once, by the program');
    }
  }
});

test('captureBatch closes its replay when the ranks cannot meet', { timeout: 60_000 }, async () => {
  const stamps = await runRanks<object, CaptureStamps>({ backend: 'cpu', ranks: 2, timeoutMs: 20_000 }, program, 'stampCapture', { slowRank: 0, slowMs: 0, failBarrier: true });
  for (const s of stamps) {
    assert.equal(s.error, 'the meeting failed');
    assert.equal(s.closed, 1);
  }
});
