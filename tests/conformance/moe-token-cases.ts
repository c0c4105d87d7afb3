// Rank programs of the conformance suite for the token-level MoE group (src/moe/): dispatch and
// combine against the host reference on fresh routings, route reuse and repeated dispatches bit
// for bit, and graph replay with new ids and a new device token count. Failures:
// moe-token-error-cases.ts.
import type { Comm } from '../../src/backends/backend.js';
import type { MoeRoute } from '../../src/moe/api.js';
import { expectUsageError } from './expect.js';
import { TokenRig, type CallData } from './moe-token-harness.js';
import { routing, TOKEN_PATTERNS, type Dtype, type TokenJob } from './moe-token-reference.js';
import { Exchange } from './harness.js';
import { Rng } from './reference.js';

export interface TokenJobArg {
  seed: number;
  layout: 'expanded' | 'compact';
  experts: number;
  topk: number;
  maxTokens: number;
  align: number;
  rowBytes: number;
  /** f32 elements of a combine row. */
  hidden: number;
  calls: number;
  /** A host build of the kernels to compute with (tests/moe-tokens.test.ts), on cpu. */
  emulator?: string;
  /** y in symmetric memory: on cuda the combine reads the expert outputs in place. */
  symmetricY?: boolean;
}

export const jobOf = (comm: Comm, a: TokenJobArg): TokenJob => ({
  world: comm.worldSize,
  layout: a.layout,
  experts: a.experts,
  topk: a.topk,
  maxTokens: a.maxTokens,
  align: a.align,
  rowBytes: a.rowBytes,
});

const DTYPES: readonly Dtype[] = ['bf16', 'f32', 'f16'];


/**
 * Call after call on one group: a fresh routing (random, unbalanced, a rank with no tokens, half
 * the tokens dropped), uneven token counts, int64 and int32 ids, the count on the host or the
 * device, weights on every rank, none or some; dispatch checked, dispatched again (bit-identical), dispatched along its route (the
 * same), then combined twice: plain, and with weights (expanded) and bias, in bf16, f32 or f16.
 */
export async function moeTokens(comm: Comm, arg: TokenJobArg): Promise<number> {
  const job = jobOf(comm, arg);
  const rig = await TokenRig.create(comm, { job, hidden: arg.hidden, emulator: arg.emulator, symmetricY: arg.symmetricY });
  const rng = new Rng(arg.seed, 0x7a);
  for (let call = 0; call < arg.calls; call++) {
    const pattern = TOKEN_PATTERNS[call % TOKEN_PATTERNS.length];
    const d: CallData = { seed: arg.seed, call, routings: Array.from({ length: comm.worldSize }, (_, q) => routing(job, arg.seed, call, q, pattern)) };
    const idx64 = call % 2 === 0;
    const count = rng.int(2) === 0 ? 'host' : 'device';
    // Weights on every rank, on none, or (every third call) on the even ranks only: a rank may ask
    // for them back while its peers send none (theirs then read 0), and every rank runs the same exchanges.
    const sends = (q: number) => (call % 3 === 2 ? q % 2 === 0 : call % 3 === 0);
    const weights = sends(comm.rank);
    const tokens = d.routings[comm.rank].tokens;
    const label = `call ${call} (W ${comm.worldSize}, ${job.layout}, E ${job.experts}, K ${job.topk}, align ${job.align}, ${pattern}, ${idx64 ? 'int64' : 'int32'} ids, ${count} count, rowBytes ${job.rowBytes})`;
    rig.prepare(d, idx64);
    rig.poison(call);
    const first = rig.dispatch({ count, idx64, weights, tokens });
    first.done.wait();
    rig.verifyDispatch(d, { idx64, weights, sends }, `dispatch ${label}`);
    // Again over fresh poison: the same bytes (the layout is exact, so bit-identical), then along
    // the route, with no routing worked out.
    rig.poison(call + 101);
    const second = rig.dispatch({ count, idx64, weights, tokens });
    second.done.wait();
    const route = second.route;
    rig.verifyDispatch(d, { idx64, weights, sends }, `second dispatch ${label}`);
    rig.poison(call + 202);
    rig.dispatch({ count, idx64, weights, tokens, route }).done.wait();
    rig.verifyDispatch(d, { idx64, weights, sends }, `dispatch along the route of ${label}`);
    const dtype = DTYPES[call % DTYPES.length];
    rig.writeOutputs(d, dtype);
    for (const [w, bias] of [[false, false], [job.layout === 'expanded', true]] as const) {
      rig.poison(call + 303);
      rig.combine({ route, dtype, weights: w, bias }).wait();
      rig.verifyCombine(d, { dtype, weights: w, bias }, `combine (${dtype}${w ? ', weighted' : ''}${bias ? ', bias' : ''}) ${label}`);
    }
  }
  await rig.close();
  return arg.calls;
}

