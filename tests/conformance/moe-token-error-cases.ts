// Rank programs for the token-level MoE group's failures: a routing past recvX's capacity, a bad
// expert id, a bad device token count (each refused on every rank with a named error, nothing
// written, then a good round trip), host-side misuse (UsageError at once) and a rank that never
// dispatches (TimeoutError naming it).
import type { Comm, DeviceBuffer, Handle } from '../../src/backends/backend.js';
import { A2avError, SplitsError, TimeoutError } from '../../src/errors.js';
import type { MoeCombineArgs, MoeDispatchArgs, MoeRoute } from '../../src/moe/api.js';
import { MoeCapacityError, MoeRoutingError } from '../../src/moe/errors.js';
import { createMoeGroup } from '../../src/moe/group.js';
import { expectTimeout, expectUsageError, stayAbsent } from './expect.js';
import { ConformanceError } from './harness.js';
import { jobOf, type TokenJobArg } from './moe-token-cases.js';
import { TokenRig, type CallData } from './moe-token-harness.js';
import { receiveLayout, routing, type Routing, type TokenPattern } from './moe-token-reference.js';
import { Rng } from './reference.js';

/** handle.wait() must throw `cls` with these fields (`message`: a RegExp its message must match); returns the error. */
function expectError<C extends typeof MoeCapacityError | typeof MoeRoutingError>(handle: Handle, cls: C, want: Record<string, unknown>, label: string): InstanceType<C> {
  let err: unknown;
  try {
    handle.wait();
  } catch (e) {
    err = e;
  }
  if (!(err instanceof cls)) throw new ConformanceError(`${label}: expected ${cls.name}, got ${err instanceof Error ? `${err.name}: ${err.message}` : String(err)}`, { cause: err });
  for (const [key, value] of Object.entries(want)) {
    const got = (err as unknown as Record<string, unknown>)[key];
    const ok = value instanceof RegExp ? typeof got === 'string' && value.test(got) : got === value;
    if (!ok) throw new ConformanceError(`${label}: ${cls.name} ${key} is ${String(got)}, expected ${String(value)} (${err.message})`, { cause: err });
  }
  return err as InstanceType<C>;
}

/**
 * The combine of a refused dispatch's route: route-refused, naming that dispatch's error as its
 * cause (its rank, and for a bad id its token and k), never rank 0 of the exchange's stand-in counts.
 */
function expectRefusedRoute(handle: Handle, dispatched: MoeCapacityError | MoeRoutingError, label: string, along: 'combine' | 'dispatch' = 'combine'): void {
  const at = dispatched instanceof MoeRoutingError ? { token: dispatched.token, k: dispatched.k } : { token: -1, k: -1 };
  const opening = along === 'combine' ? /^MoE combine of a route whose dispatch was refused/ : /^MoE dispatch along a route whose own dispatch was refused/;
  const err = expectError(handle, MoeRoutingError, { problem: 'route-refused', rank: dispatched.rank, ...at, reportedBy: dispatched.reportedBy, message: opening }, label);
  const cause = err.cause;
  if (!(cause instanceof dispatched.constructor) || (cause as Error).message !== dispatched.message) {
    throw new ConformanceError(`${label}: the cause is ${cause instanceof Error ? `${cause.name}: ${cause.message}` : String(cause)}, expected the dispatch's ${dispatched.name}: ${dispatched.message}`, { cause: err });
  }
  if (!err.message.includes(dispatched.message)) throw new ConformanceError(`${label}: the message does not carry the dispatch's: ${err.message}`, { cause: err });
}

/** A routing refusal carries no cause: the exchange's SplitsError held only the routing's stand-in split. */
function expectNoCause(err: Error, label: string): void {
  if (err.cause !== undefined) throw new ConformanceError(`${label}: ${err.name} has a cause (${String(err.cause)}): the stand-in split would show`, { cause: err });
}

