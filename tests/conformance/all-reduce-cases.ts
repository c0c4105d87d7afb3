// Rank programs for allReduce: sums against the host reference (bit for bit against the rank-ordered
// f32 sum, and within a stated tolerance of a float64 sum), canaries past every output, in place and
// not, two lanes in flight at once, graph replays, a missing rank named by the timeout, ranks that
// disagree (cuda), and host-side misuse.
import type { AllReduceArgs, Comm, DeviceBuffer, Handle, Lane, ReduceDtype } from '../../src/backends/backend.js';
import { ArDtype } from '../../src/backends/cuda/kernel-params.js';
import { ALL_REDUCE_KIND, ExchangeKind } from '../../src/codes.js';
import { allInputs, checkAgainstFloat64, checkBits, orderedReference } from './all-reduce-reference.js';
import { type ExpectedSplitsError, expectSplitsError, expectTimeout, expectUsageError, stayAbsent } from './expect.js';
import type { MismatchField } from '../../src/errors.js';
import { ConformanceError } from './harness.js';
import { poisonBytes, Rng } from './reference.js';

/** Bytes past the largest sum, checked after every call. */
const CANARY_BYTES = 37;
const DTYPES: readonly ReduceDtype[] = ['f32', 'bf16'];

/**
 * nccl sums in its own order (all-reduce.ts there): bit-exact to the rank-ordered reference only
 * where order cannot matter (W <= 2); elsewhere the float64 check alone applies.
 */
const exactOn = (comm: Comm): boolean => comm.backend !== 'nccl' || comm.worldSize <= 2;

/** A local input and two symmetric outputs (one for in-place calls) of `maxCount` f32 and canaries. */
class ReduceBuffers {
  readonly input: DeviceBuffer;
  private constructor(readonly comm: Comm, readonly output: DeviceBuffer, readonly inPlace: DeviceBuffer) {
    this.input = comm.alloc(output.bytes);
  }

  static async create(comm: Comm, maxCount: number): Promise<ReduceBuffers> {
    const bytes = 4 * maxCount + CANARY_BYTES;
    return new ReduceBuffers(comm, await comm.allocSymmetric(bytes), await comm.allocSymmetric(bytes));
  }
}

interface OneCall {
  seed: number;
  call: number;
  dtype: ReduceDtype;
  count: number;
  inPlace: boolean;
  lane?: Lane;
}

/** A call's arguments; prepare() writes its input and poisons its output, verify() checks it once run. */
interface Prepared {
  args: AllReduceArgs;
  verify: () => void;
}

function prepare(b: ReduceBuffers, c: OneCall): Prepared {
  const { comm } = b;
  const inputs = allInputs(c.seed, c.call, comm.worldSize, c.dtype, c.count);
  const output = c.inPlace ? b.inPlace : b.output;
  const poison = poisonBytes(c.call, output.bytes);
  comm.write(output, poison);
  comm.write(c.inPlace ? b.inPlace : b.input, inputs[comm.rank]);
  const input = c.inPlace ? b.inPlace : b.input;
  const label = `rank ${comm.rank}, allReduce call ${c.call}: ${c.count} ${c.dtype}${c.inPlace ? ', in place' : ''}${c.lane ? ` on lane ${c.lane.index}` : ''}`;
  return {
    args: { input, output, count: c.count, dtype: c.dtype, op: 'sum', lane: c.lane, stream: c.lane?.stream },
    verify: () => {
      const got = comm.read(output, 0, output.bytes);
      const want = orderedReference(inputs, c.dtype, c.count);
      if (exactOn(comm)) checkBits(got, want, poison, label);
      else checkBits(got.subarray(want.length), new Uint8Array(0), poison.subarray(want.length), `${label} (canaries)`);
      checkAgainstFloat64(got, inputs, c.dtype, c.count, label);
    },
  };
}

/** Writes this rank's input, poisons the output past it, queues the call; verify() checks it after wait(). */
function start(b: ReduceBuffers, c: OneCall): { handle: Handle; verify: () => void } {
  const p = prepare(b, c);
  return { handle: b.comm.allReduce(p.args), verify: p.verify };
}

export interface AllReduceArg {
  seed: number;
  /** Element counts to run, each in f32 and bf16, in place and not. */
  counts: number[];
}

