// The library refuses, by name, what would otherwise fail late or misleadingly: ranks past the cpu
// cap, createMoeGroup's options (topk past the experts, none at all, ranks that disagree), a call
// after close() (ClosedError, exported), "got X" that shows a string as a string (allReduce's
// dtype too), and a buffer too small that says the world size only where the size depends on it.
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import * as api from '../src/index.js';
import { createComm } from '../src/backends/create.js';
import { cudaUnavailableReason } from '../src/cuda/probe.js';
import { MAX_CPU_WORLD } from '../src/backends/cpu/world.js';
import { MAX_WORLD } from '../src/backends/cuda/layout.js';
import type { AllReduceArgs, DeviceBuffer } from '../src/backends/backend.js';
import { checkAllReduce, checkAllToAllV, checkPlan, checkPlanMove, planBuffers, type CheckContext } from '../src/collectives/check.js';
import { ClosedError, shown, UsageError } from '../src/errors.js';
import { CPU_MAX_BUFFER_BYTES } from '../src/backends/cpu/buffer.js';
import type { MoeGroupOptions } from '../src/moe/api.js';
import type { Store } from '../src/world/store.js';
import { init } from '../src/world/init.js';
import { runRanks, type RankFailure } from '../src/world/threads.js';
import type { Caught } from './library-refusals/programs.js';

const programs = new URL('./library-refusals/programs.js', import.meta.url);

/** A rank program of tests/library-refusals/programs.ts on one rank: each of its outcomes as 'Name: message', or 'no error'. */
async function outcomesOf(opts: { backend: 'cpu' | 'cuda'; ranks: 1; lanes?: number }, program: string): Promise<string[]> {
  const [outcomes] = await runRanks<unknown, (Caught | 'no error')[]>(opts, programs, program, {});
  return outcomes.map((o) => (o === 'no error' ? o : `${o.name}: ${o.message}`));
}

const base: MoeGroupOptions = { numExperts: 8, topk: 4, maxTokensPerRank: 4, rowBytes: 16, layout: 'expanded' };

/** Every rank's outcome of createMoeGroup with its own options. */
const groupOutcomes = (byRank: (Partial<MoeGroupOptions & { laneIndex: number }> | undefined)[], ranks = 2): Promise<(Caught | 'no error')[]> =>
  runRanks({ backend: 'cpu', ranks, timeoutMs: 10_000 }, programs, 'groupWith', { byRank });

function assertUsage(outcomes: (Caught | 'no error')[], messages: string[]): void {
  assert.deepEqual(outcomes.map((o) => (o === 'no error' ? o : o.message)), messages);
  for (const o of outcomes) assert.ok(o !== 'no error' && o.usage && o.name === 'UsageError', JSON.stringify(o));
}

describe('cpu backend: at most as many ranks as the cuda backend', () => {
  test('the cap is the cuda backend\'s MAX_WORLD', () => {
    assert.equal(MAX_CPU_WORLD, MAX_WORLD);
  });

  test('runRanks refuses past the cap before starting a thread', async () => {
    const started = performance.now();
    const err = await runRanks({ backend: 'cpu', ranks: MAX_CPU_WORLD + 1 }, programs, 'groupWith', { byRank: [] }).catch((e: unknown) => e);
    assert.ok(err instanceof UsageError, String(err));
    assert.equal(err.message, `cpu backend supports at most ${MAX_CPU_WORLD} ranks, got ${MAX_CPU_WORLD + 1}`);
    assert.equal((err as Partial<RankFailure>).failedRank, undefined, 'refused by runRanks, not by a rank');
    assert.ok(performance.now() - started < 2000);
  });

  test('a launched rank\'s communicator refuses past the cap before meeting its peers', async () => {
    // A store that must not be used: the refusal comes first.
    const store = new Proxy({}, { get: () => assert.fail('the store was used') }) as Store;
    await assert.rejects(createComm({ backend: 'cpu', rank: 0, worldSize: 100_000, timeoutMs: 1000, lanes: 1, store }), {
      name: 'UsageError',
      message: `cpu backend supports at most ${MAX_CPU_WORLD} ranks, got 100000`,
    });
  });

  test('a timeout given as a string is refused as one, not taken', async () => {
    const store = new Proxy({}, { get: () => assert.fail('the store was used') }) as Store;
    await assert.rejects(createComm({ backend: 'cpu', rank: 0, worldSize: 2, timeoutMs: '100' as unknown as number, lanes: 1, store }), {
      name: 'UsageError',
      message: "timeoutMs must be a positive, finite number of ms, got '100' (a string)",
    });
  });
});