async function expectRejected(fn: () => Promise<unknown>, label: string): Promise<void> {
  try {
    await fn();
  } catch (err) {
    if (err instanceof A2avError && err.code === 'A2AV_USAGE') return;
    throw new ConformanceError(`${label}: expected UsageError, got ${String(err)}`, { cause: err });
  }
  throw new ConformanceError(`${label}: expected UsageError, but nothing was thrown`);
}

export async function moeTokenErrors(comm: Comm, arg: TokenJobArg): Promise<number> {
  const job = jobOf(comm, arg);
  const { world: W, experts: E, topk: K, maxTokens: T } = job;
  const me = comm.rank;
  const expanded = job.layout === 'expanded';
  // recvX short of every token to one expert, with room for one id of one token from every rank
  // (the good calls below); the case's maxTokens makes the two differ.
  const A = job.align;
  const capacity = expanded ? (E - 1) * A + Math.ceil(W / A) * A : W;
  const rig = await TokenRig.create(comm, { job, hidden: arg.hidden, recvRows: capacity, emulator: arg.emulator });
  const rng = new Rng(arg.seed, 0x7e);
  let call = 700;
  const calls = (pattern: TokenPattern): CallData => {
    call++;
    return { seed: arg.seed, call, routings: Array.from({ length: W }, (_, q) => routing(job, arg.seed, call, q, pattern)) };
  };
  const dispatch = (d: CallData, count: 'host' | 'device' = 'device') => {
    rig.prepare(d, true);
    rig.poison(d.call);
    return rig.dispatch({ count, idx64: true, weights: true, tokens: d.routings[me].tokens });
  };
  const good = (label: string): void => {
    // At most one id of one token a rank, so that recvX's capacity holds them.
    const d = calls('random');
    for (const r of d.routings) {
      r.tokens = Math.min(r.tokens, 1);
      r.ids = r.ids.slice(0, r.tokens * K).map((id, i) => (i === r.ids.findIndex((x) => x >= 0) ? id : -1));
    }
    const { route, done } = dispatch(d, 'host');
    done.wait();
    rig.verifyDispatch(d, { idx64: true, weights: true }, label);
    rig.writeOutputs(d, 'f32');
    rig.combine({ route, dtype: 'f32', weights: expanded, bias: true }).wait();
    rig.verifyCombine(d, { dtype: 'f32', weights: expanded, bias: true }, label);
  };

  // Every token to one expert: past recvX on its rank, refused on every rank; then the combine of
  // that refused route.
  let d = calls('oneExpert');
  const hot = d.routings[0].ids[0];
  const owner = Math.floor(hot / E);
  let r = dispatch(d);
  // The error names the first expert, in the owner's layout, whose block passes the end: the hot
  // one, or one after it whose padding no longer fits.
  const { rows, counts, starts } = receiveLayout(job, d.routings, owner);
  const past = counts.findIndex((c, e) => starts[e] + (c === 0 ? A : Math.ceil(c / A) * A) > capacity);
  const named = { expert: expanded ? owner * E + past : -1, localExpert: expanded ? past : -1 };
  const full = expectError(r.done, MoeCapacityError, { rank: owner, ...named, needed: BigInt(rows.length), capacity: BigInt(capacity), reportedBy: me }, 'every token to one expert');
  // The exchange's own refusal, in its terms (compact: one bucket a rank, no expert of the job's).
  const exchanged = full.cause;
  if (!(exchanged instanceof SplitsError) || exchanged.problem !== 'output-overflow' || exchanged.rank !== owner || (!expanded && exchanged.expert !== -1)) {
    throw new ConformanceError(`every token to one expert: the cause is ${String(exchanged)}, expected the exchange's output-overflow on rank ${owner}${expanded ? '' : ' with expert -1'}`, { cause: full });
  }
  rig.verifyUntouched('every token to one expert');
  expectRefusedRoute(rig.combine({ route: r.route, dtype: 'f32', weights: false, bias: false }), full, 'combine of a refused dispatch');
  rig.verifyUntouched('combine of a refused dispatch');
  good('good round trip after a refused capacity');

  // A bad expert id on rank q (and a later one, which the error does not name).
  const q = rng.int(W);
  d = calls('random');
  const bad: Routing = d.routings[q];
  if (bad.tokens === 0) Object.assign(bad, { tokens: 1, ids: new Array<number>(K).fill(-1) });
  const [t, k] = [rng.int(bad.tokens), rng.int(K)];
  bad.ids[t * K + k] = rng.pick([W * E, W * E + 77, -2]);
  if (t * K + k + 1 < bad.ids.length) bad.ids[bad.ids.length - 1] = -9;
  r = dispatch(d);
  const badId = expectError(r.done, MoeRoutingError, { problem: 'expert-id', rank: q, token: t, k, reportedBy: me }, `a bad expert id on rank ${q}`);
  expectNoCause(badId, `a bad expert id on rank ${q}`);
  rig.verifyUntouched(`a bad expert id on rank ${q}`);
  // Its combine, after a good one: what let that one's reduction through must not let this one's.
  expectRefusedRoute(rig.combine({ route: r.route, dtype: 'f32', weights: false, bias: false }), badId, 'combine of a refused dispatch after a good one');
  // A dispatch along that route (new x, its ids never read): refused as the combine is, not as a
  // bad id of its own.
  expectRefusedRoute(rig.dispatch({ count: 'host', idx64: true, weights: false, tokens: d.routings[me]!.tokens, route: r.route }).done, badId, 'a dispatch along a refused route', 'dispatch');
  rig.verifyUntouched('a dispatch along a refused route');
  rig.verifyUntouched('combine of a refused dispatch after a good one');
  good('good round trip after a bad expert id');

  // A device token count past the buffers, then a negative one, on rank q.
  for (const n of [T + 1, -1]) {
    d = calls('random');
    rig.prepare(d, true);
    rig.poison(d.call);
    if (me === q) comm.write(rig.inputs.numTokens, BigInt64Array.of(BigInt(n)));
    r = rig.dispatch({ count: 'device', idx64: true, weights: true, tokens: 0 });
    // Rank q names its count and the tokens its call takes (every buffer here holds maxTokens); its
    // peers cannot see them on q's device and say where they are.
    const facts = me === q
      ? { numTokens: BigInt(n), capacity: BigInt(T), message: new RegExp(`^rank ${q}: MoE dispatch: the device token count \\(numTokens\\) is ${n}, ${n < 0 ? 'negative' : `more than ${T}`}: its call takes 0\\.\\.${T} tokens \\(maxTokensPerRank ${T}\\)`) }
      : { numTokens: undefined, capacity: undefined, message: new RegExp(`at most maxTokensPerRank, ${T}\\); rank ${q}'s own error names the count`) };
    const count = expectError(r.done, MoeRoutingError, { problem: 'token-count', rank: q, reportedBy: me, ...facts }, `device token count ${n} on rank ${q}`);
    expectNoCause(count, `device token count ${n} on rank ${q}`);
    rig.verifyUntouched(`device token count ${n} on rank ${q}`);
    expectRefusedRoute(rig.combine({ route: r.route, dtype: 'f32', weights: false, bias: false }), count, `combine of device token count ${n}'s route`);
    rig.verifyUntouched(`combine of device token count ${n}'s route`);
    good(`good round trip after device token count ${n}`);
  }
  return call - 700 + (await misuse(comm, arg, rig, good));
}

