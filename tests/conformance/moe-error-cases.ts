// Rank programs for the MoE calls' failures: every rule of src/collectives/exchange-rules.ts refused
// on every rank with the exact fields (rank, peer, expert, needed, available) and nothing written,
// each followed by a good round trip (the lane stays in step). Host-side misuse: moe-usage-cases.ts.
import type { Comm } from '../../src/backends/backend.js';
import { expectSplitsError, type ExpectedSplitsError } from './expect.js';
import type { MismatchField } from '../../src/errors.js';
import { ConformanceError } from './harness.js';
import { Moe } from './moe-harness.js';
import { dispatchOffsets, dispatchOutputFault, firstPast, makeMoeSplits, moeInputKey, rowsSent, type MoeSplits } from './moe-reference.js';
import { poisonBytes, Rng } from './reference.js';

const INT64_MAX = 0x7fffffffffffffffn;
/** Input and combine-output rows, dispatch-output rows, E and majorAlign of the error cases. */
const IN_ROWS = 40;
const OUT_ROWS = 20;
const E = 4;
const ALIGN = 4;
/** Experts per rank of the one rank whose call cannot fuse (W * E > 256 from W = 2). */
const MANY_EXPERTS = 200;

/** Valid splits far below every capacity (W <= 4: a receiver's layout takes at most E·ALIGN = 16 rows). */
const small = (seed: number, call: number, W: number): MoeSplits => makeMoeSplits(new Rng(seed, call), W, E, 'random', 1);

interface Ctx {
  comm: Comm;
  moe: Moe;
  rowBytes: number;
  seed: number;
  call: number;
}

/** A good dispatch and combine: both verified. */
function good(c: Ctx, label: string): void {
  const call = ++c.call;
  const C = small(c.seed, call, c.comm.worldSize);
  const key = (q: number): number => moeInputKey(c.seed, call, q);
  c.moe.prepare(key, C, c.rowBytes, call);
  c.moe.dispatch({ experts: E, rowBytes: c.rowBytes, align: ALIGN }).wait();
  c.moe.verifyDispatch(key, C, ALIGN, c.rowBytes, label);
  c.moe.combine({ experts: E, rowBytes: c.rowBytes }).wait();
  c.moe.verifyCombine(key, C, c.rowBytes, label);
}

/** A dispatch of `C` (this rank's row as given, bigints allowed) must be refused with `want`. */
function refusedDispatch(c: Ctx, row: readonly (number | bigint)[], want: ExpectedSplitsError, label: string): void {
  c.moe.poison(++c.call);
  c.moe.writeSplits(row);
  expectSplitsError(c.moe.dispatch({ experts: E, rowBytes: c.rowBytes, align: ALIGN }), want, c.comm.rank, label);
  c.moe.verifyUntouched(label);
  good(c, `good round trip after ${label}`);
}

/** A combine with this rank's inSplitsOffsets as given must be refused with `want`. */
function refusedCombine(c: Ctx, offsets: readonly bigint[], want: ExpectedSplitsError, label: string, output = c.moe.back): void {
  c.moe.poison(++c.call);
  c.comm.write(c.moe.midOffsets, BigInt64Array.from(offsets));
  const poison = poisonBytes(c.call, output.bytes);
  c.comm.write(output, poison);
  expectSplitsError(c.moe.combine({ experts: E, rowBytes: c.rowBytes, output }), want, c.comm.rank, label);
  c.moe.verifyUntouched(label, ['mid', 'backOffsets']);
  if (c.comm.read(output, 0, output.bytes).some((b, k) => b !== poison[k])) throw new ConformanceError(`${label}: rank ${c.comm.rank} combine output was written`);
  good(c, `good round trip after ${label}`);
}

export interface MoeErrorsArg {
  seed: number;
}

