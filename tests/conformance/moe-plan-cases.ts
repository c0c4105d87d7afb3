// Rank programs for exchange plans: one splits exchange kept for several payloads of one routing
// (tokens, indices, weights: each its own row size), for dispatch, combine and the 1-D call; moves
// that disagree across ranks, and refused plans, write nothing.
import type { Comm, ExchangePlan, Handle } from '../../src/backends/backend.js';
import { SplitsError } from '../../src/errors.js';
import { expectSplitsError, type ExpectedSplitsError } from './expect.js';
import { ConformanceError, Exchange } from './harness.js';
import { Moe } from './moe-harness.js';
import { combineOffsets, dispatchLayout, MOE_PATTERNS, dispatchOffsets, dispatchOutputFault, expectedDispatch, makeMoeSplits, moeInput, moeInputKey, type MoeSplits } from './moe-reference.js';
import { expectedOutput, expectedSplitsOffsets, inputKey, makeSplits, patternBytes, poisonBytes, rowSum, Rng } from './reference.js';

export interface MoePlansArg {
  seed: number;
  experts: number;
  align: number;
  maxRows: number;
}

/** Three payloads, each its row size (tokens, top-k indices, weights). */
const PAYLOAD_ROWS = [4099, 8, 2] as const;

/** A dispatch plan and the combine plan of its output, each moving three payloads; then moves that disagree. */
export async function moePlans(comm: Comm, arg: MoePlansArg): Promise<number> {
  const W = comm.worldSize;
  const me = comm.rank;
  const E = arg.experts;
  const A = arg.align;
  const inputRows = W * E * arg.maxRows;
  const outputRows = inputRows + E * A;
  const maxRb = Math.max(...PAYLOAD_ROWS);
  const moe = await Moe.create(comm, { experts: E, inputBytes: inputRows * maxRb, outputBytes: outputRows * maxRb });
  const alt = await comm.allocSymmetric(moe.mid.bytes);
  const C = makeMoeSplits(new Rng(arg.seed, 7000), W, E, 'random', arg.maxRows);
  moe.writeSplits(C.row(me));
  moe.poison(7000);
  const there = comm.planAllToAllV2d({ inSplits: moe.inSplits, outSplitsOffsets: moe.midOffsets, expertsPerRank: E, majorAlign: A, inputRows, outputRows });
  there.ready.wait();
  // Its twin: the same routing and shape, made right after it (the next call on the lane). A rank
  // that moves one while its peers move the other is refused.
  const twin = comm.planAllToAllV2d({ inSplits: moe.inSplits, outSplitsOffsets: moe.midOffsets, expertsPerRank: E, majorAlign: A, inputRows, outputRows });
  twin.ready.wait();
  moe.verifyOffsets('midOffsets', dispatchOffsets(C, me, A), 'dispatch plan');
  moe.verifyUntouched('dispatch plan (no payload yet)', ['mid', 'back', 'backOffsets']);
  const back = comm.planAllToAllV2dOffset({ inSplitsOffsets: moe.midOffsets, outSplitsOffsets: moe.backOffsets, expertsPerRank: E, inputRows: outputRows, outputRows: inputRows });
  back.ready.wait();
  moe.verifyOffsets('backOffsets', combineOffsets(C, me), 'combine plan');
  for (const [i, rowBytes] of PAYLOAD_ROWS.entries()) {
    const key = (q: number): number => moeInputKey(arg.seed, 7000, q, i);
    const label = `payload ${i} (rowBytes ${rowBytes}, W ${W}, E ${E}, majorAlign ${A})`;
    comm.write(moe.input, moeInput(key(me), C, me, rowBytes));
    moe.poison(i, ['mid', 'back']);
    there.move({ input: moe.input, output: moe.mid, rowBytes }).wait();
    moe.compare('mid', expectedDispatch(key, C, me, A, rowBytes, moe.poisonOf('mid')), `dispatch plan, ${label}`, rowBytes);
    back.move({ input: moe.mid, output: moe.back, rowBytes }).wait();
    const want = moe.poisonOf('back');
    want.set(moeInput(key(me), C, me, rowBytes));
    moe.compare('back', want, `combine plan, ${label}`, rowBytes);
  }
  if (W >= 2) {
    // Rank q moves with another row size, then into another output: refused on every rank.
    const q = new Rng(arg.seed, 7001).int(W);
    const p = q === 0 ? 1 : q;
    const at = (rank: number, mine: number, theirs: number): number => (rank === q ? mine : theirs);
    const refusedMove = (label: string, rowBytes: number, output: typeof alt, want: ExpectedSplitsError) => {
      const poison = poisonBytes(9, alt.bytes);
      moe.poison(9, ['mid']);
      comm.write(alt, poison);
      expectSplitsError(there.move({ input: moe.input, output, rowBytes }), want, me, label);
      moe.verifyUntouched(label, ['mid']);
      if (comm.read(alt, 0, alt.bytes).some((b, k) => b !== poison[k])) throw new ConformanceError(`${label}: the other output was written`);
    };
    // A move of the dispatch plan is refused as one of allToAllV2d (op), made as plan.move (call):
    // the message names the move, not a direct allToAllV2d.
    const move = { op: 'allToAllV2d', call: 'plan.move', message: /\(reported by rank \d+, in its plan.move of a planAllToAllV2d plan\)$/ };
    refusedMove(`rank ${q} moves with another row size`, at(me, 9, 8), moe.mid, { problem: 'mismatch', rank: p, peer: 0, needed: at(p, 9, 8), available: at(0, 9, 8), ...move, field: 'rowBytes' });
    const [idAlt, idMid] = [alt.symmetricId, moe.mid.symmetricId];
    refusedMove(`rank ${q} moves into another output`, 8, me === q ? alt : moe.mid, { problem: 'mismatch', rank: p, peer: 0, needed: at(p, idAlt, idMid), available: at(0, idAlt, idMid), ...move, field: 'output' });
    // A plan is named in its moves by the lane call of its exchange; the twin's is the next one.
    // needed: rank p's plan word, available: rank 0's (0: a direct call).
    // `call`: what this rank's error says it made (undefined: a direct allToAllV2d).
    const planMismatch = (label: string, handle: Handle, want: (needed: bigint, available: bigint) => boolean, call: string | undefined): SplitsError => {
      let err: unknown;
      try {
        handle.wait();
      } catch (e) {
        err = e;
      }
      const ok = err instanceof SplitsError && err.problem === 'mismatch' && err.field === 'plan' && err.rank === p && err.peer === 0 && err.reportedBy === me && want(err.needed, err.available) && err.call === call;
      if (!ok) throw new ConformanceError(`${label}: expected SplitsError mismatch of field 'plan' naming rank ${p} (call ${call}), got ${err instanceof Error ? `${err.name}: ${err.message}` : String(err)}`, { cause: err });
      moe.verifyUntouched(label, ['mid']);
      return err as SplitsError;
    };
    moe.poison(10, ['mid']);
    const twinMove = (me === q ? twin : there).move({ input: moe.input, output: moe.mid, rowBytes: 8 });
    const seen = planMismatch(`rank ${q} moves the twin plan`, twinMove, (n, a) => a > 0n && n - a === (q === 0 ? -1n : 1n), 'plan.move');
    const thereId = q === 0 ? seen.needed : seen.available;
    // A move on rank q while the others call allToAllV2d directly, the same rows and output (on
    // cuda a move and a direct call run different kernels: they meet in round 1's agreement words).
    const direct = () => comm.allToAllV2d({ input: moe.input, output: moe.mid, inSplits: moe.inSplits, outSplitsOffsets: moe.midOffsets, expertsPerRank: E, majorAlign: A, rowBytes: 8 });
    moe.poison(11, ['mid', 'midOffsets']);
    const handle = me === q ? there.move({ input: moe.input, output: moe.mid, rowBytes: 8 }) : direct();
    planMismatch(`rank ${q} moves a plan while the others call allToAllV2d`, handle, (n, a) => (q === 0 ? n === 0n && a === thereId : n === thereId && a === 0n), me === q ? 'plan.move' : undefined);
    moe.verifyUntouched(`rank ${q} moves a plan while the others call allToAllV2d`, ['midOffsets']);
    // Rank q builds a plan while the others call allToAllV2d: plan word -1 against 0 (not the row
    // size, which a plan's exchange has none of).
    moe.poison(12, ['mid', 'midOffsets']);
    const odd = me === q ? comm.planAllToAllV2d({ inSplits: moe.inSplits, outSplitsOffsets: moe.midOffsets, expertsPerRank: E, majorAlign: A, inputRows, outputRows }) : undefined;
    const label = `rank ${q} builds a plan while the others call allToAllV2d`;
    planMismatch(label, odd?.ready ?? direct(), (n, a) => (q === 0 ? n === 0n && a === -1n : n === -1n && a === 0n), me === q ? 'planAllToAllV2d' : undefined);
    moe.verifyUntouched(label, ['midOffsets']);
    odd?.close();
  }
  for (const plan of [there, twin, back]) plan.close();
  return PAYLOAD_ROWS.length;
}