/**
 * Refusals inside a graph replay (dispatch + combine captured with a device token count): the
 * replay's handle names the routing's fault as an eager dispatch's does (MoeRoutingError, no
 * stand-in split as cause), nothing is written, and the next replay goes through.
 */
export async function moeTokenReplayErrors(comm: Comm, arg: TokenJobArg): Promise<number> {
  const job = jobOf(comm, arg);
  const { world: W, topk: K, maxTokens: T } = job;
  const me = comm.rank;
  const rig = await TokenRig.create(comm, { job, hidden: arg.hidden, emulator: arg.emulator });
  const rng = new Rng(arg.seed, 0x7f);
  const lane = comm.lane(comm.laneCount - 1);
  const weights = job.layout === 'expanded';
  const graph = comm.capture(lane.stream, () => {
    const { route } = rig.dispatch({ count: 'device', idx64: true, weights, tokens: 0, stream: lane.stream });
    rig.combine({ route, dtype: 'f32', weights, bias: false, stream: lane.stream });
  });
  let call = 800;
  const calls = (): CallData => {
    call++;
    return { seed: arg.seed, call, routings: Array.from({ length: W }, (_, q) => routing(job, arg.seed, call, q, 'random')) };
  };
  const good = (label: string): void => {
    const d = calls();
    rig.prepare(d, true);
    rig.poison(d.call);
    graph.launch(lane.stream).wait();
    rig.verifyDispatch(d, { idx64: true, weights }, label);
  };
  try {
    // Every rank captures before any launches (README: instantiating can wait for the kernels on the GPU).
    await comm.barrier();
    good('a good replay');
    // A bad expert id on rank q.
    const q = rng.int(W);
    const d = calls();
    const bad = d.routings[q];
    if (bad.tokens === 0) Object.assign(bad, { tokens: 1, ids: new Array<number>(K).fill(-1) });
    const [t, k] = [rng.int(bad.tokens), rng.int(K)];
    bad.ids[t * K + k] = rng.pick([W * job.experts, -5]);
    rig.prepare(d, true);
    rig.poison(d.call);
    const label = `a replay with a bad expert id on rank ${q}`;
    expectNoCause(expectError(graph.launch(lane.stream), MoeRoutingError, { problem: 'expert-id', rank: q, token: t, k, reportedBy: me }, label), label);
    rig.verifyUntouched(label);
    good(`a good replay after ${label}`);
    // A device token count past the buffers on rank q.
    const d2 = calls();
    rig.prepare(d2, true);
    rig.poison(d2.call);
    if (me === q) comm.write(rig.inputs.numTokens, BigInt64Array.of(BigInt(T + 1)));
    const label2 = `a replay with device token count ${T + 1} on rank ${q}`;
    expectNoCause(expectError(graph.launch(lane.stream), MoeRoutingError, { problem: 'token-count', rank: q, reportedBy: me }, label2), label2);
    rig.verifyUntouched(label2);
    good(`a good replay after ${label2}`);
  } finally {
    graph.close();
  }
  await rig.close();
  return call - 800;
}

