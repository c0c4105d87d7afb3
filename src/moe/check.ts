// Host-side checks of the group's options and calls: misuse throws UsageError before anything is
// queued, on the rank that made it (the options: on every rank, once the ranks have compared them).
// Buffers are checked as the communicator's own calls check them (ours, not freed, large enough),
// then against the group's sizes.
import { MAX_EXPERTS_PER_RANK, type Comm, type DeviceBuffer } from '../backends/backend.js';
import { argNames, checkArgsObject, checkBuffer, checkLane, checkStream, MAX_MAJOR_ALIGN, pastSafeBound, type CheckContext } from '../collectives/check.js';
import { shown, UsageError } from '../errors.js';
import type { MoeCombineArgs, MoeDispatchArgs, MoeGroupOptions } from './api.js';
import { DTYPES } from './compute.js';
import { limitText, type TokenLimit } from './errors.js';
import { tokenShape, type TokenShape } from './shape.js';

/** K at most: a token's ids are scanned once per k in the compact layout. */
export const MAX_TOPK = 1024;

/** The checks' view of the communicator: every backend's Comm answers these. */
export function checkContext(comm: Comm): CheckContext {
  const ctx = comm as unknown as Partial<CheckContext>;
  if (typeof ctx.owns !== 'function' || typeof ctx.ownsLane !== 'function') throw new UsageError('MoE group: this communicator cannot check buffer ownership');
  return ctx as CheckContext;
}

const isInt = (n: unknown, lo: number, hi = Number.MAX_SAFE_INTEGER): n is number => Number.isSafeInteger(n) && (n as number) >= lo && (n as number) <= hi;
/** "a positive integer", with the bound where the value is one past 2^53 - 1 (no longer held exactly). */
const positive = (v: unknown): string => `a positive integer${pastSafeBound(v)}, got ${shown(v)}`;

const optionsFail = (ctx: CheckContext) => (what: string): never => {
  throw new UsageError(`rank ${ctx.rank}: createMoeGroup: ${what}`);
};

export const MOE_GROUP_OPTIONS = argNames<MoeGroupOptions>()(['numExperts', 'topk', 'maxTokensPerRank', 'rowBytes', 'layout', 'expertAlignment', 'combineRowBytes', 'lane']);
export const MOE_DISPATCH_ARGS = argNames<MoeDispatchArgs>()([
  'x', 'topkIdx', 'topkIdxType', 'topkWeights', 'numTokens', 'recvX', 'recvTopkIdx', 'recvTopkWeights', 'expertCounts', 'expertOffsets', 'numRecvRows', 'route', 'stream',
]);
export const MOE_COMBINE_ARGS = argNames<MoeCombineArgs>()(['y', 'route', 'out', 'topkWeights', 'dtype', 'bias', 'stream']);