/** A 1-D plan moving three payloads, then refused plans: a negative split, and a capacity too small. */
export async function planRefusals(comm: Comm, arg: MoePlansArg): Promise<number> {
  const W = comm.worldSize;
  const me = comm.rank;
  const rows = arg.maxRows;
  const ex = await Exchange.create(comm, { inputBytes: W * rows * 4099, outputBytes: W * rows * 4099 + 61 });
  const S = makeSplits(new Rng(arg.seed, 7100), W, 'random', rows);
  ex.writeSplits(S[me]);
  ex.poison(1);
  const flat = comm.planAllToAllV({ inSplits: ex.inSplits, outSplitsOffsets: ex.outSplitsOffsets, inputRows: W * rows, outputRows: W * rows });
  flat.ready.wait();
  const offs = new BigInt64Array(comm.read(ex.outSplitsOffsets, 0, 16 * W).buffer);
  if (offs.some((x, i) => x !== expectedSplitsOffsets(S, me)[i])) throw new ConformanceError(`1-D plan: outSplitsOffsets [${offs.join(', ')}]`);
  for (const [i, rowBytes] of PAYLOAD_ROWS.entries()) {
    const call = 7100 + i;
    comm.write(ex.input, patternBytes(inputKey(arg.seed, call, me), 0, rowSum(S, me) * rowBytes));
    const poison = poisonBytes(i, ex.output.bytes);
    comm.write(ex.output, poison);
    flat.move({ input: ex.input, output: ex.output, rowBytes }).wait();
    const want = poison.slice();
    want.set(expectedOutput(arg.seed, call, S, me, rowBytes));
    const got = comm.read(ex.output, 0, ex.output.bytes);
    const k = got.findIndex((b, j) => b !== want[j]);
    if (k >= 0) throw new ConformanceError(`1-D plan, payload ${i} (rowBytes ${rowBytes}): rank ${me} output byte ${k} is ${got[k]}, expected ${want[k]}`);
  }
  flat.close();

  const E = arg.experts;
  const moe = await Moe.create(comm, { experts: E, inputBytes: W * E * rows * 16, outputBytes: (W * E * rows + E * arg.align) * 16 });
  const rng = new Rng(arg.seed, 7200);
  const refused = (label: string, C: MoeSplits, capacity: { inputRows: number; outputRows: number }, want: ExpectedSplitsError): void => {
    moe.writeSplits(C.row(me));
    moe.poison(3);
    const plan: ExchangePlan = comm.planAllToAllV2d({ inSplits: moe.inSplits, outSplitsOffsets: moe.midOffsets, expertsPerRank: E, majorAlign: arg.align, ...capacity });
    expectSplitsError(plan.ready, want, me, label);
    expectSplitsError(plan.move({ input: moe.input, output: moe.mid, rowBytes: 16 }), want, me, `a move of the ${label}`);
    moe.verifyUntouched(label);
    plan.close();
  };
  const C = makeMoeSplits(rng, W, E, 'random', rows);
  const [q, r, e] = [rng.int(W), rng.int(W), rng.int(E)];
  const full = { inputRows: W * E * rows, outputRows: W * E * rows + E * arg.align };
  const bad = C.copy().set(q, r, e, -4);
  refused(`plan with a negative split on rank ${q}`, bad, full, { problem: 'negative', rank: q, peer: r, expert: e, needed: -4, available: 0 });
  // Every rank's capacity one row short of the smallest layout: receiver 0 is the first past it.
  const cap = Math.min(...Array.from({ length: W }, (_, r2) => dispatchLayout(C, r2, arg.align).total)) - 1;
  const fault = dispatchOutputFault(C, 0, arg.align, cap)!;
  refused('plan whose capacity is one row short', C, { ...full, outputRows: cap }, { problem: 'output-overflow', rank: 0, ...fault, available: cap });
  return PAYLOAD_ROWS.length + 2;
}

