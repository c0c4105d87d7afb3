// Rank programs of the conformance suite for the MoE calls: dispatch then combine on fresh random
// splits (the round trip must give the input back exactly), graph replay with new splits, and two
// lanes, one dispatching while the other combines. Plans: moe-plan-cases.ts; errors:
// moe-error-cases.ts.
import type { Comm } from '../../src/backends/backend.js';
import { expectSplitsError } from './expect.js';
import { Exchange } from './harness.js';
import { Moe, type MoeSizes } from './moe-harness.js';
import { makeMoeSplits, moeInputKey, MOE_PATTERNS } from './moe-reference.js';
import { Rng } from './reference.js';

/** Row sizes of the MoE cases: 1 B to 14 KiB, odd ones too. */
export const MOE_ROW_SIZES = [1, 3, 7, 16, 17, 48, 255, 1000, 4099, 14337] as const;

export interface MoeExchangeArg {
  seed: number;
  calls: number;
  /** E and majorAlign of the calls, in turn. */
  experts: number[];
  aligns: number[];
  /** Rows per (sender, receiver, expert) at most: 9 gives PyTorch's splits in [0, 10). */
  maxRows: number;
  /** Bytes per (sender, receiver, expert) at most: large rows get fewer (at least one). */
  budget: number;
  rowSizes?: number[];
}

const rowsFor = (a: { maxRows: number; budget: number }, rowBytes: number): number => Math.max(1, Math.min(a.maxRows, Math.floor(a.budget / rowBytes)));

/** Buffers that fit every call of `a`: W·E chunks of the largest, and each expert's padding. */
export function moeSizes(world: number, a: { experts: number[]; aligns: number[]; maxRows: number; budget: number; rowSizes: readonly number[] }): MoeSizes {
  const E = Math.max(...a.experts);
  const chunk = Math.max(...a.rowSizes.map((rb) => rowsFor(a, rb) * rb));
  const inputBytes = world * E * chunk;
  return { experts: E, inputBytes, outputBytes: inputBytes + E * Math.max(...a.aligns) * Math.max(...a.rowSizes) };
}

/** Dispatch then combine, call after call: E, majorAlign, split pattern and row size change every call. */
export async function moeExchange(comm: Comm, arg: MoeExchangeArg): Promise<number> {
  const W = comm.worldSize;
  const rowSizes = arg.rowSizes ?? MOE_ROW_SIZES;
  const moe = await Moe.create(comm, moeSizes(W, { ...arg, rowSizes }));
  const start = new Rng(arg.seed, 0xd1).int(rowSizes.length);
  for (let call = 0; call < arg.calls; call++) {
    const E = arg.experts[call % arg.experts.length];
    const align = arg.aligns[Math.floor(call / arg.experts.length) % arg.aligns.length];
    const rowBytes = rowSizes[(start + call) % rowSizes.length];
    const pattern = MOE_PATTERNS[call % MOE_PATTERNS.length];
    const C = makeMoeSplits(new Rng(arg.seed, call, 0xd2), W, E, pattern, rowsFor(arg, rowBytes));
    const key = (q: number): number => moeInputKey(arg.seed, call, q);
    const label = `call ${call} (W ${W}, E ${E}, majorAlign ${align}, ${pattern} splits, rowBytes ${rowBytes})`;
    // Every third call on an SM budget of 1 to 3 blocks (cuda: the data grid loops over its tiles).
    const maxBlocks = call % 3 === 2 ? 1 + ((call >> 2) % 3) : undefined;
    moe.prepare(key, C, rowBytes, call);
    moe.dispatch({ experts: E, rowBytes, align, maxBlocks }).wait();
    moe.verifyDispatch(key, C, align, rowBytes, `dispatch ${label}${maxBlocks ? `, maxBlocks ${maxBlocks}` : ''}`);
    moe.combine({ experts: E, rowBytes, maxBlocks }).wait();
    moe.verifyCombine(key, C, rowBytes, `combine ${label}${maxBlocks ? `, maxBlocks ${maxBlocks}` : ''}`);
  }
  return arg.calls;
}

export interface MoeReplayArg {
  seed: number;
  launches: number;
  experts: number;
  align: number;
  maxRows: number;
}

/**
 * Graph replay: a dispatch and the combine of its output captured on a lane's stream, launched
 * again and again after new splits and rows are written into the same buffers. Every third launch
 * has a negative split: its handle reports the dispatch's error (the first refused call) and
 * nothing is written. A direct 1-D call on the lane after each launch keeps them in step.
 */
