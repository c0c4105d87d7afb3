// Rank programs for the failure semantics: bad splits are refused with a named error and nothing
// written, a missing peer ends in a timeout naming it, host-side misuse throws at once.
import type { AllToAllVArgs, Comm, DeviceBuffer } from '../../src/backends/backend.js';
import { ClosedError, CommAbortedError, TimeoutError, UsageError } from '../../src/errors.js';
import { startWaitMs } from '../../src/world/set-up-waits.js';
import { type ExpectedSplitsError, expectSplitsError, expectTimeout, expectUsageError, stayAbsent } from './expect.js';
import { createMoeGroup } from '../../src/moe/group.js';
import { Exchange } from './harness.js';
import { colSum, makeSplits, rowSum, Rng } from './reference.js';

/** Output capacity in rows, input capacity in rows, of the error cases (odd byte sizes on purpose). */
const OUT_ROWS = 10;
const IN_ROWS = 24;

const sizes = (rowBytes: number): { inputBytes: number; outputBytes: number } => ({
  inputBytes: IN_ROWS * rowBytes + rowBytes - 1,
  outputBytes: OUT_ROWS * rowBytes + rowBytes - 1,
});

/** Valid splits whose row and column sums stay far below both capacities (W <= 4: at most 2 per entry). */
const smallSplits = (rng: Rng, world: number): number[][] => makeSplits(rng, world, 'random', 2);

/** Index at which the running sum of `xs` first exceeds `cap` (the peer a refusal names). */
const firstPast = (xs: number[], cap: number): number => {
  let sum = 0;
  return xs.findIndex((x) => (sum += x) > cap);
};

export interface ErrorsArg {
  seed: number;
}