export interface MoePlanReplayArg {
  seed: number;
  launches: number;
  experts: number;
  align: number;
  maxRows: number;
}

/** The payloads a captured plan moves: tokens (ROWS[0] bytes a row) and their top-k indices. */
const REPLAY_ROWS = [48, 8] as const;

/**
 * Exchange plans in a graph: a dispatch plan moving two payloads and the combine plan of the first,
 * made and moved inside capture() on a lane, launched again and again with new splits and rows in
 * the same buffers (each launch redoes the exchange). A plan's close() inside the closure is
 * refused (on cuda it would wait for the lane inside the capture); the plans are closed after the
 * last launch. On cpu the closure runs at each launch, so the plans closed are the last launch's.
 */
export async function moePlanReplay(comm: Comm, arg: MoePlanReplayArg): Promise<number> {
  const W = comm.worldSize;
  const me = comm.rank;
  const E = arg.experts;
  const A = arg.align;
  const lane = comm.lane(comm.laneCount - 1);
  const inputRows = W * E * arg.maxRows;
  const outputRows = inputRows + E * A;
  const [rb, rbIdx] = REPLAY_ROWS;
  const moe = await Moe.create(comm, { experts: E, inputBytes: inputRows * rb, outputBytes: outputRows * rb });
  const idxIn = comm.alloc(inputRows * rbIdx);
  const idxOut = await comm.allocSymmetric(outputRows * rbIdx);
  let there: ExchangePlan | undefined;
  let back: ExchangePlan | undefined;
  let closeInside = 'not tried';
  const graph = comm.capture(lane.stream, () => {
    there = comm.planAllToAllV2d({ inSplits: moe.inSplits, outSplitsOffsets: moe.midOffsets, expertsPerRank: E, majorAlign: A, inputRows, outputRows, lane });
    there.move({ input: moe.input, output: moe.mid, rowBytes: rb });
    there.move({ input: idxIn, output: idxOut, rowBytes: rbIdx });
    back = comm.planAllToAllV2dOffset({ inSplitsOffsets: moe.midOffsets, outSplitsOffsets: moe.backOffsets, expertsPerRank: E, inputRows: outputRows, outputRows: inputRows, lane });
    back.move({ input: moe.mid, output: moe.back, rowBytes: rb });
    try {
      back.close();
      closeInside = 'accepted';
    } catch (err) {
      closeInside = `${(err as Error).name}: ${(err as Error).message}`;
    }
  });
  try {
    // Every rank captures before any launches (README: instantiating can wait for the kernels on the GPU).
    await comm.barrier();
    for (let i = 0; i < arg.launches; i++) {
      const call = 7300 + i;
      const C = makeMoeSplits(new Rng(arg.seed, call), W, E, MOE_PATTERNS[i % MOE_PATTERNS.length]!, arg.maxRows);
      const key = (q: number): number => moeInputKey(arg.seed, call, q);
      const keyIdx = (q: number): number => moeInputKey(arg.seed, call, q, 1);
      const label = `plan replay ${i} (W ${W}, E ${E}, majorAlign ${A})`;
      moe.prepare(key, C, rb, call);
      comm.write(idxIn, moeInput(keyIdx(me), C, me, rbIdx));
      const idxPoison = poisonBytes(call & 0xff, idxOut.bytes);
      comm.write(idxOut, idxPoison);
      graph.launch(lane.stream).wait();
      moe.verifyDispatch(key, C, A, rb, `${label}, tokens`);
      const gotIdx = comm.read(idxOut, 0, idxOut.bytes);
      const wantIdx = expectedDispatch(keyIdx, C, me, A, rbIdx, idxPoison);
      const k = gotIdx.findIndex((b, j) => b !== wantIdx[j]);
      if (k >= 0) throw new ConformanceError(`${label}, indices: rank ${me} byte ${k} (row ${Math.floor(k / rbIdx)}) is ${gotIdx[k]}, expected ${wantIdx[k]}`);
      moe.verifyCombine(key, C, rb, `${label}, combine`);
      if (!/^UsageError: rank \d+: an exchange plan cannot be closed inside capture\(\)/.test(closeInside)) {
        throw new ConformanceError(`${label}: a plan's close() inside capture(): expected its UsageError, got ${closeInside}`);
      }
    }
  } finally {
    graph.close();
  }
  // After the last launch, outside the closure: both close.
  there!.close();
  back!.close();
  return arg.launches;
}