/**
 * Graph replay: a dispatch and the combine of its outputs captured with the token count on the
 * device, launched again and again with new ids, rows and counts in the same buffers. The expert
 * outputs are written between the two launches of one routing: the first launch dispatches (its
 * combine reads stale outputs), the second combines what the test wrote.
 */
export async function moeTokenReplay(comm: Comm, arg: TokenJobArg): Promise<number> {
  const job = jobOf(comm, arg);
  const lane = comm.lane(comm.laneCount - 1);
  const rig = await TokenRig.create(comm, { job, hidden: arg.hidden, lane, emulator: arg.emulator, symmetricY: arg.symmetricY });
  const fence = await Exchange.create(comm, { inputBytes: 8, outputBytes: 8 });
  fence.writeSplits(new Array<number>(comm.worldSize).fill(0));
  const dtype: Dtype = 'bf16';
  const weights = job.layout === 'expanded';
  const graph = comm.capture(lane.stream, () => {
    const { route } = rig.dispatch({ count: 'device', idx64: true, weights, tokens: 0, stream: lane.stream });
    rig.combine({ route, dtype, weights, bias: true, stream: lane.stream });
  });
  try {
    // Every rank captures before any launches (README: instantiating can wait for the kernels on the GPU).
    await comm.barrier();
    for (let i = 0; i < arg.calls; i++) {
      const call = 500 + i;
      const pattern = TOKEN_PATTERNS[i % TOKEN_PATTERNS.length];
      const d: CallData = { seed: arg.seed, call, routings: Array.from({ length: comm.worldSize }, (_, q) => routing(job, arg.seed, call, q, pattern)) };
      const label = `replay ${i} (W ${comm.worldSize}, ${job.layout}, ${pattern}, ${d.routings[comm.rank].tokens} tokens)`;
      rig.prepare(d, true);
      rig.poison(call);
      graph.launch(lane.stream).wait();
      rig.verifyDispatch(d, { idx64: true, weights }, `dispatch of ${label}`);
      rig.writeOutputs(d, dtype);
      rig.poison(call + 1);
      graph.launch(lane.stream).wait();
      rig.verifyCombine(d, { dtype, weights, bias: true }, `combine of ${label}`);
      fence.call(1, lane).wait();
    }
    // A replayed dispatch replaces the routing as an eager one does: after an eager dispatch B and a
    // replay of dispatch A, B's route is refused and the capture's is the one combine takes.
    let captured: MoeRoute | undefined;
    const dispatchOnly = comm.capture(lane.stream, () => {
      captured = rig.dispatch({ count: 'device', idx64: true, weights, tokens: 0, stream: lane.stream }).route;
    });
    try {
      await comm.barrier();
      const [a, b] = [600, 601].map((call, i): CallData => ({ seed: arg.seed, call, routings: Array.from({ length: comm.worldSize }, (_, q) => routing(job, arg.seed, call, q, TOKEN_PATTERNS[i % TOKEN_PATTERNS.length])) }));
      rig.prepare(b, true);
      const eager = rig.dispatch({ count: 'device', idx64: true, weights, tokens: 0, stream: lane.stream });
      eager.done.wait();
      rig.prepare(a, true);
      rig.poison(600);
      dispatchOnly.launch(lane.stream).wait();
      rig.verifyDispatch(a, { idx64: true, weights }, 'a replayed dispatch after an eager one');
      expectUsageError(() => rig.combine({ route: eager.route, dtype, weights, bias: true, stream: lane.stream }), 'combine with the route of an eager dispatch a replay replaced');
      rig.writeOutputs(a, dtype);
      rig.poison(602);
      rig.combine({ route: captured!, dtype, weights, bias: true, stream: lane.stream }).wait();
      rig.verifyCombine(a, { dtype, weights, bias: true }, 'combine with the replayed dispatch\'s route');
      fence.call(1, lane).wait();
    } finally {
      dispatchOnly.close();
    }
  } finally {
    graph.close();
  }
  await rig.close();
  return arg.calls;
}