/** Host-side misuse: UsageError at once, nothing queued, a good round trip after. */
async function misuse(comm: Comm, arg: TokenJobArg, rig: TokenRig, good: (label: string) => void): Promise<number> {
  const job = jobOf(comm, arg);
  const { inputs, outputs, group } = rig;
  // The buffers the refusals below are given, allocated first (README: allocate before the calls
  // start): the createMoeGroup refusals meet every rank on the host, so no peer's dispatch can be
  // waiting on the GPU for this rank yet, as one may once they are past.
  const rowOut = 4 * rig.hidden;
  const spare = {
    local: comm.alloc(outputs.recvX.bytes),
    shortCounts: comm.alloc(8 * job.experts - 1),
    oneRow: comm.alloc(job.rowBytes),
    byte: [comm.alloc(1), comm.alloc(1), comm.alloc(1)],
    rowOut: [comm.alloc(rowOut), comm.alloc(rowOut)],
  };
  const base = { numExperts: job.world * job.experts, topk: job.topk, maxTokensPerRank: job.maxTokens, rowBytes: job.rowBytes, layout: job.layout };
  const options: [string, Record<string, unknown>][] = [
    ['numExperts not a multiple of W', { numExperts: job.world * job.experts + (job.world > 1 ? 1 : 0.5) }],
    ['topk 0', { topk: 0 }],
    ['layout "sparse"', { layout: 'sparse' }],
    ['maxTokensPerRank 0', { maxTokensPerRank: 0 }],
    ['expertAlignment 0', { expertAlignment: 0 }],
    ['expertAlignment with the compact layout', { layout: 'compact', expertAlignment: 4 }],
    ['a lane past the last', { lane: { index: comm.laneCount, stream: comm.lane(0).stream } }],
    ['expertAlign (misspelt expertAlignment)', { expertAlign: 16 }],
  ];
  for (const [label, change] of options) await expectRejected(() => createMoeGroup(comm, { ...base, ...change } as never), `createMoeGroup with ${label}`);

  const d = rig.dispatch.bind(rig);
  const expanded = job.layout === 'expanded';
  const local = spare.local;
  const dispatchArgs: MoeDispatchArgs = { x: inputs.x, topkIdx: inputs.topkIdx, recvX: outputs.recvX, expertCounts: outputs.counts, numTokens: 1 };
  const dispatches: [string, Partial<MoeDispatchArgs>][] = [
    ['recvX not symmetric', { recvX: local }],
    ['x that is recvX', { x: outputs.recvX }],
    ['topkIdx that is recvX', { topkIdx: outputs.recvX }],
    ['expertCounts that is recvX', { expertCounts: outputs.recvX }],
    ['expertCounts short of int64[E]', { expertCounts: spare.shortCounts }],
    ['numTokens past maxTokensPerRank', { numTokens: job.maxTokens + 1 }],
    ['numTokens 1.5', { numTokens: 1.5 }],
    ['numTokens past the rows of x', { x: spare.oneRow, numTokens: 2 }],
    ['topkIdxType int16', { topkIdxType: 'int16' as never }],
    ['recvTopkWeights without topkWeights', { recvTopkWeights: outputs.recvWeights }],
    [expanded ? 'recvTopkIdx with the expanded layout' : 'expertOffsets with the compact layout', expanded ? { recvTopkIdx: outputs.recvIdx } : { expertOffsets: outputs.offsets }],
    ['a route that is not the group\'s', { route: { layout: job.layout } as MoeRoute }],
    ['numToken (misspelt numTokens)', { numToken: 1 } as never],
    ["numTokens '3' (neither a count nor a buffer)", { numTokens: '3' as never }],
  ];
  // Every refusal in the call's words: rank, then the call, as its own checks and the shared buffer checks say it.
  for (const [label, change] of dispatches) expectUsageError(() => group.dispatch({ ...dispatchArgs, ...change }), `dispatch with ${label}`, /^rank \d+: MoE dispatch[: ]/);
  expectUsageError(() => group.dispatch({ ...dispatchArgs, numTokens: '3' as never }), 'dispatch with numTokens \'3\'', /numTokens must be an integer in 0\.\.\d+ \(maxTokensPerRank\) or an int64\[1\] device buffer, got '3' \(a string\)$/);
  const old = d({ count: 'host', idx64: true, weights: false, tokens: 0 });
  old.done.wait();
  d({ count: 'host', idx64: true, weights: false, tokens: 0 }).done.wait();
  expectUsageError(() => group.dispatch({ ...dispatchArgs, numTokens: undefined, route: old.route }), 'dispatch along a route a later dispatch replaced');
  comm.write(inputs.topkIdx, new BigInt64Array(job.topk).fill(-1n));
  const { route, done } = d({ count: 'host', idx64: true, weights: false, tokens: 1 });
  done.wait();
  expectUsageError(() => group.dispatch({ ...dispatchArgs, route }), 'dispatch along a route with numTokens');
  const combineArgs: MoeCombineArgs = { y: inputs.y, route, out: inputs.out, dtype: 'f32' };
  const combines: [string, Partial<MoeCombineArgs>][] = [
    ['dtype f64', { dtype: 'f64' as never }],
    ['out short of the tokens', { out: spare.byte[0] }],
    ['y short of recvX', { y: spare.byte[1] }],
    ['a route a later dispatch replaced', { route: old.route }],
    ['weights (misspelt topkWeights)', { weights: inputs.weights } as never],
    ...(expanded ? [] : [['topkWeights with the compact layout', { topkWeights: inputs.weights }] as [string, Partial<MoeCombineArgs>]]),
  ];
  for (const [label, change] of combines) expectUsageError(() => group.combine({ ...combineArgs, ...change }), `combine with ${label}`);
  expectUsageError(() => group.combine({ ...combineArgs, route: old.route }), 'combine along an old route');
  // out's size says where T comes from: the host count, or with a device count the most the dispatch could carry.
  expectUsageError(() => group.combine({ ...combineArgs, out: spare.byte[2] }), 'combine with out short of the host count', new RegExp(`out \\(f32\\[T\\]\\[H\\]\\) holds 1 bytes, needs at least ${rowOut}: T rows of ${rowOut} bytes, T = 1, the route's dispatch's tokens$`));
  comm.write(inputs.numTokens, BigInt64Array.of(1n));
  const onDevice = d({ count: 'device', idx64: true, weights: false, tokens: 1 });
  onDevice.done.wait();
  const T = job.maxTokens;
  const most = new RegExp(`needs at least ${T * rowOut}: T rows of ${rowOut} bytes, T = ${T}, the most tokens the route's dispatch could carry \\(maxTokensPerRank ${T}\\): its numTokens was on the device`);
  const deviceArgs = { ...combineArgs, route: onDevice.route };
  expectUsageError(() => group.combine({ ...deviceArgs, out: spare.rowOut[0] }), 'combine with out short of the most a device count could be', most);
  expectUsageError(() => group.combine({ ...deviceArgs, bias: spare.rowOut[1] }), 'combine with bias short of the most a device count could be', most);
  // No arguments at all: a UsageError, not a TypeError from reading a field of undefined.
  expectUsageError(() => group.dispatch(undefined as never), 'dispatch with no arguments');
  expectUsageError(() => group.combine(undefined as never), 'combine with no arguments');
  good('good round trip after misuse');
  return options.length + dispatches.length + combines.length + 3;
}