/** Every count in both dtypes, in place and not, on lane 0; then misuse, which must throw at once. */
export async function allReduce(comm: Comm, arg: AllReduceArg): Promise<number> {
  const b = await ReduceBuffers.create(comm, Math.max(...arg.counts));
  let call = 7000;
  for (const count of arg.counts) {
    for (const dtype of DTYPES) {
      for (const inPlace of [false, true]) {
        const c = start(b, { seed: arg.seed, call: ++call, dtype, count, inPlace });
        c.handle.wait();
        c.verify();
      }
    }
  }
  misuse(comm, b);
  // misuse() allocated and freed: no rank may spin in the next call until every rank is done with that.
  await comm.barrier();
  const after = start(b, { seed: arg.seed, call: ++call, dtype: 'f32', count: 3, inPlace: false });
  after.handle.wait();
  after.verify();
  return call - 7000;
}

/** Host-side misuse throws UsageError, and writes nothing. */
function misuse(comm: Comm, b: ReduceBuffers): void {
  const count = Math.floor((b.output.bytes - CANARY_BYTES) / 4);
  const stream = comm.lane(0).stream;
  const base: AllReduceArgs = { input: b.input, output: b.output, count, dtype: 'f32', op: 'sum' };
  const freed = comm.alloc(16);
  comm.free(freed);
  const cases: [string, Partial<AllReduceArgs> | Record<string, unknown>][] = [
    ['count -1', { count: -1 }],
    ['count 1.5', { count: 1.5 }],
    ['count NaN', { count: NaN }],
    ['count past 2^53', { count: 2 ** 53 }],
    ['input too small', { input: comm.alloc(4 * count - 1) }],
    ['output too small', { output: comm.alloc(4 * count - 1) }],
    ['count past the output', { count: count + 10 }],
    ['dtype f16', { dtype: 'f16' }],
    ['op max', { op: 'max' }],
    ['freed input', { input: freed }],
    ['lane past the last', { lane: { index: comm.laneCount, stream } }],
    ['negative lane', { lane: { index: -1, stream } }],
    ['dType (misspelt dtype) beside dtype', { dType: 'bf16' }],
  ];
  // On cuda peers write the sum into every rank's output: it must be symmetric.
  if (comm.backend === 'cuda') cases.push(['output not symmetric', { output: comm.alloc(b.output.bytes) }]);
  const poison = poisonBytes(0x77, b.output.bytes);
  comm.write(b.output, poison);
  for (const [label, change] of cases) {
    expectUsageError(() => comm.allReduce({ ...base, ...change } as AllReduceArgs), `allReduce with ${label}`);
  }
  const got = comm.read(b.output, 0, b.output.bytes);
  const i = got.findIndex((x, k) => x !== poison[k]);
  if (i >= 0) throw new ConformanceError(`rank ${comm.rank}: allReduce misuse wrote output byte ${i}`);
}

export interface AllReduceLanesArg {
  seed: number;
  rounds: number;
  maxCount: number;
}

/**
 * Lanes 0 and 1 each with a call in flight, waited in reverse order; lane 1 has one more call than
 * lane 0 first, so their counters differ throughout.
 */
export async function allReduceLanes(comm: Comm, arg: AllReduceLanesArg): Promise<number> {
  const [l0, l1] = [comm.lane(0), comm.lane(1)];
  const a = await ReduceBuffers.create(comm, arg.maxCount);
  const b = await ReduceBuffers.create(comm, arg.maxCount);
  let call = 8000;
  const lead = start(b, { seed: arg.seed, call: ++call, dtype: 'bf16', count: 5, inPlace: false, lane: l1 });
  lead.handle.wait();
  lead.verify();
  for (let round = 0; round < arg.rounds; round++) {
    const count = (round * 7919 + 13) % arg.maxCount;
    const ca = start(a, { seed: arg.seed, call: ++call, dtype: DTYPES[round % 2], count, inPlace: round % 3 === 0, lane: l0 });
    const cb = start(b, { seed: arg.seed, call: ++call, dtype: DTYPES[(round + 1) % 2], count: arg.maxCount - count, inPlace: round % 2 === 0, lane: l1 });
    cb.handle.wait();
    ca.handle.wait();
    ca.verify();
    cb.verify();
  }
  return call - 8000;
}

export interface AllReduceTimeoutArg {
  seed: number;
  absent: number;
  timeoutMs: number;
}