export function checkOptions(ctx: CheckContext, o: MoeGroupOptions): TokenShape {
  const fail = optionsFail(ctx);
  if (typeof o !== 'object' || o === null) fail(`options must be an object { numExperts, topk, maxTokensPerRank, rowBytes, layout }, got ${shown(o)}`);
  checkArgsObject(ctx, 'createMoeGroup', o, MOE_GROUP_OPTIONS);
  const W = ctx.worldSize;
  if (o.layout !== 'expanded' && o.layout !== 'compact') fail(`layout must be 'expanded' or 'compact', got ${shown(o.layout, 'string')}`);
  if (!isInt(o.numExperts, W, W * MAX_EXPERTS_PER_RANK) || o.numExperts % W !== 0)
    fail(`numExperts must be a multiple of the ${W} ranks, at most ${MAX_EXPERTS_PER_RANK} a rank, got ${shown(o.numExperts)}`);
  if (!isInt(o.topk, 1, MAX_TOPK)) fail(`topk must be an integer in 1..${MAX_TOPK}, got ${shown(o.topk)}`);
  // As the CLI's --topk: a token cannot pick more distinct experts than there are.
  if (o.topk > o.numExperts) fail(`topk ${o.topk} is more than the ${o.numExperts} experts`);
  if (!isInt(o.maxTokensPerRank, 1)) fail(`maxTokensPerRank must be ${positive(o.maxTokensPerRank)}`);
  if (!isInt(o.rowBytes, 1)) fail(`rowBytes must be ${positive(o.rowBytes)}`);
  if (o.combineRowBytes !== undefined && !isInt(o.combineRowBytes, 1)) fail(`combineRowBytes must be ${positive(o.combineRowBytes)}`);
  const align = o.expertAlignment ?? 1;
  if (!isInt(align, 1, MAX_MAJOR_ALIGN)) fail(`expertAlignment must be an integer in 1..${MAX_MAJOR_ALIGN}, got ${shown(align)}`);
  if (o.layout === 'compact' && align !== 1) fail('expertAlignment is for the expanded layout (compact rows are tokens, not grouped by expert)');
  checkLane(ctx, o.lane);
  const shape = tokenShape({
    world: W,
    rank: ctx.rank,
    layout: o.layout,
    experts: o.numExperts,
    topk: o.topk,
    tokenCap: o.maxTokensPerRank,
    rowBytes: o.rowBytes,
    combineRowBytes: o.combineRowBytes ?? o.rowBytes,
    align,
  });
  // Slots and ranks are int32 on the device; every byte count must be a safe integer.
  const rowMost = Math.max(shape.rowBytes, shape.combineRowBytes, shape.metaBytes);
  if (shape.sendRows * shape.topk >= 2 ** 31 || shape.recvRows >= 2 ** 31 || !Number.isSafeInteger(shape.recvRows * rowMost))
    fail(`maxTokensPerRank ${o.maxTokensPerRank} with topk ${o.topk} and ${W} ranks is too large (rows must stay below 2^31)`);
  return shape;
}

/** What ranks must give alike (they size the symmetric buffers and every exchange), as the shape holds them. */
const AGREED = [
  ['layout', (s: TokenShape) => (s.layout === 'compact' ? 1 : 0)],
  ['numExperts', (s: TokenShape) => s.experts],
  ['topk', (s: TokenShape) => s.topk],
  ['maxTokensPerRank', (s: TokenShape) => s.tokenCap],
  ['rowBytes', (s: TokenShape) => s.rowBytes],
  ['combineRowBytes', (s: TokenShape) => s.combineRowBytes],
  ['expertAlignment', (s: TokenShape) => s.align],
  // The group's calls queue on one lane of each rank: a rank on another lane never meets them.
  ['lane', (_s: TokenShape, lane: number) => lane],
] as const;

/**
 * Collective: checkOptions, then the ranks compare what they were given before anything is sized
 * by it, so options that differ are refused on every rank by name, not later as a symmetric buffer
 * of another size on some rank (or a hang). A rank whose own options are refused still takes part:
 * its peers then fail with it rather than wait for it until the timeout.
 */
export async function checkAgreedOptions(comm: Comm, ctx: CheckContext, o: MoeGroupOptions): Promise<TokenShape> {
  let shape: TokenShape | undefined;
  let refused: unknown;
  try {
    shape = checkOptions(ctx, o);
  } catch (err) {
    refused = err;
  }
  // [valid, then each AGREED value]: float64 holds every safe integer exactly.
  const lane = shape ? (o.lane?.index ?? 0) : 0;  // checkLane took it
  const mine = [shape ? 1 : 0, ...AGREED.map(([, of]) => (shape ? of(shape, lane) : 0))];
  // On the host, with the set-up floor (a lane's call would end under a short timeoutMs while a
  // peer still starts). This rank's own refusal is the error worth reporting, even where the
  // exchange failed too.
  const all = await comm.gatherOnHost(mine).catch((err: unknown) => {
    throw shape === undefined ? refused : err;
  });
  if (shape === undefined) throw refused;
  const fail = optionsFail(ctx);
  const invalid = all.findIndex((v) => v[0] !== 1);
  if (invalid >= 0) fail(`rank ${invalid} refused its options (its own error says why)`);
  AGREED.forEach(([name], i) => {
    const other = all.findIndex((v) => v[i + 1] !== mine[i + 1]);
    if (other < 0) return;
    const show = (v: number) => (name === 'layout' ? (v === 1 ? "'compact'" : "'expanded'") : String(v));
    fail(`ranks disagree on ${name}: ${show(mine[i + 1])} here, ${show(all[other][i + 1])} on rank ${other}`);
  });
  return shape;
}