/** Every splits problem of dispatch and combine, each refused on every rank with nothing written. */
export async function moeErrors(comm: Comm, arg: MoeErrorsArg): Promise<number> {
  const W = comm.worldSize;
  const me = comm.rank;
  const rng = new Rng(arg.seed, 0xd5);
  const rowBytes = rng.pick([1, 7, 13, 255]);
  // Odd byte sizes: the capacities are whole rows.
  const moe = await Moe.create(comm, { experts: E, inputBytes: IN_ROWS * rowBytes + rowBytes - 1, outputBytes: OUT_ROWS * rowBytes + rowBytes - 1, canary: false });
  const narrow = await comm.allocSymmetric(10 * rowBytes + rowBytes - 1);
  const c: Ctx = { comm, moe, rowBytes, seed: arg.seed, call: 100 };
  const [q, r0, e0] = [rng.int(W), rng.int(W), rng.int(E)];
  const rowOf = (C: MoeSplits, rank: number): number[] => C.row(rank);

  // Dispatch: a negative split.
  let C = small(arg.seed, 1, W);
  C.set(q, r0, e0, -1 - rng.int(5));
  refusedDispatch(c, rowOf(C, me), { problem: 'negative', rank: q, peer: r0, expert: e0, needed: C.at(q, r0, e0), available: 0 }, `negative split on rank ${q}`);

  // One row past the input, at the first (peer, expert) where the running sum passes it.
  C = small(arg.seed, 2, W);
  C.set(q, r0, e0, C.at(q, r0, e0) + IN_ROWS + 1 - rowsSent(C, q));
  refusedDispatch(c, rowOf(C, me), { problem: 'input-overflow', rank: q, ...firstPast(rowOf(C, q).map(BigInt), E, BigInt(IN_ROWS)), needed: IN_ROWS + 1, available: IN_ROWS }, `splits one row past the input on rank ${q}`);

  // Splits whose sum overflows int64: reported as INT64_MAX, never wrapped.
  C = small(arg.seed, 3, W);
  const big = rowOf(C, q).map(BigInt);
  [big[0], big[big.length - 1]] = [1n << 62n, big.length > 1 ? 1n << 62n : INT64_MAX];
  refusedDispatch(c, me === q ? big : rowOf(C, me), { problem: 'input-overflow', rank: q, ...firstPast(big, E, BigInt(IN_ROWS)), needed: INT64_MAX, available: IN_ROWS }, `splits overflowing int64 on rank ${q}`);

  // Receiver r0's layout passes its output at a chunk.
  C = small(arg.seed, 4, W);
  C.set(q, r0, e0, C.at(q, r0, e0) + OUT_ROWS + 1);
  refusedDispatch(c, rowOf(C, me), { problem: 'output-overflow', rank: r0, ...dispatchOutputFault(C, r0, ALIGN, OUT_ROWS)!, available: OUT_ROWS }, `receiver ${r0} past its output`);

  // ... at an expert's padding: blocks of 8, 8 and 4 rows fill it; the last expert, empty, still takes ALIGN.
  C = small(arg.seed, 5, W);
  for (let src = 0; src < W; src++) C.setRow(src, r0, src === q ? [8, 8, 4, 0] : [0, 0, 0, 0]);
  refusedDispatch(c, rowOf(C, me), { problem: 'output-overflow', rank: r0, peer: -1, expert: 3, needed: OUT_ROWS + ALIGN, available: OUT_ROWS }, `receiver ${r0} past its output by an empty expert's padding`);

  // Exactly full is not an error.
  C.setRow(q, r0, [8, 4, 4, 4]);
  const full = ++c.call;
  const key = (k: number): number => moeInputKey(arg.seed, full, k);
  moe.prepare(key, C, rowBytes, full);
  moe.dispatch({ experts: E, rowBytes, align: ALIGN }).wait();
  moe.verifyDispatch(key, C, ALIGN, rowBytes, `receiver ${r0} exactly full`);

  // Combine: inSplitsOffsets (counts at e·W + r, offsets at E·W + e·W + r) with one fault on rank q.
  const valid = (): bigint[] => dispatchOffsets(small(arg.seed, 6, W), me, ALIGN);
  const at = (r: number, e: number): number => e * W + r;
  let offs = valid();
  if (me === q) offs[at(r0, e0)] = -3n;
  refusedCombine(c, offs, { problem: 'negative', rank: q, peer: r0, expert: e0, needed: -3, available: 0 }, `combine: negative count on rank ${q}`);
  offs = valid();
  if (me === q) offs[W * E + at(r0, e0)] = -5n;
  refusedCombine(c, offs, { problem: 'input-overflow', rank: q, peer: r0, expert: e0, needed: -5, available: OUT_ROWS }, `combine: negative offset on rank ${q}`);
  offs = valid();
  if (me === q) [offs[at(r0, e0)], offs[W * E + at(r0, e0)]] = [3n, BigInt(OUT_ROWS - 2)];
  refusedCombine(c, offs, { problem: 'input-overflow', rank: q, peer: r0, expert: e0, needed: OUT_ROWS + 1, available: OUT_ROWS }, `combine: a chunk past the input on rank ${q}`);
  offs = valid();
  if (me === q) [offs[at(r0, e0)], offs[W * E + at(r0, e0)]] = [5n, INT64_MAX - 1n];
  refusedCombine(c, offs, { problem: 'input-overflow', rank: q, peer: r0, expert: e0, needed: INT64_MAX, available: OUT_ROWS }, `combine: offset + rows overflowing int64 on rank ${q}`);
  // Receiver r0 gets 11 rows back into a 10-row output: nobody else returns anything.
  offs = dispatchOffsets(makeMoeSplits(rng, W, E, 'zero', 1), me, ALIGN);
  if (me === q) [offs[at(r0, e0)], offs[W * E + at(r0, e0)]] = [11n, 0n];
  refusedCombine(c, offs, { problem: 'output-overflow', rank: r0, peer: q, expert: e0, needed: 11, available: 10 }, `combine: receiver ${r0} past its output`, narrow);
  return c.call - 100;
}