/** Rank `absent` never calls: every other rank's call ends in a TimeoutError naming it. */
export async function allReduceTimeout(comm: Comm, arg: AllReduceTimeoutArg): Promise<number> {
  const b = await ReduceBuffers.create(comm, 1000);
  if (comm.rank === arg.absent) return stayAbsent(arg.timeoutMs);
  const started = performance.now();
  const c = start(b, { seed: arg.seed, call: 9000, dtype: 'f32', count: 1000, inPlace: false });
  // NCCL does not say which rank it waits for: there the error names none (missingRank -1).
  const err = expectTimeout(c.handle, comm.backend === 'nccl' ? -1 : arg.absent, comm.rank, `allReduce, rank ${arg.absent} absent`);
  const waited = performance.now() - started;
  if (waited < arg.timeoutMs / 2) throw new Error(`gave up after ${waited.toFixed(0)} ms, timeout is ${arg.timeoutMs} ms (${err.message})`);
  if (comm.backend === 'cpu') {
    const got = comm.read(b.output, 0, b.output.bytes);
    const poison = poisonBytes(9000, b.output.bytes);
    if (got.some((x, k) => x !== poison[k])) throw new ConformanceError(`rank ${comm.rank}: a timed-out allReduce wrote its output`);
  }
  return Math.round(waited);
}


export interface AllReduceReplayArg {
  seed: number;
  launches: number;
  /** Two calls in the graph, each on its own buffers: a small count and a large one. */
  counts: [number, number];
}

/**
 * Graph replay: two calls captured on the last lane (the small one in place), launched again and
 * again with new inputs written into the same buffers; after each launch a direct call on the same
 * lane, so replays and direct calls stay in step there.
 */
export async function allReduceReplay(comm: Comm, arg: AllReduceReplayArg): Promise<number> {
  const lane = comm.lane(comm.laneCount - 1);
  const [small, large] = arg.counts;
  const a = await ReduceBuffers.create(comm, small);
  const b = await ReduceBuffers.create(comm, large);
  const calls = (i: number): [OneCall, OneCall] => [
    { seed: arg.seed, call: 2 * i, dtype: 'bf16', count: small, inPlace: true, lane },
    { seed: arg.seed, call: 2 * i + 1, dtype: 'f32', count: large, inPlace: false, lane },
  ];
  // Captured with the first launch's inputs in place; each launch writes its own before it runs.
  const [ca, cb] = calls(0);
  const [pa, pb] = [prepare(a, ca), prepare(b, cb)];
  const graph = comm.capture(lane.stream, () => {
    comm.allReduce(pa.args);
    comm.allReduce(pb.args);
  });
  try {
    // Every rank captures before any launches (README: instantiating can wait for the kernels on the GPU).
    await comm.barrier();
    for (let i = 0; i < arg.launches; i++) {
      const [ka, kb] = calls(100 + i);
      const [ra, rb] = [prepare(a, ka), prepare(b, kb)];
      graph.launch(lane.stream).wait();
      ra.verify();
      rb.verify();
      const direct = start(b, { seed: arg.seed, call: 5000 + i, dtype: i % 2 ? 'bf16' : 'f32', count: large - i, inPlace: i % 2 === 0, lane });
      direct.handle.wait();
      direct.verify();
    }
  } finally {
    graph.close();
  }
  return arg.launches;
}

export interface AllReduceMismatchArg {
  seed: number;
  /** A count past the one-shot limit, so a rank may take the other path than its peers. */
  large: number;
}

/**
 * One rank calls with another count (on the same path as its peers, and on the other), dtype or
 * output: every rank's handle throws SplitsError 'mismatch' naming the first rank that differs from
 * rank 0 (its value, then rank 0's), nothing is written, and a good call follows on the same lane.
 * Only cuda compares the ranks' calls.
 */
export async function allReduceMismatch(comm: Comm, arg: AllReduceMismatchArg): Promise<number> {
  const me = comm.rank;
  const rng = new Rng(arg.seed, 0xa7);
  const q = rng.int(comm.worldSize);
  const p = q === 0 ? 1 : q;
  const of = (rank: number, mine: number, others: number): number => (rank === q ? mine : others);
  const want = (field: MismatchField, mine: number, others: number): ExpectedSplitsError => ({ problem: 'mismatch', rank: p, peer: 0, needed: of(p, mine, others), available: of(0, mine, others), field });
  const b = await ReduceBuffers.create(comm, arg.large);
  const count = 1000;
  const cases: { label: string; args: Partial<AllReduceArgs>; want: ExpectedSplitsError }[] = [
    { label: `rank ${q} with one more element`, args: { count: of(me, count + 1, count) }, want: want('count', count + 1, count) },
    { label: `rank ${q} with ${arg.large} elements (the other path)`, args: { count: of(me, arg.large, count) }, want: want('count', arg.large, count) },
    { label: `rank ${q} with bf16`, args: { dtype: me === q ? 'bf16' : 'f32' }, want: want('dtype', ArDtype.bf16, ArDtype.f32) },
    { label: `rank ${q} with another output`, args: { output: me === q ? b.inPlace : b.output }, want: want('output', b.inPlace.symmetricId, b.output.symmetricId) },
  ];
  let call = 9500;
  for (const k of cases) {
    const outputs = [b.output, b.inPlace].map((buf, i) => ({ buf, poison: poisonBytes(++call + i, buf.bytes) }));
    for (const o of outputs) comm.write(o.buf, o.poison);
    comm.write(b.input, new Uint8Array(4 * arg.large).fill(0x3f));
    const handle = comm.allReduce({ input: b.input, output: b.output, count, dtype: 'f32', op: 'sum', ...k.args });
    expectSplitsError(handle, k.want, me, k.label);
    for (const o of outputs) {
      const i = comm.read(o.buf, 0, o.buf.bytes).findIndex((x, j) => x !== o.poison[j]);
      if (i >= 0) throw new ConformanceError(`rank ${me}, ${k.label}: a refused allReduce wrote output byte ${i}`);
    }
    const good = start(b, { seed: arg.seed, call: ++call, dtype: 'bf16', count: arg.large, inPlace: false });
    good.handle.wait();
    good.verify();
  }
  return cases.length;
}

