// comm.read and comm.write on cuda (cuda/host-copies.ts) beside a peer's kernel that waits for
// this rank on the same GPU: they must not queue behind it (docs/perf.md, the one-GPU MoE stall).
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { cudaUnavailableReason } from '../src/cuda/probe.js';
import { runRanks } from '../src/world/threads.js';
import type { Outcome } from './host-copies/programs.js';

const programs = new URL('./host-copies/programs.js', import.meta.url);

test('cuda: a rank writes and reads device memory while its peer\'s kernel waits for it, then their call completes', { skip: cudaUnavailableReason() }, async () => {
  const W = 2;
  const rows = 1000;
  // Past the 8 MiB staging: three pieces a copy.
  const copyBytes = 20 * (1 << 20) + 12;
  const timeoutMs = 20_000;
  const outcomes = await runRanks<unknown, Outcome>({ backend: 'cuda', ranks: W, timeoutMs }, programs, 'copiesBesideAWaitingPeer', { rows, copyBytes });
  assert.deepEqual(outcomes[0]!.roundTrips, [true, true, true]);
  assert.ok(outcomes[0]!.copiesMs < timeoutMs / 2, `rank 0's copies took ${outcomes[0]!.copiesMs} ms`);
  const chunk = rows * 16;
  for (let me = 0; me < W; me++) {
    const out = outcomes[me]!.output;
    for (let src = 0; src < W; src++) {
      const sent = outcomes[src]!.input.subarray(me * chunk, (me + 1) * chunk);
      assert.ok(Buffer.from(out.subarray(src * chunk, (src + 1) * chunk)).equals(Buffer.from(sent)), `rank ${me}: rows from rank ${src}`);
    }
    assert.ok(out.subarray(W * chunk).every((b) => b === 0xa5), `rank ${me}: the canary past the end`);
  }
});