export async function moeReplay(comm: Comm, arg: MoeReplayArg): Promise<number> {
  const W = comm.worldSize;
  const E = arg.experts;
  const lane = comm.lane(comm.laneCount - 1);
  const rng = new Rng(arg.seed, 0xd3);
  const rowBytes = rng.pick([3, 48, 1000]);
  const moe = await Moe.create(comm, moeSizes(W, { experts: [E], aligns: [arg.align], maxRows: arg.maxRows, budget: 1 << 30, rowSizes: [rowBytes] }));
  const fence = await Exchange.create(comm, { inputBytes: 8, outputBytes: 8 });
  fence.writeSplits(new Array<number>(W).fill(0));
  const graph = comm.capture(lane.stream, () => {
    moe.dispatch({ experts: E, rowBytes, align: arg.align, lane });
    moe.combine({ experts: E, rowBytes, lane });
  });
  try {
    // Every rank captures before any launches (README: instantiating can wait for the kernels on the GPU).
    await comm.barrier();
    for (let i = 0; i < arg.launches; i++) {
      const call = 8000 + i;
      const pattern = MOE_PATTERNS[i % MOE_PATTERNS.length];
      const C = makeMoeSplits(new Rng(arg.seed, call), W, E, pattern, arg.maxRows);
      const key = (q: number): number => moeInputKey(arg.seed, call, q);
      const label = `replay ${i} (W ${W}, E ${E}, ${pattern} splits, rowBytes ${rowBytes})`;
      if (i % 3 === 2) {
        const [q, r, e] = [rng.int(W), rng.int(W), rng.int(E)];
        C.set(q, r, e, -3);
        moe.prepare(key, C, rowBytes, call);
        expectSplitsError(graph.launch(lane.stream), { problem: 'negative', rank: q, peer: r, expert: e, needed: -3, available: 0 }, comm.rank, `refused ${label}`);
        moe.verifyUntouched(`refused ${label}`);
      } else {
        moe.prepare(key, C, rowBytes, call);
        graph.launch(lane.stream).wait();
        moe.verifyDispatch(key, C, arg.align, rowBytes, label);
        moe.verifyCombine(key, C, rowBytes, label);
      }
      fence.call(1, lane).wait();
    }
  } finally {
    graph.close();
  }
  return arg.launches;
}

export interface MoeLanesArg {
  seed: number;
  rounds: number;
  experts: number;
  align: number;
  maxRows: number;
}

/** Lane 0 dispatches while lane 1 combines, then the other way round; handles waited in reverse. */
export async function moeLanes(comm: Comm, arg: MoeLanesArg): Promise<number> {
  const W = comm.worldSize;
  const E = arg.experts;
  const lanes = [comm.lane(0), comm.lane(1)];
  const rowBytes = 17;
  const sizes = moeSizes(W, { experts: [E], aligns: [arg.align], maxRows: arg.maxRows, budget: 1 << 30, rowSizes: [rowBytes] });
  const sets = [await Moe.create(comm, sizes), await Moe.create(comm, sizes)];
  const state = sets.map(() => ({ call: 0, C: makeMoeSplits(new Rng(0), W, E, 'zero', 0), key: (_q: number): number => 0 }));
  let call = 9000;
  const dispatchOn = (i: number) => {
    const s = state[i];
    s.call = ++call;
    s.C = makeMoeSplits(new Rng(arg.seed, s.call), W, E, MOE_PATTERNS[s.call % MOE_PATTERNS.length], arg.maxRows);
    s.key = (q) => moeInputKey(arg.seed, s.call, q);
    sets[i].prepare(s.key, s.C, rowBytes, s.call);
    return sets[i].dispatch({ experts: E, rowBytes, align: arg.align, lane: lanes[i] });
  };
  dispatchOn(1).wait();
  sets[1].verifyDispatch(state[1].key, state[1].C, arg.align, rowBytes, 'first dispatch on lane 1');
  for (let round = 0; round < arg.rounds; round++) {
    const [d, c] = round % 2 === 0 ? [0, 1] : [1, 0];
    sets[c].poison(round, ['back', 'backOffsets']);
    const hd = dispatchOn(d);
    const hc = sets[c].combine({ experts: E, rowBytes, lane: lanes[c] });
    hc.wait();
    hd.wait();
    sets[d].verifyDispatch(state[d].key, state[d].C, arg.align, rowBytes, `round ${round}: dispatch on lane ${d} while lane ${c} combines`);
    sets[c].verifyCombine(state[c].key, state[c].C, rowBytes, `round ${round}: combine on lane ${c} while lane ${d} dispatches`);
  }
  return arg.rounds;
}