/** Every splits problem, each followed by a good call (the lane must still be in step). */
export async function splitsErrors(comm: Comm, arg: ErrorsArg): Promise<number> {
  const W = comm.worldSize;
  const me = comm.rank;
  const rng = new Rng(arg.seed, 0xe3);
  const rowBytes = rng.pick([1, 7, 13, 255]);
  const ex = await Exchange.create(comm, sizes(rowBytes));
  const other = await Exchange.create(comm, sizes(rowBytes + 1));
  // Room to receive everything, so only the input's capacity is at its limit.
  const full = await Exchange.create(comm, { inputBytes: IN_ROWS * rowBytes + rowBytes - 1, outputBytes: W * IN_ROWS * rowBytes + rowBytes - 1 });
  let call = 2000;
  const q = rng.int(W);
  const r0 = rng.int(W);

  const goodOn = (target: Exchange, S: number[][], label: string): void => {
    target.prepare(arg.seed, ++call, S, rowBytes);
    target.call(rowBytes).wait();
    target.verify(arg.seed, call, S, rowBytes, label);
  };
  const good = (label: string): void => goodOn(ex, smallSplits(new Rng(arg.seed, call + 1), W), label);
  const refused = (S: number[][], want: ExpectedSplitsError, label: string): void => {
    ex.prepare(arg.seed, ++call, S, rowBytes);
    other.poison(call);
    expectSplitsError(ex.call(rowBytes), want, me, label);
    ex.verifyUntouched(label);
    good(`good call after ${label}`);
  };

  let S = smallSplits(new Rng(arg.seed, 1), W);
  S[q][r0] = -1 - rng.int(5);
  refused(S, { problem: 'negative', rank: q, peer: r0, needed: S[q][r0], available: 0 }, `negative split on rank ${q}`);

  // One row more than the input holds. Column r0 overflows too: the input check comes first.
  S = smallSplits(new Rng(arg.seed, 2), W);
  S[q][r0] += IN_ROWS + 1 - rowSum(S, q);
  const inPeer = firstPast(S[q], IN_ROWS);
  refused(S, { problem: 'input-overflow', rank: q, peer: inPeer, needed: IN_ROWS + 1, available: IN_ROWS }, `splits one row past the input on rank ${q}`);

  // One row more than rank r0's output holds.
  S = smallSplits(new Rng(arg.seed, 3), W);
  S[q][r0] += OUT_ROWS + 1 - colSum(S, r0);
  const outPeer = firstPast(S.map((row) => row[r0]), OUT_ROWS);
  refused(S, { problem: 'output-overflow', rank: r0, peer: outPeer, needed: OUT_ROWS + 1, available: OUT_ROWS }, `receive one row past the output on rank ${r0}`);

  // Exactly full is not an error.
  S = smallSplits(new Rng(arg.seed, 6), W);
  S[q][r0] += OUT_ROWS - colSum(S, r0);
  goodOn(ex, S, `rank ${r0} output exactly full`);
  S = smallSplits(new Rng(arg.seed, 7), W);
  S[q][r0] += IN_ROWS - rowSum(S, q);
  goodOn(full, S, `rank ${q} input exactly used up`);

  // Two refused calls queued before either is waited: each handle throws its own call's error.
  S = smallSplits(new Rng(arg.seed, 4), W);
  S[q][r0] = -7;
  ex.prepare(arg.seed, ++call, S, rowBytes);
  const first = ex.call(rowBytes);
  const S2 = smallSplits(new Rng(arg.seed, 5), W);
  S2[q][r0] += IN_ROWS + 1 - rowSum(S2, q);
  ex.writeSplits(S2[me]);
  const second = ex.call(rowBytes);
  expectSplitsError(second, { problem: 'input-overflow', rank: q, peer: firstPast(S2[q], IN_ROWS), needed: IN_ROWS + 1, available: IN_ROWS }, me, 'second of two refused calls, waited first');
  expectSplitsError(first, { problem: 'negative', rank: q, peer: r0, needed: -7, available: 0 }, me, 'first of two refused calls');
  ex.verifyUntouched('two refused calls');
  good('good call after two refused calls');

  if (W >= 2) {
    // Rank q disagrees with the others on the row size, then on the output buffer. Checked in
    // rank order against rank 0, so when q is 0 it is rank 1 that "differs".
    const [p, mine, theirs] = q === 0 ? [1, rowBytes, rowBytes + 1] : [q, rowBytes + 1, rowBytes];
    const mismatched = (label: string, rbOf: (rank: number) => number, exOf: (rank: number) => Exchange, want: ExpectedSplitsError): void => {
      const S = smallSplits(new Rng(arg.seed, ++call), W);
      ex.poison(call);
      other.poison(call);
      exOf(me).writeSplits(S[me]);
      expectSplitsError(exOf(me).call(rbOf(me)), want, me, label);
      ex.verifyUntouched(label);
      other.verifyUntouched(label);
      good(`good call after ${label}`);
    };
    // The message names both ranks compared and blames neither: rank 0 may be the odd one out.
    const pair = new RegExp(`^rank 0 and rank ${p} disagree: `);
    mismatched(`rank ${q} with another rowBytes`, (r) => (r === q ? rowBytes + 1 : rowBytes), () => ex, {
      problem: 'mismatch', rank: p, peer: 0, needed: mine, available: theirs, field: 'rowBytes', message: pair,
    });
    // Rank 0 alone differs: the rule still names rank 1 (the first that differs from rank 0's).
    mismatched('rank 0 alone with another rowBytes', (r) => (r === 0 ? rowBytes + 1 : rowBytes), () => ex, {
      problem: 'mismatch', rank: 1, peer: 0, needed: rowBytes, available: rowBytes + 1, field: 'rowBytes',
      message: new RegExp(`^rank 0 and rank 1 disagree: rowBytes ${rowBytes + 1} on rank 0, ${rowBytes} on rank 1 \\(rank 1 is the first rank whose call differs from rank 0's; either may be the odd one out\\) \\(reported by rank \\d+, in its allToAllV\\)$`),
    });
    const [idQ, idRest] = [other.output.symmetricId, ex.output.symmetricId];
    mismatched(`rank ${q} with another output buffer`, () => rowBytes, (r) => (r === q ? other : ex), {
      problem: 'mismatch', rank: p, peer: 0, needed: q === 0 ? idRest : idQ, available: q === 0 ? idQ : idRest, field: 'output',
    });
  }
  return call - 2000;
}

export interface TimeoutArg {
  seed: number;
  absent: number;
  timeoutMs: number;
}