describe('createMoeGroup options', () => {
  test('topk past numExperts is refused, as the CLI refuses it', async () => {
    assertUsage(await groupOutcomes([{ ...base, numExperts: 4, topk: 9 }]), [0, 1].map((r) => `rank ${r}: createMoeGroup: topk 9 is more than the 4 experts`));
  });

  test('no options at all is a UsageError, not a TypeError', async () => {
    const expected = (r: number) => `rank ${r}: createMoeGroup: options must be an object { numExperts, topk, maxTokensPerRank, rowBytes, layout }, got undefined`;
    assertUsage(await groupOutcomes([undefined]), [0, 1].map(expected));
  });

  test('ranks that disagree on an option are refused on every rank, naming it and both values', async () => {
    assertUsage(await groupOutcomes([base, { ...base, topk: 8 }]), [
      'rank 0: createMoeGroup: ranks disagree on topk: 4 here, 8 on rank 1',
      'rank 1: createMoeGroup: ranks disagree on topk: 8 here, 4 on rank 0',
    ]);
    const six = { ...base, numExperts: 6 };
    assertUsage(await groupOutcomes([six, six, { ...six, layout: 'compact' }], 3), [
      "rank 0: createMoeGroup: ranks disagree on layout: 'expanded' here, 'compact' on rank 2",
      "rank 1: createMoeGroup: ranks disagree on layout: 'expanded' here, 'compact' on rank 2",
      "rank 2: createMoeGroup: ranks disagree on layout: 'compact' here, 'expanded' on rank 0",
    ]);
    // Defaults count as given: combineRowBytes is rowBytes's, expertAlignment 1.
    assertUsage(await groupOutcomes([{ ...base, expertAlignment: 1 }, { ...base, expertAlignment: 4 }]), [
      'rank 0: createMoeGroup: ranks disagree on expertAlignment: 1 here, 4 on rank 1',
      'rank 1: createMoeGroup: ranks disagree on expertAlignment: 4 here, 1 on rank 0',
    ]);
    assert.deepEqual(await groupOutcomes([base, { ...base, combineRowBytes: 16, expertAlignment: 1 }]), ['no error', 'no error']);
  });

  test('ranks whose groups would queue on different lanes are refused at once, not left to time out', async () => {
    const started = performance.now();
    assertUsage(await groupOutcomes([{ ...base, laneIndex: 1 }, base]), [
      'rank 0: createMoeGroup: ranks disagree on lane: 1 here, 0 on rank 1',
      'rank 1: createMoeGroup: ranks disagree on lane: 0 here, 1 on rank 0',
    ]);
    assert.ok(performance.now() - started < 8000, 'no rank waited for the 10 s timeout');
    assert.deepEqual(await groupOutcomes([{ ...base, laneIndex: 1 }, { ...base, laneIndex: 1 }]), ['no error', 'no error']);
  });

  test('a buffer past what the host can hold is named, with what sized it, and the group keeps none of the ones it made', async () => {
    const [{ outcome, live }] = await runRanks<unknown, { outcome: Caught | 'no error'; live: number }>({ backend: 'cpu', ranks: 1 }, programs, 'groupTooLarge', {});
    assert.ok(outcome !== 'no error', 'refused');
    const bytes = 2 ** 50;
    const how = '128 rows sent at most: maxTokensPerRank 16 × 8 a token, of combineRowBytes 8796093022208';
    if (bytes > CPU_MAX_BUFFER_BYTES) {
      // Node 20: past what a typed array holds, refused before any memory is asked for.
      assert.ok(outcome.usage, JSON.stringify(outcome));
      assert.match(outcome.message, new RegExp(`^rank 0: createMoeGroup: its back buffer of ${bytes} bytes \\(${how}\\): rank 0: a cpu buffer holds at most \\d+ bytes`));
    } else {
      assert.equal(outcome.name, 'HostMemoryError', JSON.stringify(outcome));
      assert.equal(outcome.code, 'A2AV_HOST_MEMORY');
      assert.match(outcome.message, new RegExp(`^rank 0: createMoeGroup: its back buffer \\(${how}\\): could not allocate ${bytes} bytes of host memory \\(\\d+ bytes free on this machine\\)$`));
    }
    assert.equal(live, 0, 'every buffer made before the refusal is freed');
  });

  test('a rank whose own options are refused takes its peers down with it, without a timeout', async () => {
    const started = performance.now();
    assertUsage(await groupOutcomes([base, { ...base, rowBytes: 0 }]), [
      'rank 0: createMoeGroup: rank 1 refused its options (its own error says why)',
      'rank 1: createMoeGroup: rowBytes must be a positive integer, got 0',
    ]);
    assert.ok(performance.now() - started < 8000, 'no rank waited for the 10 s timeout');
  });
});