/** A dispatch as the group runs it. */
export interface DispatchPlan {
  idx64: boolean;
  /** The host count, or the capacity when the count is on the device. */
  tokens: number;
  tokenCap: number;
  numTokens?: DeviceBuffer;
  /** With a device count: what bounds tokenCap (the group's maxTokensPerRank, or the buffer holding the fewest tokens). */
  limit: TokenLimit;
  /** Rows recvX holds (at most the group's recvRows). */
  recvCap: number;
}

export function checkDispatch(ctx: CheckContext, s: TokenShape, a: MoeDispatchArgs, reused?: { tokenCap: number }): DispatchPlan {
  const fail = (what: string): never => {
    throw new UsageError(`rank ${ctx.rank}: MoE dispatch: ${what}`);
  };
  // The shared buffer checks, in this call's words.
  const buffer = (what: string, buf: DeviceBuffer | undefined, minBytes?: number): void => checkBuffer(ctx, `MoE dispatch: ${what}`, buf, minBytes);
  const { topk: K, rowBytes, expertsPerRank: E } = s;
  checkStream(ctx, a.stream);
  const type = a.topkIdxType ?? 'int64';
  if (type !== 'int64' && type !== 'int32') fail(`topkIdxType must be 'int64' or 'int32', got ${shown(type, 'string')}`);
  const idxBytes = type === 'int64' ? 8 : 4;
  buffer('x', a.x);
  buffer('topkIdx', a.topkIdx);
  if (a.topkWeights !== undefined) buffer('topkWeights', a.topkWeights);
  const held = [
    ['x', Math.floor(a.x.bytes / rowBytes)],
    ['topkIdx', Math.floor(a.topkIdx.bytes / (K * idxBytes))],
    ...(a.topkWeights ? [['topkWeights', Math.floor(a.topkWeights.bytes / (4 * K))] as const] : []),
  ] as const;
  const cap = Math.min(s.tokenCap, ...held.map(([, rows]) => rows));
  const limit: TokenLimit = cap === s.tokenCap ? 'maxTokensPerRank' : held.find(([, rows]) => rows === cap)![0];
  let tokens = Math.min(s.tokenCap, held[1][1]);
  let numTokens: DeviceBuffer | undefined;
  if (reused !== undefined) {
    if (a.numTokens !== undefined) fail('numTokens is the route\'s when a route is reused');
    tokens = reused.tokenCap;
  } else if (typeof a.numTokens === 'number') {
    if (!isInt(a.numTokens, 0, s.tokenCap)) fail(`numTokens must be an integer in 0..${s.tokenCap} (maxTokensPerRank), got ${shown(a.numTokens)}`);
    tokens = a.numTokens;
  } else if (a.numTokens !== undefined) {
    if (typeof a.numTokens !== 'object' || a.numTokens === null) fail(`numTokens must be an integer in 0..${s.tokenCap} (maxTokensPerRank) or an int64[1] device buffer, got ${shown(a.numTokens)}`);
    buffer('numTokens (int64[1])', a.numTokens, 8);
    numTokens = a.numTokens;
    tokens = cap;
  }
  for (const [what, rows] of held) if (rows < tokens) fail(`${what} holds ${rows} ${rows === 1 ? 'token' : 'tokens'}, the call has ${tokens}`);
  buffer('recvX', a.recvX, rowBytes);
  if (!a.recvX.symmetric) fail('recvX must be a symmetric buffer (allocSymmetric): peers write it');
  const recvCap = Math.min(s.recvRows, Math.floor(a.recvX.bytes / rowBytes));
  const compact = s.layout === 'compact';
  if (a.recvTopkIdx !== undefined) {
    if (!compact) fail('recvTopkIdx is for the compact layout (expanded rows are grouped by expert: expertCounts says which)');
    buffer(`recvTopkIdx (${type}[recvX rows][K])`, a.recvTopkIdx, recvCap * K * idxBytes);
  }
  if (a.recvTopkWeights !== undefined) {
    if (a.topkWeights === undefined) fail('recvTopkWeights needs topkWeights');
    buffer(compact ? 'recvTopkWeights (f32[recvX rows][K])' : 'recvTopkWeights (f32[recvX rows])', a.recvTopkWeights, recvCap * (compact ? K : 1) * 4);
  }
  buffer('expertCounts (int64[E])', a.expertCounts, 8 * E);
  if (a.expertOffsets !== undefined) {
    if (compact) fail('expertOffsets is for the expanded layout');
    buffer('expertOffsets (int64[E])', a.expertOffsets, 8 * E);
  }
  if (a.numRecvRows !== undefined) buffer('numRecvRows (int64[1])', a.numRecvRows, 8);
  // Peers write recvX while this rank's call still reads its inputs (on cuda the exchange reads x
  // in place) and before it writes its counts: no other buffer of the call may be recvX.
  const r = a.recvX;
  const aliased = r === a.x ? 'x' : r === a.topkIdx ? 'topkIdx' : r === a.topkWeights ? 'topkWeights' : r === numTokens ? 'numTokens'
    : r === a.recvTopkIdx ? 'recvTopkIdx' : r === a.recvTopkWeights ? 'recvTopkWeights' : r === a.expertCounts ? 'expertCounts' : r === a.expertOffsets ? 'expertOffsets' : r === a.numRecvRows ? 'numRecvRows' : undefined;
  if (aliased !== undefined) fail(`recvX is also ${aliased}: peers write recvX while the call uses ${aliased}; give each its own buffer`);
  const tokenCap = reused?.tokenCap ?? (numTokens ? cap : tokens);
  return { idx64: type === 'int64', tokens, tokenCap, numTokens, limit, recvCap };
}

