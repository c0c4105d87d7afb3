// Launch plans: the defaults stay resident beside the other ranks on the GPU, overrides are checked.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { UsageError } from '../src/errors.js';
import { defaultPlan, tileBytes, validatePlan, type PlanContext } from '../src/tune/plan.js';

// An H200-like device: 132 SMs, 2048 threads per SM.
const ctx = (inputBytes: number, ranksOnDevice: number): PlanContext => ({
  residentBlocks: (threads) => 132 * Math.floor(2048 / threads),
  ranksOnDevice,
  inputBytes,
});

test('small calls get one block per tile of input, at least one', () => {
  for (const ranks of [1, 2, 8]) {
    assert.deepEqual(defaultPlan(ctx(0, ranks)), { blocks: 1, threads: 512 });
    assert.deepEqual(defaultPlan(ctx(1, ranks)), { blocks: 1, threads: 512 });
    assert.deepEqual(defaultPlan(ctx(3 * tileBytes(512), ranks)), { blocks: 3, threads: 512 });
    assert.deepEqual(defaultPlan(ctx(3 * tileBytes(512) + 1, ranks)), { blocks: 4, threads: 512 });
  }
});

test('large calls fill the fair share, whatever the number of peers', () => {
  for (const ranks of [1, 2, 4, 8]) {
    const plan = defaultPlan(ctx(1 << 30, ranks));
    assert.deepEqual(plan, { blocks: Math.floor((132 * 4) / ranks), threads: 512 });
    assert.deepEqual(validatePlan(plan, ctx(1 << 30, ranks)), plan);
  }
});

test('an override that cannot be resident, or is malformed, is a UsageError', () => {
  assert.throws(() => validatePlan({ blocks: 67, threads: 512 }, ctx(1 << 30, 8)), (e: unknown) => e instanceof UsageError && /resident/.test(e.message));
  for (const bad of [{ blocks: 0, threads: 512 }, { blocks: 1.5, threads: 512 }, { blocks: 4, threads: 48 }, { blocks: 4, threads: 2048 }])
    assert.throws(() => validatePlan(bad, ctx(1 << 20, 1)), UsageError);
  assert.deepEqual(validatePlan({ blocks: 66, threads: 512 }, ctx(1 << 30, 8)), { blocks: 66, threads: 512 });
});
