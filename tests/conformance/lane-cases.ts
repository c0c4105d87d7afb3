// Rank program for lanes: independent channels with their own counters and status records.
import type { Comm, Lane } from '../../src/backends/backend.js';
import { expectSplitsError } from './expect.js';
import { Exchange, maxRowsFor, sizesFor } from './harness.js';
import { makeSplits, PATTERNS, Rng } from './reference.js';

export interface LanesArg {
  seed: number;
  budget: number;
}

/**
 * Lane 0 holds an unread error while lane 1 keeps working; then both lanes have a call in flight
 * at once, waited in reverse order; then lane 0 works again. The lanes see different numbers of
 * calls, so their sequence counters differ throughout.
 */
export async function lanes(comm: Comm, arg: LanesArg): Promise<number> {
  const W = comm.worldSize;
  const me = comm.rank;
  const [l0, l1] = [comm.lane(0), comm.lane(1)];
  const a = await Exchange.create(comm, sizesFor(W, arg.budget));
  const b = await Exchange.create(comm, sizesFor(W, arg.budget));
  const rng = new Rng(arg.seed, 0xe4);
  const rowsFor = (rowBytes: number): number => maxRowsFor(arg.budget, rowBytes);
  let call = 5000;

  const bad = makeSplits(new Rng(arg.seed, ++call), W, 'random', 3);
  const [q, r0] = [rng.int(W), rng.int(W)];
  bad[q][r0] = -2;
  a.prepare(arg.seed, call, bad, 8);
  const held = a.call(8, l0);

  for (let i = 0; i < 4; i++) {
    const rowBytes = rng.pick([1, 13, 1000, 4099]);
    const S = makeSplits(new Rng(arg.seed, ++call), W, PATTERNS[i % PATTERNS.length], rowsFor(rowBytes));
    b.prepare(arg.seed, call, S, rowBytes);
    b.call(rowBytes, l1).wait();
    b.verify(arg.seed, call, S, rowBytes, `lane 1 call ${i} while lane 0 holds an error`);
  }
  expectSplitsError(held, { problem: 'negative', rank: q, peer: r0, needed: -2, available: 0 }, me, 'lane 0 error read after lane 1 calls');
  a.verifyUntouched('lane 0 refused call');

  for (let round = 0; round < 3; round++) {
    const [rbA, rbB] = [rng.pick([3, 17, 255]), rng.pick([7, 1000, 16384])];
    const onA = { ex: a, lane: l0, rowBytes: rbA, splits: makeSplits(new Rng(arg.seed, ++call), W, 'random', rowsFor(rbA)), call };
    const onB = { ex: b, lane: l1, rowBytes: rbB, splits: makeSplits(new Rng(arg.seed, ++call), W, 'skew', rowsFor(rbB)), call };
    bothLanes(arg.seed, onA, onB, 'reverse', `both lanes in flight (round ${round})`);
  }
  return call - 5000;
}

/**
 * Ranks issue their calls across lanes in different orders: odd ranks lane 1 first, even ranks lane
 * 0 first, small and large calls. Lanes are independent channels, so each lane's calls pair by their
 * order on that lane alone (cuda: the calls are queued and both lanes' kernels are resident at once).
 */
export async function lanesCrossed(comm: Comm, arg: LanesArg & { rounds: number }): Promise<number> {
  const W = comm.worldSize;
  const [l0, l1] = [comm.lane(0), comm.lane(1)];
  const a = await Exchange.create(comm, sizesFor(W, arg.budget));
  const b = await Exchange.create(comm, sizesFor(W, arg.budget));
  const rng = new Rng(arg.seed, 0xe6);
  let call = 7000;
  for (let round = 0; round < arg.rounds; round++) {
    const rowBytes = rng.pick([16, 1000, 4096]);
    const rows = round % 2 === 0 ? 2 : maxRowsFor(arg.budget, rowBytes);
    const onA = { ex: a, lane: l0, rowBytes, splits: makeSplits(new Rng(arg.seed, ++call), W, 'random', rows), call };
    const onB = { ex: b, lane: l1, rowBytes, splits: makeSplits(new Rng(arg.seed, ++call), W, 'skew', rows), call };
    const [first, second] = comm.rank % 2 === 1 ? [onB, onA] : [onA, onB];
    bothLanes(arg.seed, first, second, round % 2 === 0 ? 'queued' : 'reverse', `issued lane ${first.lane.index} first on rank ${comm.rank} (round ${round})`);
  }
  return call - 7000;
}

/** One call on each of two lanes. */
interface LaneCall {
  ex: Exchange;
  lane: Lane;
  rowBytes: number;
  splits: number[][];
  call: number;
}

/** Queues `a`'s call, then `b`'s, waits for both (`b` first where `order` says reverse), and checks both. */
function bothLanes(seed: number, a: LaneCall, b: LaneCall, order: 'queued' | 'reverse', label: string): void {
  for (const c of [a, b]) c.ex.prepare(seed, c.call, c.splits, c.rowBytes);
  const handles = [a, b].map((c) => c.ex.call(c.rowBytes, c.lane));
  for (const h of order === 'reverse' ? handles.reverse() : handles) h.wait();
  for (const c of [a, b]) c.ex.verify(seed, c.call, c.splits, c.rowBytes, `lane ${c.lane.index}, ${label}`);
}

/**
 * Large calls on both lanes at once, each large enough that its grid takes all its lane may keep
 * resident (rows not a multiple of 16 bytes keep one GPU's calls in the resident sweep). Every rank
 * queues lane 0's call, then lane 1's, and waits for both: where two lanes' grids do not fit beside
 * each other, a rank's lane-1 kernel can hold blocks its lane-0 kernel needs while a peer waits on
 * that lane-0 kernel, and the calls end in a timeout (3 ranks on one H200 with grids from the
 * rank's whole share, A2AV_LANE_SHARES=0) instead of completing.
 */
export async function lanesLarge(comm: Comm, arg: LanesArg & { rounds: number }): Promise<number> {
  const W = comm.worldSize;
  const [l0, l1] = [comm.lane(0), comm.lane(1)];
  const a = await Exchange.create(comm, sizesFor(W, arg.budget));
  const b = await Exchange.create(comm, sizesFor(W, arg.budget));
  let call = 7000;
  for (let round = 0; round < arg.rounds; round++) {
    const [rbA, rbB] = [1000, 4104];
    const onA = { ex: a, lane: l0, rowBytes: rbA, splits: makeSplits(new Rng(arg.seed, ++call), W, 'random', maxRowsFor(arg.budget, rbA)), call };
    const patternB = (['random', 'skew', 'self'] as const)[round % 3];
    const onB = { ex: b, lane: l1, rowBytes: rbB, splits: makeSplits(new Rng(arg.seed, ++call), W, patternB, maxRowsFor(arg.budget, rbB)), call };
    bothLanes(arg.seed, onA, onB, 'queued', `large calls on both lanes (round ${round})`);
  }
  return call - 7000;
}
