// Launch plans: the defaults stay resident beside the other ranks on the GPU, overrides are checked.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { UsageError } from '../src/errors.js';
import { defaultPlan, GRID_MIN_BYTES, laneShares, PeerSplitMode, peerSplitMode, tileBytes, validatePlan, type PlanContext } from '../src/tune/plan.js';
import { gridCopyFromEnv, moeGridFromEnv, peerSplitFromEnv } from '../src/knobs.js';
import { leavesFused } from '../src/backends/cuda/moe.js';

// An H200-like device: 132 SMs, 2048 threads per SM. By default the ranks span several GPUs (no grid mode).
const ctx = (inputBytes: number, ranksOnDevice: number, more: Partial<PlanContext> = {}): PlanContext => ({
  residentBlocks: (threads) => 132 * Math.floor(2048 / threads),
  ranksOnDevice,
  inputBytes,
  allOnDevice: false,
  ...more,
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
  // With lanes, the message says the limit is per call and why.
  assert.throws(
    () => validatePlan({ blocks: 34, threads: 512 }, ctx(1 << 30, 8, { residentBlocks: (t) => (132 * Math.floor(2048 / t)) / 2, lanes: 2 })),
    (e: unknown) => e instanceof UsageError && /at most 33 blocks of 512 threads a call: 8 rank\(s\) here, 2 lane\(s\) each/.test(e.message),
  );
  for (const bad of [{ blocks: 0, threads: 512 }, { blocks: 1.5, threads: 512 }, { blocks: 4, threads: 48 }, { blocks: 4, threads: 2048 }])
    assert.throws(() => validatePlan(bad, ctx(1 << 20, 1)), UsageError);
  assert.deepEqual(validatePlan({ blocks: 66, threads: 512 }, ctx(1 << 30, 8)), { blocks: 66, threads: 512 });
  // A misspelt field is named, not dropped (the call would run on another plan).
  assert.throws(() => validatePlan({ blocks: 4, threads: 512, bogus: 1 } as never, ctx(1 << 20, 1)), (e: unknown) => e instanceof UsageError && e.message === "plan has no field 'bogus': it takes blocks, threads and grid ({ threads })");
  assert.throws(() => validatePlan({ blocks: 4, threads: 512, grid: { thread: 256 } } as never, ctx(1 << 20, 1)), (e: unknown) => e instanceof UsageError && /^plan.grid has no field 'thread'/.test(e.message));
});

test('grid mode: large calls with every rank on one GPU, or when forced; never when turned off', () => {
  const grid = { blocks: 1, threads: 256, grid: { threads: 256 } };
  for (const ranks of [1, 2, 8]) {
    assert.deepEqual(defaultPlan(ctx(GRID_MIN_BYTES, ranks, { allOnDevice: true })), grid);
    assert.deepEqual(defaultPlan(ctx(1 << 30, ranks, { allOnDevice: true })), grid);
    assert.equal(defaultPlan(ctx(GRID_MIN_BYTES - 1, ranks, { allOnDevice: true })).grid, undefined);
    assert.equal(defaultPlan(ctx(1 << 30, ranks)).grid, undefined);
    assert.deepEqual(defaultPlan(ctx(1 << 30, ranks, { allOnDevice: true, rowBytes: 1024 })), grid);
    assert.equal(defaultPlan(ctx(1 << 30, ranks, { allOnDevice: true, rowBytes: 7 })).grid, undefined);
    assert.deepEqual(defaultPlan(ctx(64, ranks, { gridCopy: 'always' })), grid);
    assert.equal(defaultPlan(ctx(1 << 30, ranks, { allOnDevice: true, gridCopy: 'never' })).grid, undefined);
  }
  assert.deepEqual(validatePlan(grid, ctx(1 << 30, 8)), grid);
  for (const bad of [{ threads: 48 }, { threads: 2048 }, null])
    assert.throws(() => validatePlan({ blocks: 1, threads: 256, grid: bad as never }, ctx(1 << 30, 1)), UsageError);
});