describe('a peer that left', () => {
  test('a wait for a rank that closed its communicator ends then, not at the timeout, and says whether it failed first (an allReduce\'s wait named as one, not as splits); one for a rank still open times out', async () => {
    for (const how of ['closes', 'stays', 'fails'] as const) {
      // A rank still open is waited for until the timeout; one that left, not: 10 s would show.
      const timeoutMs = how === 'stays' ? 300 : 10_000;
      const started = performance.now();
      const [outcome] = await runRanks<unknown, Caught | 'no error'>({ backend: 'cpu', ranks: 2, timeoutMs }, programs, 'peerLeaves', { how });
      assert.ok(outcome !== 'no error' && outcome.name === 'TimeoutError', JSON.stringify(outcome));
      const what = /\(allReduce of 4 f32 on lane 0: .*, allReduce: waiting for the peer's count, dtype, op and output; the peer got no further than call \d+/;
      assert.match(outcome.message, what);
      if (how === 'stays') {
        assert.match(outcome.message, /^rank 0: timed out after 300 ms waiting for rank 1 \(/);
        assert.doesNotMatch(outcome.message, /closed/);
        continue;
      }
      assert.match(outcome.message, /^rank 0: stopped waiting for rank 1 after \d+ ms \(timeout 10000 ms\): it will make no more calls \(/);
      // Failed first: this rank was the late one, and a launcher must not name rank 1 as the one that stopped.
      assert.equal(outcome.peerFailed, how === 'fails');
      assert.ok(outcome.message.endsWith(how === 'closes' ? '; it has closed its communicator)' : '; it has closed its communicator after a failure of its own (its error says which))'), outcome.message);
      assert.ok(performance.now() - started < 5000, `${how}: ended ${Math.round(performance.now() - started)} ms after it started, not at the timeout`);
    }
  });
});

describe('gatherOnHost', () => {
  test('numbers come back as they went, NaN, ±Infinity and -0 too; anything else is refused at once on the calling rank', async () => {
    const outcomes = await runRanks<unknown, { back: string[][]; refused: (Caught | 'no error')[] }>({ backend: 'cpu', ranks: 3 }, programs, 'gatherValues', {});
    for (const [rank, { back, refused }] of outcomes.entries()) {
      assert.deepEqual(back, [0, 1, 2].map((r) => [r === 1 ? 'NaN' : String(r), '-0', 'Infinity', '-Infinity', String(2 ** 53 - 1)]), `rank ${rank}`);
      assert.deepEqual(refused.map((o) => (o === 'no error' ? o : o.message)), [
        `rank ${rank}: gatherOnHost takes an array of numbers; item 0 is 1n (a bigint)`,
        `rank ${rank}: gatherOnHost takes an array of numbers; item 0 is '1' (a string)`,
        `rank ${rank}: gatherOnHost takes an array of numbers, got 7`,
        `rank ${rank}: gatherOnHost takes an array of numbers; item 0 is an object`,
      ]);
      assert.ok(refused.every((o) => o !== 'no error' && o.usage));
    }
  });
});

describe('a peer that left, in a host wait', () => {
  test('barrier, gatherOnHost and allocSymmetric end when the rank they wait for has closed, not at the 10 s set-up floor', async () => {
    for (const wait of ['barrier', 'gatherOnHost', 'allocSymmetric'] as const) {
      for (const how of ['closes', 'fails'] as const) {
        const started = performance.now();
        const [outcome] = await runRanks<unknown, Caught | 'no error'>({ backend: 'cpu', ranks: 2, timeoutMs: 300 }, programs, 'peerLeavesHostWait', { how, wait });
        const label = `${wait}, rank 1 ${how}`;
        assert.ok(outcome !== 'no error' && outcome.name === 'TimeoutError', `${label}: ${JSON.stringify(outcome)}`);
        assert.match(outcome.message, /^rank 0: stopped waiting for rank 1 after \d+ ms \(timeout 10000 ms\): it will make no more calls \(/, label);
        assert.ok(outcome.message.endsWith(how === 'closes' ? '; it has closed its communicator)' : '; it has closed its communicator after a failure of its own (its error says which))'), `${label}: ${outcome.message}`);
        assert.equal(outcome.peerFailed, how === 'fails', label);
        assert.ok(performance.now() - started < 5000, `${label}: ended ${Math.round(performance.now() - started)} ms after it started`);
      }
    }
  });
});

describe('ClosedError', () => {
  test('is exported, a UsageError with code A2AV_USAGE, and what a call after close() throws', async () => {
    assert.equal(api.ClosedError, ClosedError);
    const outcomes = await runRanks<unknown, Caught>({ backend: 'cpu', ranks: 2 }, programs, 'barrierAfterClose', {});
    assert.deepEqual(outcomes, [0, 1].map((r) => ({ name: 'ClosedError', message: `rank ${r}: communicator is closed`, code: 'A2AV_USAGE', usage: true, closed: true })));
    const err = await runRanks({ backend: 'cpu', ranks: 1 }, programs, 'throwsAfterClose', {}).catch((e: unknown) => e);
    assert.ok(err instanceof ClosedError && err instanceof UsageError, String(err));
    assert.equal(err.message, 'rank 0 failed: communicator is closed');
  });
});

describe('"got X" shows what was passed', () => {
  test('strings quoted, non-numbers with their type', () => {
    const cases: [unknown, string][] = [
      [16, '16'], [1.5, '1.5'], [NaN, 'NaN'], [undefined, 'undefined'], [null, 'null'],
      ['16', "'16' (a string)"], [16n, '16n (a bigint)'], [true, 'true (a boolean)'], [[16], 'an array'], [{}, 'an object'], [() => 16, 'a function'],
    ];
    for (const [value, text] of cases) assert.equal(shown(value), text);
    // Where a string of a set is expected, a string is shown plainly.
    assert.equal(shown('sparse', 'string'), "'sparse'");
    assert.equal(shown(5, 'string'), '5');
  });

  test('createMoeGroup rowBytes \'16\' and runRanks ranks \'2\'', async () => {
    assertUsage(await groupOutcomes([{ ...base, rowBytes: '16' as never }]), [0, 1].map((r) => `rank ${r}: createMoeGroup: rowBytes must be a positive integer, got '16' (a string)`));
    await assert.rejects(runRanks({ backend: 'cpu', ranks: '2' as never }, programs, 'groupWith', { byRank: [] }), {
      name: 'UsageError',
      message: "runRanks: ranks must be a positive integer, got '2' (a string)",
    });
  });
});

/** The message of the UsageError `call` throws (anything else fails the test). */
function refusal(call: () => unknown): string {
  try {
    call();
  } catch (err) {
    assert.ok(err instanceof UsageError, String(err));
    return err.message;
  }
  return assert.fail('expected a UsageError');
}

describe('a call\'s refusal says what matters', () => {
  // Rank 1 of 3: every buffer is its own.
  const ctx: CheckContext = { rank: 1, worldSize: 3, laneCount: 1, owns: () => true, ownsLane: () => true };
  const buffer = (bytes: number): DeviceBuffer => ({ bytes, symmetric: true, symmetricId: 0, freed: false });

  test('allReduce: the bytes its count takes, without the world size (it takes the same on any)', () => {
    const args: AllReduceArgs = { input: buffer(16), output: buffer(12), count: 4, dtype: 'f32', op: 'sum' };
    assert.equal(refusal(() => checkAllReduce(ctx, args)), 'rank 1: allReduce output holds 12 bytes, needs at least 16');
  });

  test('allReduce: a dtype or op not of the set is shown quoted, as every "got X"', () => {
    const args: AllReduceArgs = { input: buffer(16), output: buffer(16), count: 4, dtype: 'f32', op: 'sum' };
    assert.equal(refusal(() => checkAllReduce(ctx, { ...args, dtype: 'f16' as never })), "rank 1: allReduce dtype must be 'f32' or 'bf16', got 'f16'");
    assert.equal(refusal(() => checkAllReduce(ctx, { ...args, dtype: 4 as never })), "rank 1: allReduce dtype must be 'f32' or 'bf16', got 4");
    assert.equal(refusal(() => checkAllReduce(ctx, { ...args, op: 'max' as never })), "rank 1: allReduce op must be 'sum', got 'max'");
  });

  test('allToAllV: the splits\' shape counts ranks, so the world size is said', () => {
    const args = { input: buffer(64), output: buffer(64), inSplits: buffer(16), outSplitsOffsets: buffer(48), rowBytes: 4 };
    assert.equal(refusal(() => checkAllToAllV(ctx, args)), 'rank 1: inSplits (int64[W]) holds 16 bytes, needs at least 24 (W = 3)');
  });

  test("a plan's move into the plan's own splits or offsets is refused, as the direct call's is", () => {
    const [splits, offsets] = [buffer(48), buffer(96)];
    const dispatch = planBuffers({ inSplits: splits, outSplitsOffsets: offsets, expertsPerRank: 2, inputRows: 4, outputRows: 4 });
    const combine = planBuffers({ inSplitsOffsets: splits, outSplitsOffsets: offsets, expertsPerRank: 2, inputRows: 4, outputRows: 4 });
    const move = { input: buffer(64), rowBytes: 1 };
    assert.equal(refusal(() => checkPlanMove(ctx, dispatch, { ...move, output: offsets })), "rank 1: plan.move output is the plan's outSplitsOffsets: peers write rows into output (give each its own)");
    assert.equal(refusal(() => checkPlanMove(ctx, dispatch, { ...move, output: splits })), "rank 1: plan.move output is the plan's inSplits: peers write rows into output (give each its own)");
    assert.equal(refusal(() => checkPlanMove(ctx, combine, { ...move, output: splits })), "rank 1: plan.move output is the plan's inSplitsOffsets: peers write rows into output (give each its own)");
    checkPlanMove(ctx, dispatch, { ...move, output: buffer(64) });
  });

  test("a plan's maxBlocks is checked with the plan, as a call's is", () => {
    const args = { inSplits: buffer(48), outSplitsOffsets: buffer(96), expertsPerRank: 2, inputRows: 4, outputRows: 4 };
    for (const maxBlocks of [0, -1, 1.5, NaN, 'lots' as never]) {
      assert.match(refusal(() => checkPlan(ctx, 'dispatch', { ...args, maxBlocks })), /^rank 1: maxBlocks must be a positive integer, got /);
    }
    assert.equal(planBuffers({ ...args, maxBlocks: 8 }).maxBlocks, 8);
  });

  test('an allReduce count past 2^53 - 1 is refused with the bound', () => {
    const args: AllReduceArgs = { input: buffer(16), output: buffer(16), count: 2 ** 53, dtype: 'f32', op: 'sum' };
    assert.equal(refusal(() => checkAllReduce(ctx, args)), 'rank 1: allReduce count must be a non-negative integer at most 2^53-1 (Number.MAX_SAFE_INTEGER), got 9007199254740992');
    assert.equal(refusal(() => checkAllReduce(ctx, { ...args, count: -1 })), 'rank 1: allReduce count must be a non-negative integer, got -1');
  });

  test('rowBytes past 2^53 - 1, a positive integer as it reads, is refused with the bound', () => {
    const args = { input: buffer(64), output: buffer(64), inSplits: buffer(24), outSplitsOffsets: buffer(48), rowBytes: 2 ** 53 };
    assert.equal(refusal(() => checkAllToAllV(ctx, args)), 'rank 1: rowBytes must be a positive integer at most 2^53-1 (Number.MAX_SAFE_INTEGER), got 9007199254740992');
    assert.equal(refusal(() => checkAllToAllV(ctx, { ...args, rowBytes: 0 })), 'rank 1: rowBytes must be a positive integer, got 0');
  });
});

describe('misuse is a UsageError that names it, never a TypeError', () => {
  const ctx: CheckContext = { rank: 1, worldSize: 2, laneCount: 1, owns: () => true, ownsLane: () => true };
  const bare = (bytes: number): DeviceBuffer => ({ bytes, symmetric: true, symmetricId: 0, freed: false });

  test('a call without its object of arguments names the call', () => {
    assert.equal(refusal(() => checkAllToAllV(ctx, undefined as never)), 'rank 1: allToAllV takes one object of named arguments, got undefined');
    assert.equal(refusal(() => checkAllReduce(ctx, null as never)), 'rank 1: allReduce takes one object of named arguments, got null');
    assert.equal(refusal(() => checkAllReduce(ctx, [] as never)), 'rank 1: allReduce takes one object of named arguments, got an array');
    assert.equal(refusal(() => checkPlan(ctx, 'dispatch', undefined as never)), 'rank 1: planAllToAllV2d takes one object of named arguments, got undefined');
    assert.equal(refusal(() => checkPlanMove(ctx, { inputRows: 1, outputRows: 1, splits: bare(16), splitsName: 'inSplits', outSplitsOffsets: bare(32) }, 4 as never)), 'rank 1: plan.move takes one object of named arguments, got 4');
  });

  for (const backend of ['cpu', 'cuda'] as const) test(`${backend}: no arguments, capture without a function or with an async one, a closed replay, a write of a plain array`, { skip: backend === 'cuda' ? cudaUnavailableReason() : false }, async () => {
    assert.deepEqual(await outcomesOf({ backend, ranks: 1 }, 'misuse'), [
      'UsageError: rank 0: allToAllV takes one object of named arguments, got undefined',
      'UsageError: rank 0: planAllToAllV takes one object of named arguments, got undefined',
      'UsageError: rank 0: planAllToAllV2d takes one object of named arguments, got undefined',
      'UsageError: rank 0: planAllToAllV2dOffset takes one object of named arguments, got undefined',
      'UsageError: rank 0: capture takes the function that makes the calls to record, got undefined',
      "UsageError: rank 0: capture takes a plain function, not an async one: on cuda the calls it made after an await would not be in the graph",
      'UsageError: rank 0: this replay is closed',
      'UsageError: rank 0: write takes a typed array or DataView of the bytes, got an array',
    ]);
  });

  for (const backend of ['cpu', 'cuda'] as const) test(`${backend}: a route reused with a larger recvX has its combine's y checked against that recvX, not the first`, { skip: backend === 'cuda' ? cudaUnavailableReason() : false }, async () => {
    const said = await outcomesOf({ backend, ranks: 1 }, 'routeReusedWithLargerRecvX');
    assert.match(said[0], /^MoeCapacityError: /);
    assert.deepEqual(said.slice(1), [
      'no error',
      'UsageError: rank 0: MoE combine: y ([recvX rows][combineRowBytes]) holds 32 bytes, needs at least 96: 6 rows of 16 bytes (y has the layout of the route\'s recvX: its rows, at most the group\'s recvRows)',
      'no error',
    ]);
  });

  test('cpu: a capture inside a replayed closure, and a launch on something that is not a stream, are refused as on cuda', async () => {
    assert.deepEqual(await outcomesOf({ backend: 'cpu', ranks: 1 }, 'replayMisuse'), [
      'UsageError: rank 0: capture() is already in progress',
      'UsageError: rank 0: stream must be a Stream (comm.lane(i).stream), got 42',
      'UsageError: rank 0: stream must be a Stream (comm.lane(i).stream), got a Lane (pass it as lane, or its .stream)',
      'no error',
    ]);
  });

  for (const backend of ['cpu', 'cuda'] as const) test(`${backend}: a replay launched inside a capture (cpu: inside a replayed closure) is refused by name; launched outside, it runs`, { skip: backend === 'cuda' ? cudaUnavailableReason() : false }, async () => {
    assert.deepEqual(await outcomesOf({ backend, ranks: 1 }, 'launchInCapture'), [
      'UsageError: rank 0: a replay cannot be launched inside capture(): capture its calls in the one closure, or launch it before or after',
      'no error',
    ]);
  });

  for (const backend of ['cpu', 'cuda'] as const) test(`${backend}: a graph holds at most 256 calls per lane: one more is refused by name (cpu: at the launch's 257th call), and a good replay runs after`, { skip: backend === 'cuda' ? cudaUnavailableReason() : false }, async () => {
    assert.deepEqual(await outcomesOf({ backend, ranks: 1, lanes: 2 }, 'replayCallsPerLane'), [
      'no error',
      `UsageError: rank 0: a graph may hold at most 256 calls per lane (each call's outcome is kept that long); this one has ${backend === 'cuda' ? 257 : 'more'}`,
      'no error',
    ]);
  });

  test('cpu: a replay whose first call times out still returns its handle, which names the missing rank', async () => {
    const outcomes = await runRanks<{ waitMs: number }, (Caught | 'no error')[]>({ backend: 'cpu', ranks: 2, timeoutMs: 300 }, programs, 'replayTimeout', { waitMs: 1500 });
    const [launched, waited] = outcomes[0]!;
    assert.equal(launched, 'no error');
    assert.ok(waited !== 'no error' && waited.name === 'TimeoutError' && /waiting for rank 1/.test(waited.message), JSON.stringify(waited));
  });

  for (const backend of ['cpu', 'cuda'] as const) test(`${backend}: handle.waitOn and replay.launch with what is not a stream are refused by name, a stream passes`, { skip: backend === 'cuda' ? cudaUnavailableReason() : false }, async () => {
    assert.deepEqual(await outcomesOf({ backend, ranks: 1 }, 'waitOnMisuse'), [
      'UsageError: rank 0: stream must be a Stream (comm.lane(i).stream), got 42',
      'UsageError: rank 0: stream must be a Stream (comm.lane(i).stream), got a Lane (pass it as lane, or its .stream)',
      'UsageError: rank 0: waitOn needs the stream to order after the call (comm.lane(i).stream, or a stream of yours)',
      "UsageError: rank 0: stream must be a Stream (comm.lane(i).stream), got 's' (a string)",
      'no error',
      'UsageError: rank 0: stream must be a Stream (comm.lane(i).stream), got 42',
    ]);
  });

  for (const backend of ['cpu', 'cuda'] as const) test(`${backend}: comm.lane takes an integer index of its lanes only; write of a whole ArrayBuffer says to wrap it`, { skip: backend === 'cuda' ? cudaUnavailableReason() : false }, async () => {
    assert.deepEqual(await outcomesOf({ backend, ranks: 1, lanes: 2 }, 'laneAndWriteMisuse'), [
      "UsageError: rank 0: lane index must be an integer from 0 to 1, got '0' (a string)",
      'UsageError: rank 0: lane index must be an integer from 0 to 1, got 1.5',
      "UsageError: rank 0: lane index must be an integer from 0 to 1, got 'length' (a string)",
      'UsageError: rank 0: lane -1 out of range (this communicator has 2)',
      'UsageError: rank 0: lane 2 out of range (this communicator has 2)',
      'no error',
      'UsageError: rank 0: write takes a typed array or DataView of the bytes, got an ArrayBuffer (wrap it in a view: new Uint8Array(buffer))',
    ]);
  });

  test('runRanks refuses an unknown option or a bad timeout before starting a thread', async () => {
    for (const [opts, message] of [
      [{ ranks: 2, timeoutMS: 100 }, "runRanks: unknown option 'timeoutMS' (the options are backend, ranks, timeoutMs, lanes, onReport)"],
      [{ ranks: 2, timeoutMs: -1 }, 'runRanks: timeoutMs must be a positive, finite number of ms, got -1'],
      [{ ranks: 2, timeoutMs: Infinity }, 'runRanks: timeoutMs must be a positive, finite number of ms, got Infinity'],
      // Past 2^31 - 1 Node's timers fire after 1 ms: the set-up failed at once, blaming a healthy peer.
      [{ ranks: 2, timeoutMs: 2 ** 31 }, 'runRanks: timeoutMs must be at most 2147483647 ms (about 24.8 days, what a timer holds), got 2147483648'],
      [{ ranks: 2, lanes: 1.5 }, 'runRanks: lanes must be an integer in 1..64, got 1.5'],
      // Past the cap a typo is likelier than a plan (each lane is signal pads on every rank).
      [{ ranks: 2, lanes: 100_000 }, 'runRanks: lanes must be an integer in 1..64, got 100000'],
      // A report handler that is no function would lose every report without a word.
      [{ ranks: 2, onReport: 5 }, 'runRanks: onReport must be a function (rank, message) => void, got 5'],
      [{ ranks: 2, onReport: null }, 'runRanks: onReport must be a function (rank, message) => void, got null'],
    ] as const) {
      const err = await runRanks({ backend: 'cpu', ...opts } as never, programs, 'misuse', {}).catch((e: unknown) => e);
      assert.ok(err instanceof UsageError, String(err));
      assert.equal(err.message, message);
      assert.equal((err as Partial<RankFailure>).failedRank, undefined, 'refused by runRanks, not by a rank');
    }
  });

  test('init refuses its options before reaching the store: a typo is not ignored, a bad timeout is not a StoreError', async () => {
    await assert.rejects(init({ timeoutMS: 100 } as never), { name: 'UsageError', message: "init(): unknown option 'timeoutMS' (the options are backend, timeoutMs, lanes)" });
    await assert.rejects(init({ timeoutMs: -5 }), { name: 'UsageError', message: 'init(): timeoutMs must be a positive, finite number of ms, got -5' });
    // Infinity reached the store's timers, which Node sets to 1 ms past 2^31 - 1: refused here instead.
    await assert.rejects(init({ timeoutMs: Infinity }), { name: 'UsageError', message: 'init(): timeoutMs must be a positive, finite number of ms, got Infinity' });
    await assert.rejects(init({ timeoutMs: 1e14 }), { name: 'UsageError', message: 'init(): timeoutMs must be at most 2147483647 ms (about 24.8 days, what a timer holds), got 100000000000000' });
  });
});
