// The rank program of moe.ts: one MoE layer's token traffic on every rank (SPMD). Each step routes
// this rank's tokens to their top-k experts (the router's ids and weights, written by the host here),
// dispatches them, runs the "experts" (here: the identity, y = recvX), and combines: each token gets
// back the weighted sum of its k expert outputs, checked against the same sum on the host.
import type { Comm } from 'a2av';
import { createMoeGroup } from 'a2av';
import { MismatchError } from './common.js';

/** Tokens a rank, experts of the job, experts a token, f32 elements a row. */
const TOKENS = 6;
const EXPERTS_PER_RANK = 2;
const TOPK = 2;
const HIDDEN = 4;
const ROW_BYTES = 4 * HIDDEN;

/** Token t of rank `src` in `step`: HIDDEN distinct values, so a row in the wrong place shows. */
const tokenRow = (src: number, t: number, step: number): number[] => Array.from({ length: HIDDEN }, (_, h) => src * 1000 + t * 10 + h + step / 4);

/** The router's choice for token t: TOPK distinct experts of the job (5 apart, and the job's count is even) and their weights. */
function route(src: number, t: number, step: number, experts: number): { ids: number[]; weights: number[] } {
  const first = (src * 7 + t * 3 + step) % experts;
  return { ids: Array.from({ length: TOPK }, (_, k) => (first + k * 5) % experts), weights: Array.from({ length: TOPK }, (_, k) => 1 / (k + 2)) };
}

export async function moeStep(comm: Comm, arg: { steps: number }): Promise<string> {
  const W = comm.worldSize;
  const me = comm.rank;
  const experts = W * EXPERTS_PER_RANK;
  // Collective: every rank creates the group with the same options; it allocates its buffers once.
  const group = await createMoeGroup(comm, { numExperts: experts, topk: TOPK, maxTokensPerRank: TOKENS, rowBytes: ROW_BYTES, layout: 'expanded' });
  const x = comm.alloc(TOKENS * ROW_BYTES);
  const topkIdx = comm.alloc(TOKENS * TOPK * 8); // int64 [T][K]
  const topkWeights = comm.alloc(TOKENS * TOPK * 4); // f32 [T][K]
  const expertCounts = comm.alloc(8 * EXPERTS_PER_RANK);
  const out = comm.alloc(TOKENS * ROW_BYTES);
  // Symmetric: peers write the rows into it. The identity experts' output is recvX itself, and a
  // symmetric y lets the combine read it in place (on cuda with every rank on one GPU).
  const recvX = await comm.allocSymmetric(group.recvRows * ROW_BYTES);

  let received = 0n;
  for (let step = 0; step < arg.steps; step++) {
    const routes = Array.from({ length: TOKENS }, (_, t) => route(me, t, step, experts));
    comm.write(x, Float32Array.from(Array.from({ length: TOKENS }, (_, t) => tokenRow(me, t, step)).flat()));
    comm.write(topkIdx, BigInt64Array.from(routes.flatMap((r) => r.ids), BigInt));
    comm.write(topkWeights, Float32Array.from(routes.flatMap((r) => r.weights)));

    const { route: r, done } = group.dispatch({ x, topkIdx, topkWeights, recvX, expertCounts });
    done.wait();
    received = new BigInt64Array(comm.read(expertCounts, 0, 8 * EXPERTS_PER_RANK).slice().buffer).reduce((a, b) => a + b, 0n);

    group.combine({ y: recvX, route: r, out, topkWeights, dtype: 'f32' }).wait();
    const got = new Float32Array(comm.read(out, 0, TOKENS * ROW_BYTES).slice().buffer);
    for (let t = 0; t < TOKENS; t++) {
      const row = tokenRow(me, t, step);
      for (let h = 0; h < HIDDEN; h++) {
        // The combine's order: each product rounded to f32, the first as it is, each next added in f32.
        let want = 0;
        routes[t]!.weights.forEach((w, k) => {
          const term = Math.fround(Math.fround(w) * Math.fround(row[h]!));
          want = k === 0 ? term : Math.fround(want + term);
        });
        if (got[t * HIDDEN + h] !== want) throw new MismatchError(`rank ${me} step ${step}: out[${t}][${h}] is ${got[t * HIDDEN + h]}, expected ${want}`);
      }
    }
  }
  await group.close();
  return `rank ${me} (${comm.backend}): ${arg.steps} steps of dispatch and combine checked; the last brought ${received} rows to its ${EXPERTS_PER_RANK} experts`;
}