test('A2AV_GRID_COPY accepts auto, always and never, and names anything else', () => {
  assert.equal(gridCopyFromEnv(undefined), 'auto');
  assert.equal(gridCopyFromEnv('always'), 'always');
  assert.equal(gridCopyFromEnv('never'), 'never');
  assert.throws(() => gridCopyFromEnv('yes'), (e: unknown) => e instanceof UsageError && /A2AV_GRID_COPY/.test(e.message));
});

test('blocks split between destinations across GPUs by default; A2AV_PEER_SPLIT forces either way and names anything else', () => {
  assert.equal(peerSplitFromEnv(undefined), 'auto');
  assert.equal(peerSplitFromEnv(''), 'auto');
  assert.equal(peerSplitFromEnv('always'), 'always');
  assert.equal(peerSplitFromEnv('never'), 'never');
  assert.throws(() => peerSplitFromEnv('1'), (e: unknown) => e instanceof UsageError && /A2AV_PEER_SPLIT must be auto, always or never, got '1'/.test(e.message));
  assert.equal(peerSplitMode({ allOnDevice: false }), PeerSplitMode.large, 'ranks span GPUs: large calls split');
  assert.equal(peerSplitMode({ allOnDevice: true }), PeerSplitMode.never, 'one GPU: the shared sweep');
  assert.equal(peerSplitMode({ allOnDevice: true, peerSplit: 'always' }), PeerSplitMode.always);
  assert.equal(peerSplitMode({ allOnDevice: false, peerSplit: 'never' }), PeerSplitMode.never);
});

test('A2AV_LANE_SHARES: grids from the lane\'s share (default) or the rank\'s whole share; anything else named', () => {
  assert.equal(laneShares(2, undefined), 2);
  assert.equal(laneShares(3, ''), 3);
  assert.equal(laneShares(2, '0'), 1);
  assert.equal(laneShares(2, '1'), 2);
  assert.equal(laneShares(1, '1'), 1);
  assert.throws(() => laneShares(2, 'yes'), (e: unknown) => e instanceof UsageError && /A2AV_LANE_SHARES must be 0 or 1, got 'yes'/.test(e.message));
});

test('A2AV_MOE_GRID accepts auto (the default), never and always, and names anything else', () => {
  assert.equal(moeGridFromEnv(undefined), 'auto');
  assert.equal(moeGridFromEnv(''), 'auto');
  assert.equal(moeGridFromEnv('never'), 'never');
  assert.equal(moeGridFromEnv('always'), 'always');
  assert.throws(() => moeGridFromEnv('1'), (e: unknown) => e instanceof UsageError && /A2AV_MOE_GRID must be never, auto or always, got '1'/.test(e.message));
});

test('MoE calls leave x_fused only on one GPU: large with 16-byte rows, or as the token group says', () => {
  const big = { oneGpu: true, outputBytes: GRID_MIN_BYTES, rowBytes: 4096 };
  assert.equal(leavesFused('auto', big), true);
  assert.equal(leavesFused('auto', { ...big, outputBytes: GRID_MIN_BYTES - 1 }), false);
  assert.equal(leavesFused('auto', { ...big, rowBytes: 4100 }), false);
  assert.equal(leavesFused('auto', { ...big, oneGpu: false }), false);
  // The token group's output holds the worst case, not the call: it says which path itself.
  assert.equal(leavesFused('auto', { ...big, oneGpuFused: true }), false);
  assert.equal(leavesFused('auto', { ...big, outputBytes: 64, rowBytes: 7, oneGpuFused: false }), true);
  assert.equal(leavesFused('auto', { ...big, oneGpu: false, oneGpuFused: false }), false);
  assert.equal(leavesFused('never', big), false);
  assert.equal(leavesFused('always', { ...big, outputBytes: 64, rowBytes: 7, oneGpuFused: true }), true);
  assert.equal(leavesFused('always', { ...big, oneGpu: false }), false);
});
