// A2AV_DRIVER_TRACE's notes (cuda/driver-trace.ts): what a rank thread records of its driver calls,
// and the lines runRanks prints from them when a rank fails. No driver needed: any function traces.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { createDriverTrace, describeDriverTrace, noteLaneCall, traced, traceThisRank } from '../src/cuda/driver-trace.js';

const NAMES = ['cuInit', 'cuLaunchKernel', 'cuStreamSynchronize'];

test('a traced thread notes its calls, the one it is in, and its last lane call', () => {
  const trace = createDriverTrace(3);
  const untraced = (a: number, b: number) => a + b;
  assert.equal(traced(0, untraced), untraced, 'before traceThisRank, functions are left as they are');
  traceThisRank(trace, 1);
  const launch = traced(1, (a: number, b: number) => a * b);
  let seenInside = '';
  const sync = traced(2, () => {
    seenInside = describeDriverTrace(trace, NAMES).split('\n')[1]!;
    return 0;
  });
  for (let i = 0; i < 14; i++) assert.equal(launch(i, 3), i * 3);
  noteLaneCall(41);
  assert.equal(sync(), 0);
  assert.match(seenInside, /^rank 1: inside cuStreamSynchronize; last lane call queued 41; 15 driver calls/);
  const lines = describeDriverTrace(trace, NAMES).split('\n');
  assert.equal(lines.length, 3);
  assert.equal(lines[0], 'rank 0: not in the driver; last lane call queued 0; 0 driver calls, the last: ');
  // The ring keeps the last 12 calls, oldest first.
  assert.equal(lines[1], `rank 1: not in the driver; last lane call queued 41; 15 driver calls, the last: ${[...Array(11).fill('cuLaunchKernel'), 'cuStreamSynchronize'].join(' ')}`);
  noteLaneCall(-57);
  assert.match(describeDriverTrace(trace, NAMES).split('\n')[1]!, /last lane call queued 57 \(a replay\)/);
});

test('a call that throws leaves the thread out of the driver', () => {
  const trace = createDriverTrace(1);
  traceThisRank(trace, 0);
  const failing = traced(0, () => {
    throw new Error('boom');
  });
  assert.throws(() => failing(), /boom/);
  assert.match(describeDriverTrace(trace, NAMES), /^rank 0: not in the driver; .*1 driver calls, the last: cuInit$/);
});
