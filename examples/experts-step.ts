// The rank program of experts.ts: an MoE layer's exchange at the level of PyTorch's
// all_to_all_vdev_2d. Each step routes rows to (rank, expert) pairs, makes one exchange plan for
// that routing and moves two payloads along it (the token rows, then a word per row standing in
// for its router weight), checks the expert-major layout that arrived, then sends the rows back
// with a combine plan (identity experts) and checks that each rank has its input again.
import type { Comm } from 'a2av';
import { int32s, int64s, MismatchError } from './common.js';

/** Experts on each rank, and the rows each expert's block starts at a multiple of (grouped GEMMs want aligned groups). */
const E = 2;
const ALIGN = 4;
/** At most this many rows from one rank to one expert in a step. */
const MAX_ROWS = 3;
/** A token row: [source rank, destination rank, expert, row] as int32s. */
const ROW_BYTES = 16;

/** Rows rank `src` sends to expert `e` of rank `dst` in `step`: 0..MAX_ROWS, some zero. */
const rowsOf = (src: number, dst: number, e: number, step: number): number => (src * 5 + dst * 3 + e * 7 + step) % (MAX_ROWS + 1);
/** The word that travels with a row (its "weight"). */
const weightOf = (src: number, e: number, i: number): number => src * 65536 + e * 256 + i;

export async function expertsStep(comm: Comm, arg: { steps: number }): Promise<string> {
  const W = comm.worldSize;
  const me = comm.rank;
  const inputRows = W * E * MAX_ROWS;
  // Every expert's block may start up to ALIGN - 1 rows late, and an empty one still takes ALIGN rows.
  const outputRows = inputRows + E * ALIGN;
  const tokens = comm.alloc(inputRows * ROW_BYTES);
  const weights = comm.alloc(inputRows * 4);
  const recvTokens = await comm.allocSymmetric(outputRows * ROW_BYTES); // collective: peers write into these
  const recvWeights = await comm.allocSymmetric(outputRows * 4);
  const back = await comm.allocSymmetric(inputRows * ROW_BYTES);
  const inSplits = comm.alloc(8 * W * E); // int64[W*E], rank-major: peer*E + e
  const dispatchSO = comm.alloc(16 * E * W); // int64[2][E*W], expert-major: e*W + src (counts, then offsets)
  const combineSO = comm.alloc(16 * W * E); // int64[2][W*E], rank-major, for the way back

  let last = '';
  for (let step = 0; step < arg.steps; step++) {
    // In: in a model the router writes these on the device; here the host does.
    const rows: number[] = [];
    const words: number[] = [];
    const splits: bigint[] = [];
    for (let dst = 0; dst < W; dst++) {
      for (let e = 0; e < E; e++) {
        const n = rowsOf(me, dst, e, step);
        splits.push(BigInt(n));
        for (let i = 0; i < n; i++) rows.push(me, dst, e, i), words.push(weightOf(me, e, i));
      }
    }
    comm.write(tokens, Int32Array.from(rows));
    comm.write(weights, Int32Array.from(words));
    comm.write(inSplits, BigInt64Array.from(splits));

    // One splits exchange for the routing, then each payload moves along it with its own row size.
    const plan = comm.planAllToAllV2d({ inSplits, outSplitsOffsets: dispatchSO, expertsPerRank: E, majorAlign: ALIGN, inputRows, outputRows });
    plan.move({ input: tokens, output: recvTokens, rowBytes: ROW_BYTES });
    plan.move({ input: weights, output: recvWeights, rowBytes: 4 }).wait(); // also reports a refused routing
    plan.close();

    // What arrived: for each of my experts, the sources' chunks in rank order, each block aligned.
    const so = int64s(comm.read(dispatchSO, 0, 16 * E * W));
    const got = int32s(comm.read(recvTokens, 0, outputRows * ROW_BYTES));
    const gotWeights = int32s(comm.read(recvWeights, 0, outputRows * 4));
    const fail = (what: string): never => {
      throw new MismatchError(`rank ${me}, step ${step}: ${what}`);
    };
    let at = 0;
    for (let e = 0; e < E; e++) {
      at = Math.ceil(at / ALIGN) * ALIGN;
      const blockStart = at;
      for (let src = 0; src < W; src++) {
        const [count, offset] = [Number(so[e * W + src]), Number(so[E * W + e * W + src])];
        if (count !== rowsOf(src, me, e, step)) fail(`${count} rows from rank ${src} for expert ${e}, expected ${rowsOf(src, me, e, step)}`);
        if (offset !== at) fail(`rows from rank ${src} for expert ${e} start at ${offset}, expected ${at}`);
        for (let i = 0; i < count; i++) {
          const row = Array.from(got.subarray((at + i) * 4, (at + i + 1) * 4));
          if (row.join() !== [src, me, e, i].join()) fail(`row ${at + i} is [${row}], expected [${[src, me, e, i]}]`);
          if (gotWeights[at + i] !== weightOf(src, e, i)) fail(`weight ${at + i} is ${gotWeights[at + i]}, expected ${weightOf(src, e, i)}`);
        }
        at += count;
      }
      // An expert that received nothing still takes ALIGN rows.
      at = Math.max(at, blockStart + ALIGN);
    }

    // Back (identity experts: their output is what they received): the combine takes the dispatch's
    // offsets as they are, padding included, and packs each rank's rows in its input order again.
    const combine = comm.planAllToAllV2dOffset({ inSplitsOffsets: dispatchSO, outSplitsOffsets: combineSO, expertsPerRank: E, inputRows: outputRows, outputRows: inputRows });
    combine.move({ input: recvTokens, output: back, rowBytes: ROW_BYTES }).wait();
    combine.close();
    const returned = int32s(comm.read(back, 0, rows.length * 4));
    const k = returned.findIndex((v, i) => v !== rows[i]);
    if (k >= 0) fail(`row ${Math.floor(k / 4)} came back as [${Array.from(returned.subarray(k - (k % 4), k - (k % 4) + 4))}], expected [${rows.slice(k - (k % 4), k - (k % 4) + 4)}]`);
    last = `sent ${rows.length / 4} rows, received ${at} (with padding) for experts ${me * E}..${me * E + E - 1}`;
  }
  for (const buf of [tokens, weights, recvTokens, recvWeights, back, inSplits, dispatchSO, combineSO]) comm.free(buf);
  return `rank ${me} (${comm.backend}): ${arg.steps} steps checked, two payloads a plan, and back; the last ${last}`;
}