/** What combine's sizes come from: the route's dispatch (its tokens, or with a device count the most it could carry, and its recvX). */
export interface CombineRoute {
  tokenCap: number;
  recvCap: number;
  deviceCount: boolean;
  limit: TokenLimit;
}

export function checkCombine(ctx: CheckContext, s: TokenShape, a: MoeCombineArgs, route: CombineRoute): number {
  const fail = (what: string): never => {
    throw new UsageError(`rank ${ctx.rank}: MoE combine: ${what}`);
  };
  checkStream(ctx, a.stream);
  const dtype = DTYPES[a.dtype];
  if (dtype === undefined || !Object.hasOwn(DTYPES, a.dtype)) fail(`dtype must be 'bf16', 'f16' or 'f32', got ${shown(a.dtype, 'string')}`);
  if (s.combineRowBytes % dtype.bytes !== 0) fail(`combineRowBytes ${s.combineRowBytes} is not a whole number of ${a.dtype} elements`);
  const rowOut = s.combineRowBytes;
  // The sizes come from the route (its recvX and T), not from this call: each message says which, and why.
  const sized = (what: string, buf: DeviceBuffer | undefined, bytes: number, why: () => string): void => {
    checkBuffer(ctx, `MoE combine: ${what}`, buf);
    if (buf!.bytes < bytes) fail(`${what} holds ${buf!.bytes} bytes, needs at least ${bytes}: ${why()}`);
  };
  const T = route.tokenCap;
  // With a device count the host never learns T: out, bias and weights must hold the most the dispatch could have carried.
  const tokens = (): string => route.deviceCount
    ? `T = ${T}, the most tokens the route's dispatch could carry (${limitText(route.limit, T)}): its numTokens was on the device, read only when it ran, so combine needs room for all ${T}`
    : `T = ${T}, the route's dispatch's tokens`;
  sized('y ([recvX rows][combineRowBytes])', a.y, route.recvCap * rowOut, () => `${route.recvCap} rows of ${rowOut} bytes (y has the layout of the route's recvX: its rows, at most the group's recvRows)`);
  sized(`out (${a.dtype}[T][H])`, a.out, T * rowOut, () => `T rows of ${rowOut} bytes, ${tokens()}`);
  if (a.bias !== undefined) sized(`bias (${a.dtype}[T][H])`, a.bias, T * rowOut, () => `T rows of ${rowOut} bytes, ${tokens()}`);
  if (a.topkWeights !== undefined) {
    if (s.layout === 'compact') fail('topkWeights is for the expanded layout (compact rows arrive weighted and summed by their rank)');
    sized('topkWeights (f32[T][K])', a.topkWeights, T * s.topk * 4, () => `T rows of ${s.topk} weights, ${tokens()}`);
  }
  return rowOut / dtype.bytes;
}
