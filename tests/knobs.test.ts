// Every A2AV_* switch is read when a communicator is made, whichever backend reads it: a typo is a
// UsageError naming the switch on cpu too, not a silent default that surfaces only on a GPU.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { UsageError } from '../src/errors.js';
import { checkKnobs } from '../src/knobs.js';

const SWITCHES: Record<string, { good: string[]; bad: string; says: string }> = {
  A2AV_GRID_COPY: { good: ['', 'auto', 'always', 'never'], bad: 'maybe', says: "A2AV_GRID_COPY must be auto, always or never, got 'maybe'" },
  A2AV_PEER_SPLIT: { good: ['auto', 'always', 'never'], bad: 'bad', says: "A2AV_PEER_SPLIT must be auto, always or never, got 'bad'" },
  A2AV_MOE_GRID: { good: ['never', 'auto', 'always'], bad: 'sometimes', says: "A2AV_MOE_GRID must be never, auto or always, got 'sometimes'" },
  A2AV_LANE_SHARES: { good: ['0', '1'], bad: 'x', says: "A2AV_LANE_SHARES must be 0 or 1, got 'x'" },
  A2AV_MOE_GATHER: { good: ['0', '1'], bad: 'yes', says: "A2AV_MOE_GATHER must be 0 or 1, got 'yes'" },
  A2AV_MOE_PULL: { good: ['auto', 'always', 'never'], bad: '0', says: "A2AV_MOE_PULL must be auto, always or never, got '0'" },
  A2AV_MOE_FUSED: { good: ['0', '1'], bad: 'no', says: "A2AV_MOE_FUSED must be 0 or 1, got 'no'" },
  A2AV_EARLY_LAUNCH: { good: ['0', '1'], bad: 'off', says: "A2AV_EARLY_LAUNCH must be 0 or 1, got 'off'" },
  A2AV_SHARED_MODULES: { good: ['0', '1'], bad: 'on', says: "A2AV_SHARED_MODULES must be 0 or 1, got 'on'" },
  A2AV_FORCE_SYSTEM_SCOPE: { good: ['0', '1'], bad: 'true', says: "A2AV_FORCE_SYSTEM_SCOPE must be 0 or 1, got 'true'" },
  A2AV_DRIVER_TRACE: { good: ['0', '1'], bad: 'yes', says: "A2AV_DRIVER_TRACE must be 0 or 1, got 'yes'" },
};

function withEnv(name: string, value: string, fn: () => void): void {
  const saved = process.env[name];
  process.env[name] = value;
  try {
    fn();
  } finally {
    if (saved === undefined) delete process.env[name];
    else process.env[name] = saved;
  }
}

test('checkKnobs: each switch takes its values and refuses others, naming itself', () => {
  checkKnobs();
  for (const [name, { good, bad, says }] of Object.entries(SWITCHES)) {
    for (const v of good) withEnv(name, v, () => checkKnobs());
    withEnv(name, bad, () => assert.throws(() => checkKnobs(), (e: unknown) => e instanceof UsageError && e.message === says, name));
  }
});

test('a communicator is refused on cpu for a switch only the cuda backend reads', async () => {
  const { runRanks } = await import('../src/world/threads.js');
  const saved = process.env.A2AV_MOE_GRID;
  process.env.A2AV_MOE_GRID = 'sometimes'; // rank threads copy the environment when they start
  try {
    await assert.rejects(
      runRanks({ backend: 'cpu', ranks: 2, timeoutMs: 10_000 }, new URL('./fixtures/bench-options-rank.js', import.meta.url), 'perRankOptions', []),
      (e: unknown) => e instanceof UsageError && /A2AV_MOE_GRID must be never, auto or always, got 'sometimes'/.test(e.message),
    );
  } finally {
    if (saved === undefined) delete process.env.A2AV_MOE_GRID;
    else process.env.A2AV_MOE_GRID = saved;
  }
});
