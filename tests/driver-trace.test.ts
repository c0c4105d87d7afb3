// A2AV_DRIVER_TRACE's notes (cuda/driver-trace.ts): what a rank thread records of its driver calls,
// and the lines runRanks prints from them when a rank fails. No driver needed: any function traces.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { createDriverTrace, describeDriverTrace, noteLaneCall, stuckHint, traced, traceThisRank, watchDriverTrace } from '../src/cuda/driver-trace.js';

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

test('the watch tells once of a rank that stays inside one driver call, and not of one that moves on', async () => {
  const trace = createDriverTrace(2);
  const slots = new Int32Array(trace.buffer);
  const perRank = slots.length / 2;
  const told: string[] = [];
  const stop = watchDriverTrace(trace, NAMES, (text) => told.push(text), 300);
  const until = async (done: () => boolean, ms = 5000) => {
    for (const end = Date.now() + ms; !done() && Date.now() < end; ) {
      slots[1]!++; // rank 0 keeps making calls
      await new Promise((r) => setTimeout(r, 10));
    }
  };
  try {
    // Rank 1 enters cuStreamSynchronize (the slot holds the call's index + 1) and stays there;
    // rank 0 is inside cuLaunchKernel, a new call each time.
    Atomics.store(slots, 0, 2);
    Atomics.store(slots, perRank, 3);
    slots[perRank + 1] = 7;
    await until(() => told.length > 0);
    await until(() => told.length > 1, 700); // rank 0, moving on, is never told of
    assert.equal(told.length, 1, told.join('\n'));
    assert.match(told[0]!, /^a2av: rank 1 has been inside cuStreamSynchronize for \d+ ms/);
    assert.match(told[0]!, /\nrank 0: inside cuLaunchKernel; .*\nrank 1: inside cuStreamSynchronize; .*7 driver calls/);
    // Rank 1 leaves and comes back in: a new stretch, told again.
    Atomics.store(slots, perRank, 0);
    await new Promise((r) => setTimeout(r, 100));
    Atomics.store(slots, perRank, 3);
    slots[perRank + 1] = 8;
    await until(() => told.length > 1);
    assert.equal(told.length, 2);
    assert.match(told[1]!, /rank 1: inside cuStreamSynchronize; .*8 driver calls/);
  } finally {
    stop();
  }
});

test('a rank stuck inside a driver call that waits for the GPU is told what to do instead', async () => {
  const names = ['cuLaunchKernel', 'cuGraphInstantiate'];
  const trace = createDriverTrace(2);
  const slots = new Int32Array(trace.buffer);
  const told: string[] = [];
  const stop = watchDriverTrace(trace, names, (text) => told.push(text), 200);
  try {
    Atomics.store(slots, slots.length / 2, 2); // rank 1 inside cuGraphInstantiate, and stays
    for (const end = Date.now() + 5000; told.length === 0 && Date.now() < end; ) await new Promise((r) => setTimeout(r, 20));
    assert.match(told[0] ?? '', /^a2av: rank 1 has been inside cuGraphInstantiate for \d+ ms \(A2AV_DRIVER_TRACE\) \(cuGraphInstantiate can wait for every kernel on the GPU, a peer's call waiting for this rank among them: capture on every rank, then meet \(comm\.barrier\(\)\) before any rank launches a replay\); every rank now:/);
  } finally {
    stop();
  }
  assert.equal(stuckHint('cuStreamSynchronize'), '', 'a wait on its own stream gets no hint');
  assert.match(stuckHint('cuMemFree'), /free buffers between phases of work/);
});
