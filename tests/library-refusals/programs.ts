// Rank programs for tests/library-refusals.test.ts (runRanks on the cpu backend). Each catches what
// its rank throws and returns it, so the test sees every rank's error, not only the first.
import type { Comm, Handle, Replay } from '../../src/backends/backend.js';
import { ClosedError, TimeoutError, UsageError } from '../../src/errors.js';
import type { MoeGroupOptions } from '../../src/moe/api.js';
import { createMoeGroup } from '../../src/moe/group.js';

export interface Caught {
  name: string;
  message: string;
  code?: string;
  usage: boolean;
  closed: boolean;
  /** A TimeoutError's: whether it ended early because the peer left, having failed first. */
  peerFailed?: boolean;
}

async function caught(call: () => Promise<unknown>): Promise<Caught | 'no error'> {
  try {
    await call();
    return 'no error';
  } catch (err) {
    const e = err as Error & { code?: string };
    const caught: Caught = { name: e.name, message: e.message, code: e.code, usage: e instanceof UsageError, closed: e instanceof ClosedError };
    return e instanceof TimeoutError ? { ...caught, peerFailed: e.peerFailed } : caught;
  }
}

/** createMoeGroup with `byRank[rank]` (the last entry for ranks past it); undefined passes no options. */
export async function groupWith(comm: Comm, arg: { byRank: (Partial<MoeGroupOptions & { laneIndex: number }> | undefined)[] }): Promise<Caught | 'no error'> {
  const given = arg.byRank[Math.min(comm.rank, arg.byRank.length - 1)];
  // A lane cannot cross to a rank's thread: its index does, and the rank takes its own lane of it.
  const { laneIndex, ...rest } = given ?? {};
  const options = given === undefined ? undefined : laneIndex === undefined ? rest : { ...rest, lane: comm.lane(laneIndex) };
  return caught(async () => {
    const group = await (createMoeGroup as (c: Comm, o?: unknown) => ReturnType<typeof createMoeGroup>)(comm, options);
    await group.close();
  });
}

/**
 * createMoeGroup with options whose combine buffer (1 PiB) no host can hold: what it throws, and
 * how many of the buffers it made are still allocated (through a communicator that counts).
 */
export async function groupTooLarge(comm: Comm): Promise<{ outcome: Caught | 'no error'; live: number }> {
  const live = new Set<unknown>();
  const counting = new Proxy(comm, {
    get(target, key) {
      if (key === 'alloc') return (bytes: number) => tap(target.alloc(bytes));
      if (key === 'allocSymmetric') return async (bytes: number) => tap(await target.allocSymmetric(bytes));
      if (key === 'free') return (buf: unknown) => (live.delete(buf), target.free(buf as never));
      const v = Reflect.get(target, key, target) as unknown;
      return typeof v === 'function' ? v.bind(target) : v;
    },
  });
  const tap = <T>(buf: T): T => (live.add(buf), buf);
  // 128 rows sent at most, of 2^43-byte combine rows: 2^50 bytes, past Node 20's typed-array limit
  // and past the 2^47 bytes a process can map, so later Nodes fail to allocate it.
  const options: MoeGroupOptions = { numExperts: 8, topk: 8, maxTokensPerRank: 16, rowBytes: 16, combineRowBytes: 2 ** 43, layout: 'expanded' };
  const outcome = await caught(() => createMoeGroup(counting, options));
  return { outcome, live: live.size };
}

/**
 * Rank 1 leaves after a first allReduce: it closes its communicator (`closes`), or keeps it open
 * for a while (`stays`), or fails first (`fails`: a barrier of its own times out) and then closes;
 * rank 0 makes a second allReduce, which times out: what it says of rank 1.
 */
export async function peerLeaves(comm: Comm, arg: { how: 'closes' | 'stays' | 'fails' }): Promise<Caught | 'no error'> {
  const buf = comm.alloc(16);
  const reduce = () => comm.allReduce({ input: buf, output: buf, count: 4, dtype: 'f32', op: 'sum' }).wait();
  reduce();
  if (comm.rank === 1) {
    if (arg.how === 'stays') await new Promise((r) => setTimeout(r, 1500));
    if (arg.how === 'fails') await comm.barrier({ timeoutMs: 50 }).catch(() => {});
    if (arg.how !== 'stays') await comm.close();
    return 'no error';
  }
  return caught(async () => reduce());
}

/** A barrier after close(): what the caller meets. */
export async function barrierAfterClose(comm: Comm): Promise<Caught | 'no error'> {
  await comm.close();
  return caught(() => comm.barrier());
}

/** The same, thrown out of the rank: runRanks rebuilds it in the main thread. */
export async function throwsAfterClose(comm: Comm): Promise<void> {
  await comm.close();
  await comm.barrier();
}