/**
 * One rank makes an all-to-all call (allToAllV, then allToAllV2d) on the lane where its peers call
 * allReduce: every rank's handle throws SplitsError 'mismatch' of field 'kind' naming the first rank
 * that differs from rank 0 (needed its kind, available rank 0's: allToAllV 1, allToAllV2d 2,
 * allReduce 4), nothing is written, and both kinds of call run after it on the same lane.
 */
export async function allReduceBeside(comm: Comm, arg: { seed: number }): Promise<number> {
  const W = comm.worldSize;
  const me = comm.rank;
  const q = new Rng(arg.seed, 0xa8).int(W);
  const p = q === 0 ? 1 : q;
  const count = 513;
  const rowBytes = 8;
  // This rank's buffers first, then the collective ones (allocating while a peer spins can stall).
  const inSplits = comm.alloc(8 * W);
  const offsets = comm.alloc(16 * W);
  const input = comm.alloc(rowBytes * W);
  comm.write(inSplits, new BigInt64Array(W).fill(1n));
  comm.write(input, Uint8Array.from({ length: rowBytes * W }, (_, i) => (me * 31 + i) & 255));
  const b = await ReduceBuffers.create(comm, count);
  const exchanged = await comm.allocSymmetric(rowBytes * W);
  const oneD = () => comm.allToAllV({ input, output: exchanged, inSplits, outSplitsOffsets: offsets, rowBytes });
  const dispatch = () => comm.allToAllV2d({ input, output: exchanged, inSplits, outSplitsOffsets: offsets, expertsPerRank: 1, rowBytes });
  const reduce = () => comm.allReduce({ input: b.input, output: b.output, count, dtype: 'f32', op: 'sum' });
  const cases = [
    { label: `rank ${q} calls allToAllV while the others allReduce`, odd: oneD, kind: ExchangeKind['1d'] },
    { label: `rank ${q} calls allToAllV2d while the others allReduce`, odd: dispatch, kind: ExchangeKind.dispatch },
  ];
  let call = 9600;
  for (const k of cases) {
    const watched = [b.output, exchanged, offsets].map((buf) => ({ buf, poison: poisonBytes(++call, buf.bytes) }));
    for (const o of watched) comm.write(o.buf, o.poison);
    comm.write(b.input, new Uint8Array(b.input.bytes).fill(0x3f));
    const of = (rank: number): number => (rank === q ? k.kind : ALL_REDUCE_KIND);
    expectSplitsError(me === q ? k.odd() : reduce(), { problem: 'mismatch', rank: p, peer: 0, needed: of(p), available: of(0), field: 'kind' }, me, k.label);
    for (const o of watched) {
      const i = comm.read(o.buf, 0, o.buf.bytes).findIndex((x, j) => x !== o.poison[j]);
      if (i >= 0) throw new ConformanceError(`rank ${me}, ${k.label}: a refused call wrote byte ${i} of a buffer`);
    }
    // Both kinds run after it: the sum, then the exchange (row r of the output from rank r).
    const good = start(b, { seed: arg.seed, call: ++call, dtype: 'f32', count, inPlace: false });
    good.handle.wait();
    good.verify();
    oneD().wait();
    const got = comm.read(exchanged, 0, rowBytes * W);
    for (let r = 0; r < W; r++) {
      for (let i = 0; i < rowBytes; i++) {
        const want = (r * 31 + me * rowBytes + i) & 255;
        if (got[r * rowBytes + i] !== want) throw new ConformanceError(`rank ${me}, after ${k.label}: allToAllV row from rank ${r} byte ${i} is ${got[r * rowBytes + i]}, expected ${want}`);
      }
    }
  }
  return cases.length;
}