/** Rank `absent` makes the group but never dispatches: every other rank's dispatch must end in a TimeoutError naming it. */
export async function moeTokenTimeout(comm: Comm, arg: TokenJobArg & { absent: number; timeoutMs: number }): Promise<number> {
  const job = jobOf(comm, arg);
  const rig = await TokenRig.create(comm, { job, hidden: arg.hidden, emulator: arg.emulator });
  if (comm.rank === arg.absent) return stayAbsent(arg.timeoutMs);
  const d: CallData = { seed: arg.seed, call: 900, routings: Array.from({ length: comm.worldSize }, (_, q) => routing(job, arg.seed, 900, q, 'random')) };
  rig.prepare(d, true);
  rig.poison(900);
  const started = performance.now();
  const missing = comm.backend === 'nccl' ? -1 : arg.absent;
  const err: TimeoutError = expectTimeout(rig.dispatch({ count: 'host', idx64: true, weights: false, tokens: d.routings[comm.rank].tokens }).done, missing, comm.rank, `rank ${arg.absent} absent`);
  const waited = performance.now() - started;
  // Said as the group's call, not only as the exchange inside it.
  if (!err.message.includes('(MoE dispatch, in its exchange: ')) throw new ConformanceError(`rank ${arg.absent} absent: the timeout does not say it was the MoE dispatch's: ${err.message}`, { cause: err });
  if (waited < arg.timeoutMs / 2) throw new Error(`gave up after ${waited.toFixed(0)} ms, timeout is ${arg.timeoutMs} ms (${err.message})`);
  rig.verifyUntouched(`rank ${arg.absent} absent`, Object.values(rig.outputs) as DeviceBuffer[]);
  return Math.round(waited);
}