/** Host-side misuse on the cpu backend that once surfaced as a TypeError, or not at all. */
/** Calls without their arguments, capture without a function, a closed replay, a plain array written: on any backend that captures. */
export async function misuse(comm: Comm): Promise<(Caught | 'no error')[]> {
  const lane = comm.lane(0);
  const buf = comm.alloc(16);
  const replay = comm.capture(lane.stream, () => {});
  replay.close();
  const bare = (call: unknown) => caught(async () => (call as (a?: unknown) => unknown).call(comm));
  return [
    await bare(comm.allToAllV),
    await bare(comm.planAllToAllV),
    await bare(comm.planAllToAllV2d),
    await bare(comm.planAllToAllV2dOffset),
    await caught(async () => comm.capture(lane.stream, undefined as never)),
    await caught(async () => comm.capture(lane.stream, async () => {})),
    await caught(async () => replay.launch()),
    await caught(async () => comm.write(buf, [1, 2, 3] as never)),
  ];
}

/**
 * cpu: what a capture refuses on cuda, where its closure runs at capture, refused here at launch,
 * where it runs: a capture inside the closure, a launch on something that is not a stream.
 */
export async function replayMisuse(comm: Comm): Promise<(Caught | 'no error')[]> {
  const lane = comm.lane(0);
  const nested = comm.capture(lane.stream, () => void comm.capture(lane.stream, () => {}));
  const plain = comm.capture(lane.stream, () => {});
  return [
    await caught(async () => nested.launch().wait()),
    await caught(async () => plain.launch(42 as never)),
    await caught(async () => plain.launch(lane as never)),
    await caught(async () => plain.launch(comm.lane(1).stream).wait()),
  ];
}

/**
 * A replay launched inside another's closure: on cuda inside capture() (its calls would be numbered
 * at capture), on cpu inside the replayed closure (where cuda's runs); the outer one still works.
 */
export async function launchInCapture(comm: Comm): Promise<(Caught | 'no error')[]> {
  const lane = comm.lane(0);
  const inner = comm.capture(lane.stream, () => void comm.record(lane.stream));
  let outer: Replay | undefined;
  const outcomes = [
    await caught(async () => {
      outer = comm.capture(lane.stream, () => void inner.launch());
      outer.launch().wait();
    }),
    await caught(async () => inner.launch().wait()),
  ];
  outer?.close();
  inner.close();
  return outcomes;
}

/**
 * A graph of 256 calls on one lane (and one on another) replays; one of 257 on a lane is refused by
 * name (cuda at capture, cpu at the launch's 257th call), and a good replay runs after it.
 */
export async function replayCallsPerLane(comm: Comm): Promise<(Caught | 'no error')[]> {
  const output = await comm.allocSymmetric(16);
  const [input, inSplits, outSplitsOffsets] = [comm.alloc(16), comm.alloc(8 * comm.worldSize), comm.alloc(16 * comm.worldSize)];
  comm.write(inSplits, new BigInt64Array(comm.worldSize));
  const calls = (lane: number, n: number) => {
    for (let i = 0; i < n; i++) comm.allToAllV({ input, output, inSplits, outSplitsOffsets, rowBytes: 16, lane: comm.lane(lane) });
  };
  const replayOf = (fn: () => void) => async () => {
    const replay = comm.capture(comm.lane(0).stream, fn);
    try {
      replay.launch().wait();
    } finally {
      replay.close();
    }
  };
  return [
    await caught(replayOf(() => {
      calls(0, 256);
      calls(1, 1);
    })),
    await caught(replayOf(() => calls(0, 257))),
    await caught(replayOf(() => calls(0, 2))),
  ];
}

/**
 * Rank 0 replays two calls while rank 1 never makes them: the first times out and ends the
 * communicator, and the launch still returns the replay's handle, whose wait() names rank 1.
 */
export async function replayTimeout(comm: Comm, arg: { waitMs: number }): Promise<(Caught | 'no error')[]> {
  const output = await comm.allocSymmetric(16 * comm.worldSize);
  if (comm.rank !== 0) {
    await new Promise((resolve) => setTimeout(resolve, arg.waitMs));
    return [];
  }
  const [input, inSplits, outSplitsOffsets] = [comm.alloc(16 * comm.worldSize), comm.alloc(8 * comm.worldSize), comm.alloc(16 * comm.worldSize)];
  comm.write(inSplits, new BigInt64Array(comm.worldSize).fill(1n));
  const call = () => comm.allToAllV({ input, output, inSplits, outSplitsOffsets, rowBytes: 16 });
  const replay = comm.capture(comm.lane(0).stream, () => {
    call();
    call();
  });
  let handle: Handle | undefined;
  const launched = await caught(async () => {
    handle = replay.launch();
  });
  return [launched, handle === undefined ? 'no error' : await caught(async () => handle!.wait())];
}