/** Rank `absent` never calls: every other rank's call must end in a TimeoutError naming it. */
export async function timeout(comm: Comm, arg: TimeoutArg): Promise<number> {
  const W = comm.worldSize;
  const rowBytes = 17;
  const ex = await Exchange.create(comm, sizes(rowBytes));
  if (comm.rank === arg.absent) return stayAbsent(arg.timeoutMs);
  const S = makeSplits(new Rng(arg.seed, 3000), W, 'random', 2);
  ex.prepare(arg.seed, 3000, S, rowBytes);
  const started = performance.now();
  // NCCL does not say which rank it waits for: there the error names none (missingRank -1).
  const missing = comm.backend === 'nccl' ? -1 : arg.absent;
  const err = expectTimeout(ex.call(rowBytes), missing, comm.rank, `rank ${arg.absent} absent`);
  const waited = performance.now() - started;
  if (waited < arg.timeoutMs / 2) throw new Error(`gave up after ${waited.toFixed(0)} ms, timeout is ${arg.timeoutMs} ms (${err.message})`);
  // cpu says where the peer stopped from the words it waits on (the GPU kernels' words differ).
  if (comm.backend === 'cpu' && !/\(allToAllV on lane 0: call \d+ on the lane, waiting for the peer's splits; the peer has started no call on this lane/.test(err.message)) {
    throw new Error(`rank ${arg.absent} absent: the timeout does not say the peer never started a call: ${err.message}`);
  }
  ex.verifyUntouched(`rank ${arg.absent} absent`);
  return Math.round(waited);
}

export interface SetUpTimeoutArg extends TimeoutArg {
  /** The set-up call the absent rank misses ('bounded barrier': barrier({ timeoutMs }) under a communicator timeout four times as long). */
  first: 'barrier' | 'allocSymmetric' | 'bounded barrier';
}

/**
 * Rank `absent` misses a set-up call (barrier or allocSymmetric): every other rank's ends in a
 * TimeoutError naming it, and the communicator is ended: a retry, another set-up call and a
 * collective all throw CommAbortedError carrying that timeout (a retry that waited again would pair
 * with the late rank's first attempt, and every later set-up call would be off by one).
 */
export async function setUpTimeout(comm: Comm, arg: SetUpTimeoutArg): Promise<number> {
  const W = comm.worldSize;
  const ex = await Exchange.create(comm, sizes(4));
  // barrier()'s options are checked before it meets anyone (no rank is left waiting in it).
  for (const bad of [{ timeoutMs: 0 }, { timeoutMs: NaN }, { timeoutMs: '5' }, { timeout: 5 }, 5]) {
    const e = await comm.barrier(bad as never).then(() => undefined, (x: unknown) => x);
    if (!(e instanceof UsageError)) throw new Error(`barrier(${JSON.stringify(bad)}) gave ${String(e)}, not UsageError`);
  }
  await comm.barrier();
  // On cpu these store waits also span a peer's start or host work: they get the start floor.
  const bound = comm.backend === 'cpu' && arg.first !== 'bounded barrier' ? startWaitMs(arg.timeoutMs) : arg.timeoutMs;
  if (comm.rank === arg.absent) {
    // Open, away past its peers' timeout and their checks after it: its close() meets them (cuda,
    // nccl), a close made at once would be the barrier they wait in, and on cpu a peer that has
    // closed is found gone at once, which is not what this case is about.
    await new Promise((resolve) => setTimeout(resolve, bound + 4 * arg.timeoutMs));
    return 0;
  }
  const label = `rank ${arg.absent} absent from ${arg.first}()`;
  const started = performance.now();
  const first = arg.first === 'barrier' ? comm.barrier() : arg.first === 'bounded barrier' ? comm.barrier({ timeoutMs: arg.timeoutMs }) : comm.allocSymmetric(64);
  const err = await first.then(
    () => undefined,
    (e: unknown) => e,
  );
  const waited = performance.now() - started;
  if (!(err instanceof TimeoutError)) throw new Error(`${label}: expected TimeoutError, got ${String(err)}`);
  if (err.missingRank !== arg.absent || err.rank !== comm.rank) {
    throw new Error(`${label}: TimeoutError names rank ${err.rank} waiting for ${err.missingRank}, expected ${comm.rank} waiting for ${arg.absent}`);
  }
  if (waited < bound / 2) throw new Error(`${label}: gave up after ${waited.toFixed(0)} ms, timeout is ${bound} ms`);
  if (arg.first === 'bounded barrier' && waited > 2 * arg.timeoutMs) throw new Error(`${label}: gave up after ${waited.toFixed(0)} ms: the communicator's timeout, not the barrier's ${arg.timeoutMs} ms`);
  const aborted = (what: string, e: unknown): void => {
    if (!(e instanceof CommAbortedError) || e.cause !== err) throw new Error(`${label}: ${what} afterwards gave ${String(e)}, not CommAbortedError caused by the timeout`);
  };
  for (const [what, again] of [
    ['barrier()', () => comm.barrier()],
    ['allocSymmetric()', () => comm.allocSymmetric(64)],
  ] as const) {
    aborted(what, await again().then(() => undefined, (e: unknown) => e));
  }
  const S = makeSplits(new Rng(arg.seed, 5000), W, 'random', 2);
  ex.prepare(arg.seed, 5000, S, 4);
  let call: unknown;
  try {
    ex.call(4).wait();
  } catch (e) {
    call = e;
  }
  aborted('allToAllV', call);
  ex.verifyUntouched(label);
  return Math.round(waited);
}

/** Host-side misuse throws UsageError before anything runs; a good call afterwards still works. */
export async function usage(comm: Comm, arg: ErrorsArg): Promise<number> {
  const W = comm.worldSize;
  const rowBytes = 4;
  const ex = await Exchange.create(comm, sizes(rowBytes));
  const local = comm.alloc(ex.output.bytes);
  const freed = comm.alloc(ex.input.bytes);
  comm.free(freed);
  const freedOutput = await comm.allocSymmetric(ex.output.bytes);
  comm.free(freedOutput);
  const foreign: DeviceBuffer = { bytes: ex.output.bytes, symmetric: true, symmetricId: ex.output.symmetricId, freed: false };
  const stream = comm.lane(0).stream;
  const base: AllToAllVArgs = { input: ex.input, output: ex.output, inSplits: ex.inSplits, outSplitsOffsets: ex.outSplitsOffsets, rowBytes };
  const misuse: [string, Partial<AllToAllVArgs>][] = [
    ['rowBytes 0', { rowBytes: 0 }],
    ['rowBytes -4', { rowBytes: -4 }],
    ['rowBytes 1.5', { rowBytes: 1.5 }],
    ['rowBytes NaN', { rowBytes: NaN }],
    ['inSplits smaller than int64[W]', { inSplits: comm.alloc(8 * W - 1) }],
    ['outSplitsOffsets smaller than int64[2][W]', { outSplitsOffsets: comm.alloc(16 * W - 1) }],
    ['output not symmetric', { output: local }],
    ['freed input', { input: freed }],
    ['freed output', { output: freedOutput }],
    ['input of another communicator', { input: foreign }],
    ['output of another communicator', { output: foreign }],
    ['lane past the last', { lane: { index: comm.laneCount, stream } }],
    ['negative lane', { lane: { index: -1, stream } }],
    ['lane given as its number', { lane: 1 as never }],
    ['a lane given as the stream', { stream: comm.lane(comm.laneCount - 1) as never }],
    ["stream 'bogus'", { stream: 'bogus' as never }],
    // A stream object made up: cpu's streams order nothing, so it would pass there and fail on a GPU.
    ['a made-up stream object', { stream: { kind: 'stream' } as never }],
    ['sizeHintBytes NaN', { sizeHintBytes: NaN }],
    ['sizeHintBytes -1', { sizeHintBytes: -1 }],
    ["sizeHintBytes '4096'", { sizeHintBytes: '4096' as never }],
    ['sizehintbytes (misspelt)', { sizehintbytes: 4096 } as never],
    ['inSplits = outSplitsOffsets', { inSplits: ex.outSplitsOffsets }],
    ['input = outSplitsOffsets', { input: ex.outSplitsOffsets }],
    ['plan of -1 blocks', { plan: { blocks: -1, threads: 256 } }],
    ['plan of 7 threads', { plan: { blocks: 1, threads: 7 } }],
  ];
  ex.poison(1);
  for (const [label, change] of misuse) {
    expectUsageError(() => comm.allToAllV({ ...base, ...change }), label, /^rank \d+: /);
  }
  expectUsageError(() => comm.lane(comm.laneCount), 'comm.lane(laneCount)');
  // Named by rank on every backend: ranks as processes print to one terminal.
  const named = new RegExp(`^rank ${comm.rank}: `);
  expectUsageError(() => comm.alloc(-1), 'alloc(-1)', named);
  expectUsageError(() => comm.read(local, local.bytes, 1), 'read past the end', named);
  expectUsageError(() => comm.write(local, new Uint8Array(2), local.bytes - 1), 'write past the end', named);
  ex.verifyUntouched('misuse');
  // The misuse allocated and freed: no rank may spin in the good call until every rank is past that.
  await comm.barrier();
  const S = makeSplits(new Rng(arg.seed, 4000), W, 'random', 2);
  ex.prepare(arg.seed, 4000, S, rowBytes);
  ex.call(rowBytes).wait();
  ex.verify(arg.seed, 4000, S, rowBytes, 'good call after misuse');
  return misuse.length + 1;
}

/**
 * After close(), every call throws ClosedError on every backend (its streams, modules and memory
 * are gone: on a GPU a call would otherwise reach freed driver objects), and close() again is a no-op.
 */
export async function closedCalls(comm: Comm): Promise<number> {
  const W = comm.worldSize;
  const buf = comm.alloc(64);
  const splits = comm.alloc(8 * W);
  const so = comm.alloc(16 * W);
  // A group's calls on a closed communicator are its ClosedError too, not a word on the buffers close() freed.
  const group = await createMoeGroup(comm, { numExperts: 2 * W, topk: 2, maxTokensPerRank: 4, rowBytes: 16, layout: 'expanded' });
  const x = comm.alloc(64);
  const idx = comm.alloc(64);
  const counts = comm.alloc(16 * W);
  const recvX = await comm.allocSymmetric(group.recvRows * 16);
  const { route } = group.dispatch({ x, topkIdx: idx, numTokens: 0, recvX, expertCounts: counts });
  await comm.close();
  const calls: [string, () => unknown][] = [
    ['MoE dispatch', () => group.dispatch({ x, topkIdx: idx, numTokens: 0, recvX, expertCounts: counts })],
    ['MoE combine', () => group.combine({ y: recvX, route, out: x, dtype: 'f32' })],
    ['alloc', () => comm.alloc(64)],
    ['write', () => comm.write(buf, new Uint8Array(8))],
    ['read', () => comm.read(buf, 0, 8)],
    ['lane', () => comm.lane(0)],
    ['allToAllV', () => comm.allToAllV({ input: buf, output: buf, inSplits: splits, outSplitsOffsets: so, rowBytes: 1 })],
    ['allReduce', () => comm.allReduce({ input: buf, output: buf, count: 4, dtype: 'f32', op: 'sum' })],
  ];
  let checked = 0;
  // Each call's error is its own (its stack leads to that call, not to close()).
  const seen = new Set<unknown>();
  for (const [what, call] of calls) {
    let caught: unknown;
    try {
      call();
    } catch (err) {
      caught = err;
    }
    if (!(caught instanceof ClosedError)) throw new Error(`rank ${comm.rank}: ${what} after close() gave ${caught === undefined ? 'no error' : String(caught)}, not ClosedError`);
    if (seen.has(caught)) throw new Error(`rank ${comm.rank}: ${what} after close() threw the same error object as an earlier call`);
    seen.add(caught);
    checked++;
  }
  const barrier = await comm.barrier().then(() => undefined, (err: unknown) => err);
  if (!(barrier instanceof ClosedError)) throw new Error(`rank ${comm.rank}: barrier after close() gave ${String(barrier)}, not ClosedError`);
  await comm.close();
  return checked + 1;
}

/**
 * Ranks that ask allocSymmetric for different sizes (rank 1 for more, the last for less) are all
 * refused with the same account of every rank's size, grouped; nothing is lost: the communicator
 * then allocates and exchanges as before, with symmetric ids still in step.
 */
export async function symmetricSizes(comm: Comm, arg: ErrorsArg): Promise<number> {
  const W = comm.worldSize;
  const me = comm.rank;
  const ex = await Exchange.create(comm, sizes(4));
  const want = (r: number): number => (r === 1 ? 96 : r === W - 1 ? 32 : 64);
  const err = await comm.allocSymmetric(want(me)).then(
    (buf) => buf,
    (e: unknown) => e,
  );
  if (!(err instanceof UsageError)) throw new Error(`allocSymmetric of sizes ${[...Array(W).keys()].map(want).join(', ')}: expected UsageError, got ${String(err)}`);
  const groups = new Map<number, number[]>();
  for (let r = 0; r < W; r++) groups.set(want(r), [...(groups.get(want(r)) ?? []), r]);
  for (const [bytes, ranks] of groups) {
    const named = ranks.length === 1 ? `rank ${ranks[0]}` : ranks.length === 2 ? `ranks ${ranks[0]}, ${ranks[1]}` : `ranks ${ranks[0]}-${ranks.at(-1)}`;
    if (!err.message.includes(`${bytes} bytes on ${named}`)) throw new Error(`rank ${me}: the refusal does not say "${bytes} bytes on ${named}": ${err.message}`);
  }
  if (!err.message.startsWith(`rank ${me}: `)) throw new Error(`the refusal does not start with this rank: ${err.message}`);
  const again = await comm.allocSymmetric(64);
  if (again.bytes !== 64 || again.symmetricId !== ex.output.symmetricId + 2) throw new Error(`rank ${me}: the next allocSymmetric gave ${again.bytes} bytes, id ${again.symmetricId}`);
  const S = makeSplits(new Rng(arg.seed, 77), W, 'random', 2);
  ex.prepare(arg.seed, 77, S, 4);
  ex.call(4).wait();
  ex.verify(arg.seed, 77, S, 4, 'after the refused allocSymmetric');
  return 0;
}