/**
 * Rank q's call differs from the others' in kind, row size, output, E or majorAlign: refused on
 * every rank, compared with rank 0 in rank order (so when q is 0 it is rank 1 that differs).
 */
export async function moeMismatch(comm: Comm, arg: MoeErrorsArg): Promise<number> {
  const W = comm.worldSize;
  const me = comm.rank;
  const rng = new Rng(arg.seed, 0xd6);
  const rowBytes = rng.pick([1, 7, 13, 255]);
  // Before the collective allocations (Moe.create says why).
  const many = { inSplits: comm.alloc(8 * W * MANY_EXPERTS), offsets: comm.alloc(16 * W * MANY_EXPERTS) };
  comm.write(many.inSplits, new BigInt64Array(W * MANY_EXPERTS));
  const manyPoison = poisonBytes(0x5a, many.offsets.bytes);
  comm.write(many.offsets, manyPoison);
  const moe = await Moe.create(comm, { experts: E, inputBytes: IN_ROWS * 256, outputBytes: OUT_ROWS * 256 });
  const alt = await comm.allocSymmetric(moe.mid.bytes);
  const c: Ctx = { comm, moe, rowBytes, seed: arg.seed, call: 200 };
  const q = rng.int(W);
  const p = q === 0 ? 1 : q;
  /** rank's value: q's differs from everyone else's. */
  const of = (rank: number, mine: number, others: number): number => (rank === q ? mine : others);
  // The message names both ranks compared and blames neither: rank 0 may be the odd one out.
  const pair = new RegExp(`^rank 0 and rank ${p} disagree: `);
  const want = (field: MismatchField, mine: number, others: number): ExpectedSplitsError => ({ problem: 'mismatch', rank: p, peer: 0, needed: of(p, mine, others), available: of(0, mine, others), field, message: pair });
  const dispatch = (a: { experts?: number; rowBytes?: number; align?: number; output?: typeof alt }) =>
    moe.dispatch({ experts: a.experts ?? E, rowBytes: a.rowBytes ?? rowBytes, align: a.align ?? ALIGN, output: a.output });
  const cases: { label: string; call: () => ReturnType<Comm['allToAllV2d']>; want: ExpectedSplitsError }[] = [
    {
      label: `rank ${q} combines while the others dispatch`,
      call: () => (me === q ? comm.allToAllV2dOffset({ input: moe.input, output: moe.mid, inSplitsOffsets: moe.midOffsets, outSplitsOffsets: moe.backOffsets, expertsPerRank: E, rowBytes }) : dispatch({})),
      want: want('kind', 3, 2), // ExchangeKind: dispatch 2, combine 3
    },
    { label: `rank ${q} with another row size`, call: () => dispatch({ rowBytes: of(me, rowBytes + 1, rowBytes) }), want: want('rowBytes', rowBytes + 1, rowBytes) },
    {
      // Rank 0 alone differs: the rule names rank 1, the first whose call differs from rank 0's (at
      // W = 3 rank 2 agrees with rank 1), so the message must not put it on rank 1.
      label: 'rank 0 alone with another row size',
      call: () => dispatch({ rowBytes: me === 0 ? rowBytes + 1 : rowBytes }),
      want: {
        problem: 'mismatch', rank: 1, peer: 0, needed: rowBytes, available: rowBytes + 1, field: 'rowBytes', op: 'allToAllV2d', call: null,
        message: new RegExp(`^rank 0 and rank 1 disagree: rowBytes ${rowBytes + 1} on rank 0, ${rowBytes} on rank 1 \\(rank 1 is the first rank whose call differs from rank 0's; either may be the odd one out\\) \\(reported by rank \\d+, in its allToAllV2d\\)$`),
      },
    },
    { label: `rank ${q} with another output`, call: () => dispatch({ output: me === q ? alt : moe.mid }), want: want('output', alt.symmetricId, moe.mid.symmetricId) },
    { label: `rank ${q} with another E`, call: () => dispatch({ experts: of(me, E - 1, E) }), want: want('expertsPerRank', E - 1, E) },
    { label: `rank ${q} with another majorAlign`, call: () => dispatch({ align: of(me, 2 * ALIGN, ALIGN) }), want: want('majorAlign', 2 * ALIGN, ALIGN) },
    {
      // On cuda the others' calls fit one fused kernel and rank q's does not (kernels/exchange-fused.cuh):
      // the two exchanges must still agree on the refusal.
      label: `rank ${q} with ${MANY_EXPERTS} experts (a split matrix too large to fuse)`,
      call: () =>
        me === q
          ? comm.allToAllV2d({ input: moe.input, output: moe.mid, inSplits: many.inSplits, outSplitsOffsets: many.offsets, expertsPerRank: MANY_EXPERTS, rowBytes })
          : dispatch({}),
      want: want('expertsPerRank', MANY_EXPERTS, E),
    },
  ];
  for (const k of cases) {
    const C = small(arg.seed, ++c.call, W);
    moe.poison(c.call);
    moe.writeSplits(C.row(me));
    const poison = poisonBytes(c.call, alt.bytes);
    comm.write(alt, poison);
    expectSplitsError(k.call(), k.want, me, k.label);
    moe.verifyUntouched(k.label);
    if (comm.read(alt, 0, alt.bytes).some((b, i) => b !== poison[i])) throw new ConformanceError(`${k.label}: rank ${me}'s other output was written`);
    if (comm.read(many.offsets, 0, many.offsets.bytes).some((b, i) => b !== manyPoison[i])) throw new ConformanceError(`${k.label}: rank ${me}'s outSplitsOffsets was written`);
    good(c, `good round trip after ${k.label}`);
  }
  return cases.length;
}