/** handle.waitOn with what is not a stream: a call's handle, record()'s, a replay's; then a good one. */
export async function waitOnMisuse(comm: Comm): Promise<(Caught | 'no error')[]> {
  const lane = comm.lane(0);
  const recorded = comm.record(lane.stream);
  const replay = comm.capture(lane.stream, () => void comm.record(lane.stream));
  const launched = replay.launch();
  const outcomes = [
    await caught(async () => recorded.waitOn(42 as never)),
    await caught(async () => recorded.waitOn(lane as never)),
    await caught(async () => recorded.waitOn(undefined as never)),
    await caught(async () => launched.waitOn('s' as never)),
    await caught(async () => recorded.waitOn(comm.lane(1).stream)),
    await caught(async () => replay.launch(42 as never)),
  ];
  launched.wait();
  replay.close();
  return outcomes;
}

/** comm.lane with what is not a lane's index, and write with a whole ArrayBuffer. */
export async function laneAndWriteMisuse(comm: Comm): Promise<(Caught | 'no error')[]> {
  const buf = comm.alloc(16);
  return [
    await caught(async () => comm.lane('0' as never)),
    await caught(async () => comm.lane(1.5)),
    await caught(async () => comm.lane('length' as never)),
    await caught(async () => comm.lane(-1)),
    await caught(async () => comm.lane(comm.laneCount)),
    await caught(async () => void comm.lane(comm.laneCount - 1)),
    await caught(async () => comm.write(buf, new ArrayBuffer(4) as never)),
  ];
}

/** gatherOnHost with values JSON has no form for, then with values that are not numbers: what came back, and each refusal. */
export async function gatherValues(comm: Comm): Promise<{ back: string[][]; refused: (Caught | 'no error')[] }> {
  const all = await comm.gatherOnHost([comm.rank === 1 ? NaN : comm.rank, -0, Infinity, -Infinity, 2 ** 53 - 1]);
  const back = all.map((values) => values.map((v) => (Object.is(v, -0) ? '-0' : String(v))));
  const refused: (Caught | 'no error')[] = [];
  for (const bad of [[1n], ['1'], 7, [{}]]) refused.push(await caught(() => comm.gatherOnHost(bad as never)));
  return { back, refused };
}

/**
 * Rank 1 closes its communicator (`closes`), or first fails a call of its own (`fails`: an
 * allReduce that times out, rank 0 being elsewhere), while rank 0 waits for it in a host wait
 * (`barrier`, `gatherOnHost`, `allocSymmetric`): what rank 0 gets.
 */
export async function peerLeavesHostWait(comm: Comm, arg: { how: 'closes' | 'fails'; wait: 'barrier' | 'gatherOnHost' | 'allocSymmetric' }): Promise<Caught | 'no error'> {
  const buf = comm.alloc(16);
  await comm.barrier();
  if (comm.rank === 1) {
    if (arg.how === 'fails') await caught(async () => comm.allReduce({ input: buf, output: buf, count: 4, dtype: 'f32', op: 'sum' }).wait());
    await comm.close();
    return 'no error';
  }
  const wait = arg.wait === 'barrier' ? () => comm.barrier() : arg.wait === 'gatherOnHost' ? () => comm.gatherOnHost([1]) : () => comm.allocSymmetric(64);
  return caught(wait);
}

/**
 * A route refused for recvX's capacity, reused with a recvX that holds every row: the combine's y
 * is checked against that recvX, the latest dispatch's, so a y sized for the first is refused on
 * the host naming y; one sized for the second goes through. Every token to expert 0, one rank.
 */
export async function routeReusedWithLargerRecvX(comm: Comm): Promise<(Caught | 'no error')[]> {
  const [T, K, H] = [4, 1, 4];
  const group = await createMoeGroup(comm, { numExperts: 2, topk: K, maxTokensPerRank: T, rowBytes: 4 * H, layout: 'expanded' });
  const x = comm.alloc(4 * H * T);
  const ids = comm.alloc(8 * T * K);
  comm.write(ids, new BigInt64Array(T * K));
  const counts = comm.alloc(16);
  const small = await comm.allocSymmetric(2 * 4 * H);
  const large = await comm.allocSymmetric(group.recvRows * 4 * H);
  const out = comm.alloc(4 * H * T);
  const first = group.dispatch({ x, topkIdx: ids, recvX: small, expertCounts: counts });
  const outcomes = [await caught(async () => first.done.wait())];
  outcomes.push(await caught(async () => group.dispatch({ x, topkIdx: ids, recvX: large, expertCounts: counts, route: first.route }).done.wait()));
  for (const y of [comm.alloc(2 * 4 * H), comm.alloc(group.recvRows * 4 * H)]) {
    outcomes.push(await caught(async () => group.combine({ y, route: first.route, out, dtype: 'f32' }).wait()));
  }
  await group.close();
  return outcomes;
}
