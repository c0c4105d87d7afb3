// Rank programs of the conformance suite (run on every rank by runRanks; exported by name). Each
// checks its own rank's results against the host reference and throws ConformanceError on a
// difference; tests/conformance.test.ts runs them on every backend.
import type { Comm } from '../../src/backends/backend.js';
import { expectSplitsError } from './expect.js';
import { Exchange, maxRowsFor, sizesFor } from './harness.js';
import { makeSplits, PATTERNS, ROW_SIZES, Rng } from './reference.js';

export { allReduce, allReduceBeside, allReduceLanes, allReduceMismatch, allReduceReplay, allReduceTimeout } from './all-reduce-cases.js';
export { closedCalls, setUpTimeout, splitsErrors, symmetricSizes, timeout, usage } from './error-cases.js';
export { copyOffsets } from './copy-cases.js';
export { lanes, lanesCrossed, lanesLarge } from './lane-cases.js';
export { ownOutcomes } from './outcome-cases.js';
export { callerStream } from './stream-cases.js';
export { captureRefused } from './nccl-cases.js';
export { moeExchange, moeLanes, moeReplay } from './moe-cases.js';
export { moeErrors, moeMismatch } from './moe-error-cases.js';
export { moePlanReplay, moePlans, planRefusals } from './moe-plan-cases.js';
export { moeUsage } from './moe-usage-cases.js';
export { moeTokenReplay, moeTokens } from './moe-token-cases.js';
export { moeTokenErrors, moeTokenReplayErrors, moeTokenTimeout } from './moe-token-error-cases.js';

export interface ExchangeArg {
  seed: number;
  calls: number;
  /** Bytes per (sender, receiver) pair at most; rows per pair = budget / rowBytes (at least 1). */
  budget: number;
}

/** Many consecutive calls on one set of buffers: splits, split pattern and row size change every call. */
export async function exchange(comm: Comm, arg: ExchangeArg): Promise<number> {
  const W = comm.worldSize;
  const ex = await Exchange.create(comm, sizesFor(W, arg.budget));
  const start = new Rng(arg.seed, 0xe1).int(ROW_SIZES.length);
  for (let call = 0; call < arg.calls; call++) {
    const rowBytes = ROW_SIZES[(start + call) % ROW_SIZES.length];
    const pattern = PATTERNS[call % PATTERNS.length];
    const S = makeSplits(new Rng(arg.seed, call), W, pattern, maxRowsFor(arg.budget, rowBytes));
    ex.prepare(arg.seed, call, S, rowBytes);
    ex.call(rowBytes).wait();
    ex.verify(arg.seed, call, S, rowBytes, `call ${call} (${pattern} splits, rowBytes ${rowBytes}, W ${W})`);
  }
  return arg.calls;
}

export interface ReplayArg {
  seed: number;
  launches: number;
  budget: number;
}

/**
 * Graph replay: one call captured on a lane's stream, launched again and again after new splits
 * and rows are written into the same buffers (the kernel must read them when it runs). Each
 * launch's handle is the host's sync point; every third launch has a negative split, which its
 * handle must report (and nothing written). A direct zero-row call on the same lane after each
 * launch checks that replays and direct calls stay in step on the lane.
 */
export async function replay(comm: Comm, arg: ReplayArg): Promise<number> {
  const W = comm.worldSize;
  const lane = comm.lane(comm.laneCount - 1);
  const rng = new Rng(arg.seed, 0xe2);
  const rowBytes = rng.pick(ROW_SIZES.filter((n) => n <= arg.budget));
  const ex = await Exchange.create(comm, sizesFor(W, arg.budget));
  const fence = await Exchange.create(comm, { inputBytes: 8, outputBytes: 8 });
  fence.writeSplits(new Array<number>(W).fill(0));
  const graph = comm.capture(lane.stream, () => {
    ex.call(rowBytes, lane);
  });
  try {
    // Every rank captures before any launches (README: instantiating can wait for the kernels on the GPU).
    await comm.barrier();
    for (let i = 0; i < arg.launches; i++) {
      const call = 1000 + i;
      const pattern = PATTERNS[i % PATTERNS.length];
      const S = makeSplits(new Rng(arg.seed, call), W, pattern, maxRowsFor(arg.budget, rowBytes));
      const label = `replay ${i} (${pattern} splits, rowBytes ${rowBytes}, W ${W})`;
      if (i % 3 === 2) {
        const [q, r] = [rng.int(W), rng.int(W)];
        S[q][r] = -5;
        ex.prepare(arg.seed, call, S, rowBytes);
        expectSplitsError(graph.launch(lane.stream), { problem: 'negative', rank: q, peer: r, needed: -5, available: 0 }, comm.rank, `refused ${label}`);
        ex.verifyUntouched(`refused ${label}`);
      } else {
        ex.prepare(arg.seed, call, S, rowBytes);
        graph.launch(lane.stream).wait();
        ex.verify(arg.seed, call, S, rowBytes, label);
      }
      fence.call(1, lane).wait();
    }
  } finally {
    graph.close();
  }
  return arg.launches;
}
