// Host-side argument checks shared by every backend: misuse throws UsageError before anything is
// queued, so a bad call on one rank never leaves its peers waiting on a collective half-issued.
// Runs on every call, so it only compares; it allocates nothing unless it throws (a plan's
// creation excepted: once per routing).
import {
  MAX_EXPERTS_PER_RANK,
  type AllReduceArgs,
  type AllToAllV2dArgs,
  type AllToAllV2dOffsetArgs,
  type AllToAllVArgs,
  type BarrierOptions,
  type DeviceBuffer,
  type Lane,
  type PlanCapacity,
  type PeerCopyArgs,
  type PlanAllToAllV2dArgs,
  type PlanAllToAllV2dOffsetArgs,
  type PlanAllToAllVArgs,
  type PlanMoveArgs,
  type Stream,
} from '../backends/backend.js';
import { shown, UsageError } from '../errors.js';
import type { ExchangeKind } from './exchange-rules.js';
import { ELEMENT_BYTES } from './reduce.js';
import { checkPlanShape } from '../tune/plan.js';
import { timeoutProblem } from '../world/options.js';

/** majorAlign at most: 2^20 rows per expert block, far past any GEMM tile, keeps padding sums small. */
export const MAX_MAJOR_ALIGN = 1 << 20;

/** What the checks need to know about the calling communicator. */
export interface CheckContext {
  readonly rank: number;
  readonly worldSize: number;
  readonly laneCount: number;
  /** True when `buf` was allocated by this communicator (not a peer's, not another job's). */
  owns(buf: DeviceBuffer): boolean;
  /** True when `lane` came from this communicator's lane(). */
  ownsLane(lane: Lane): boolean;
  /**
   * True for a stream this backend made (cpu: one of its plain objects, by identity; cuda and nccl:
   * a CudaStream), so a made-up one is refused by name, not met in the driver or ignored.
   */
  knowsStream?(stream: Stream): boolean;
}

/** capture()'s stream and function, checked before capturing: on cuda `fn` runs at once, on cpu at each launch. */
export function checkCapture(ctx: CheckContext, stream: Stream | undefined, fn: unknown): void {
  if (typeof fn !== 'function') throw new UsageError(`rank ${ctx.rank}: capture takes the function that makes the calls to record, got ${shown(fn)}`);
  // The capture ends when fn returns: what an async fn queues after its first await is not recorded.
  if (fn.constructor?.name === 'AsyncFunction') throw new UsageError(`rank ${ctx.rank}: capture takes a plain function, not an async one: on cuda the calls it made after an await would not be in the graph`);
  if (stream == null) throw new UsageError(`rank ${ctx.rank}: capture needs the stream to record on (comm.lane(i).stream)`);
  checkStream(ctx, stream);
}

/**
 * Calls a graph may hold on one lane: each call's outcome is kept in a ring of this many records
 * (kernels/config.cuh A2AV_STATUS_RING). cuda refuses more at capture; cpu, whose closure runs at
 * launch, at the call past it.
 */
export const REPLAY_CALLS_PER_LANE = 256;
export const TOO_MANY_REPLAY_CALLS = (rank: number, has: number | 'more'): string =>
  `rank ${rank}: a graph may hold at most ${REPLAY_CALLS_PER_LANE} calls per lane (each call's outcome is kept that long); this one has ${has}`;

/** A replay launched inside capture() (cuda), or inside a replayed closure (cpu, where the closure runs at launch). */
export const LAUNCH_IN_CAPTURE = (rank: number): string =>
  `rank ${rank}: a replay cannot be launched inside capture(): capture its calls in the one closure, or launch it before or after`;

/**
 * An exchange plan's close() inside capture(): a graph may hold the plan (its exchange and moves),
 * and on cuda close() waits for the plan's lane, which a capture cannot do.
 */
export const PLAN_CLOSE_IN_CAPTURE = (rank: number): string =>
  `rank ${rank}: an exchange plan cannot be closed inside capture(): close it after the replay's last launch (a plan made in the closure belongs to the graph)`;

/** The bytes of a write: an array or ArrayBuffer has no byteLength, and the range check would say "undefined bytes". */
export function checkWriteData(ctx: CheckContext, data: unknown): asserts data is ArrayBufferView {
  if (ArrayBuffer.isView(data)) return;
  const whole = data instanceof ArrayBuffer || (typeof SharedArrayBuffer !== 'undefined' && data instanceof SharedArrayBuffer);
  const hint = whole ? ` (wrap it in a view: new Uint8Array(buffer))` : '';
  throw new UsageError(`rank ${ctx.rank}: write takes a typed array or DataView of the bytes, got ${whole ? `an ${data.constructor.name}` : shown(data)}${hint}`);
}

/** comm.lane(index): an integer index of one of its lanes (an array lookup alone would take '0', or 'length'). */
export function checkLaneIndex(ctx: Pick<CheckContext, 'rank' | 'laneCount'>, index: unknown): asserts index is number {
  if (typeof index !== 'number' || !Number.isInteger(index)) {
    throw new UsageError(`rank ${ctx.rank}: lane index must be an integer from 0 to ${ctx.laneCount - 1}, got ${shown(index)}`);
  }
  if (index < 0 || index >= ctx.laneCount) throw new UsageError(`rank ${ctx.rank}: lane ${index} out of range (this communicator has ${ctx.laneCount})`);
}

/** A copy's byte count, before either buffer's range is checked against it (which would blame the destination). */
export function checkCopyBytes(rank: number, bytes: number): void {
  if (!Number.isSafeInteger(bytes) || bytes < 0) throw new UsageError(`rank ${rank}: copy: byte count must be a non-negative integer, got ${shown(bytes)}`);
}

/** Comm.copy within one buffer over overlapping ranges (undefined for the copy engine, and for memcpy): refused. */
export function checkCopyOverlap(rank: number, dst: DeviceBuffer, src: DeviceBuffer, bytes: number, dstOffset: number, srcOffset: number): void {
  if (dst === src && dstOffset !== srcOffset && Math.abs(dstOffset - srcOffset) < bytes) {
    throw new UsageError(`rank ${rank}: copy within one buffer of overlapping ranges (${bytes} bytes from offset ${srcOffset} to ${dstOffset})`);
  }
}

/** Checks one buffer argument: present, ours, not freed, at least `minBytes` long. */
export function checkBuffer(ctx: CheckContext, what: string, buf: DeviceBuffer | undefined, minBytes = 0): void {
  if (buf === undefined || buf === null || typeof buf !== 'object') {
    throw new UsageError(`rank ${ctx.rank}: ${what} is missing`);
  }
  if (!ctx.owns(buf)) throw new UsageError(`rank ${ctx.rank}: ${what} was not allocated by this communicator`);
  if (buf.freed) throw new UsageError(`rank ${ctx.rank}: ${what} was freed`);
  if (buf.bytes < minBytes) {
    // The world size only where the label's shape counts ranks (int64[W*E]): an allReduce's size does not depend on it.
    const world = /\bW\b/.test(what) ? ` (W = ${ctx.worldSize})` : '';
    throw new UsageError(`rank ${ctx.rank}: ${what} holds ${buf.bytes} bytes, needs at least ${minBytes}${world}`);
  }
}

/**
 * A call's `stream`, where given, must be a Stream (a lane's, or one the library made): a Lane or a
 * handle passed in its place would otherwise reach the driver (cuda) or be ignored (cpu).
 */
export function checkStream(ctx: Pick<CheckContext, 'rank' | 'knowsStream'>, stream: Stream | undefined): void {
  // null as undefined (the default), as the backends read it.
  if (stream === undefined || stream === null) return;
  if (typeof stream === 'object' && (stream as { kind?: unknown }).kind === 'stream') {
    // On cpu a stream orders nothing, so a made-up one would pass here and fail only on a GPU.
    if (ctx.knowsStream && !ctx.knowsStream(stream)) throw new UsageError(`rank ${ctx.rank}: stream is not one this backend made (comm.lane(i).stream): a stream object made up, or of another backend`);
    return;
  }
  const lane = typeof stream === 'object' && 'index' in stream && 'stream' in stream;
  throw new UsageError(`rank ${ctx.rank}: stream must be a Stream (comm.lane(i).stream), got ${lane ? 'a Lane (pass it as lane, or its .stream)' : shown(stream)}`);
}

/** handle.waitOn(stream): the stream to order after the call, required (there is no default to order). */
export function checkWaitOn(rank: number, stream: unknown, ctx: Pick<CheckContext, 'knowsStream'> = {}): void {
  if (stream === undefined || stream === null) throw new UsageError(`rank ${rank}: waitOn needs the stream to order after the call (comm.lane(i).stream, or a stream of yours)`);
  checkStream({ rank, knowsStream: ctx.knowsStream }, stream as Stream);
}

/** Resolves the lane argument (default lane 0) and checks it belongs to this communicator; checks the call's stream too. */
export function checkLane(ctx: CheckContext, lane: Lane | undefined, stream?: Stream): number {
  checkStream(ctx, stream);
  if (lane === undefined) return 0;
  if (typeof lane !== 'object' || lane === null) {
    throw new UsageError(`rank ${ctx.rank}: lane must be a Lane (comm.lane(i)), got ${shown(lane)}`);
  }
  const index = lane.index;
  if (!Number.isInteger(index) || index < 0 || index >= ctx.laneCount) {
    throw new UsageError(`rank ${ctx.rank}: lane ${index} out of range (this communicator has ${ctx.laneCount})`);
  }
  if (!ctx.ownsLane(lane)) throw new UsageError(`rank ${ctx.rank}: lane ${index} is not one of this communicator's lanes (pass comm.lane(${index}))`);
  return index;
}

/** Names whose list must hold every key of T: a key added to the type and not here fails to compile. */
type Complete<T, K extends readonly string[]> = [Exclude<keyof T & string, K[number]>] extends [never] ? K : never;

/** The names a call takes, as a set, checked complete against the call's argument type. */
export function argNames<T>(): <const K extends readonly (keyof T & string)[]>(names: Complete<T, K>) => ReadonlySet<string> {
  return (names) => new Set<string>(names);
}

export const ALL_TO_ALL_V_ARGS = argNames<AllToAllVArgs>()(['input', 'output', 'inSplits', 'outSplitsOffsets', 'rowBytes', 'lane', 'stream', 'sizeHintBytes', 'plan', 'maxBlocks']);
export const ALL_TO_ALL_V2D_ARGS = argNames<AllToAllV2dArgs>()(['input', 'output', 'inSplits', 'outSplitsOffsets', 'expertsPerRank', 'rowBytes', 'majorAlign', 'lane', 'stream', 'sizeHintBytes', 'maxBlocks']);
export const ALL_TO_ALL_V2D_OFFSET_ARGS = argNames<AllToAllV2dOffsetArgs>()(['input', 'output', 'inSplitsOffsets', 'outSplitsOffsets', 'expertsPerRank', 'rowBytes', 'lane', 'stream', 'sizeHintBytes', 'maxBlocks']);
export const ALL_REDUCE_ARGS = argNames<AllReduceArgs>()(['input', 'output', 'count', 'dtype', 'op', 'lane', 'stream']);
export const PLAN_MOVE_ARGS = argNames<PlanMoveArgs>()(['input', 'output', 'rowBytes', 'stream']);
export const PEER_COPY_ARGS = argNames<PeerCopyArgs>()(['dst', 'dstOffset', 'peer', 'src', 'srcOffset', 'bytes', 'stream']);
const PLAN_ARGS: Record<ExchangeKind, ReadonlySet<string>> = {
  '1d': argNames<PlanAllToAllVArgs>()(['inSplits', 'outSplitsOffsets', 'lane', 'stream', 'maxBlocks', 'inputRows', 'outputRows']),
  dispatch: argNames<PlanAllToAllV2dArgs>()(['inSplits', 'outSplitsOffsets', 'expertsPerRank', 'majorAlign', 'lane', 'stream', 'maxBlocks', 'inputRows', 'outputRows']),
  combine: argNames<PlanAllToAllV2dOffsetArgs>()(['inSplitsOffsets', 'outSplitsOffsets', 'expertsPerRank', 'lane', 'stream', 'maxBlocks', 'inputRows', 'outputRows']),
};

/**
 * A call takes one object of named arguments: without it, reading the first field would be a bare
 * TypeError rather than a refusal that names the call. With `names`, a key it does not take is
 * refused too: a misspelt option (`majoralign`) would otherwise be dropped and the call run
 * without it.
 */
export function checkArgsObject(ctx: CheckContext, call: string, args: unknown, names?: ReadonlySet<string>): void {
  if (args === null || typeof args !== 'object' || Array.isArray(args)) {
    throw new UsageError(`rank ${ctx.rank}: ${call} takes one object of named arguments, got ${Array.isArray(args) ? 'an array' : shown(args)}`);
  }
  if (names === undefined) return;
  for (const key in args) if (Object.hasOwn(args, key) && !names.has(key)) unknownArg(ctx, call, key, names);
}

function unknownArg(ctx: CheckContext, call: string, key: string, names: ReadonlySet<string>): never {
  const near = [...names].find((n) => n.toLowerCase() === key.toLowerCase() || n.toLowerCase().startsWith(key.toLowerCase()) || key.toLowerCase().startsWith(n.toLowerCase()));
  const hint = near === undefined ? '' : ` (did you mean '${near}'?)`;
  throw new UsageError(`rank ${ctx.rank}: ${call} has no argument '${key}'${hint}; it takes ${[...names].join(', ')}`);
}

/** Checks an allToAllV call; returns the lane index to run it on. */
export function checkAllToAllV(ctx: CheckContext, args: AllToAllVArgs): number {
  checkArgsObject(ctx, 'allToAllV', args, ALL_TO_ALL_V_ARGS);
  checkRowBytes(ctx, args.rowBytes);
  const w = ctx.worldSize;
  // Constant labels: this runs on every call and must not build strings unless it throws.
  checkBuffer(ctx, 'inSplits (int64[W])', args.inSplits, 8 * w);
  checkBuffer(ctx, 'outSplitsOffsets (int64[2][W])', args.outSplitsOffsets, 16 * w);
  checkPayload(ctx, args.input, args.output, args.inSplits, args.outSplitsOffsets);
  checkMaxBlocks(ctx, args.maxBlocks);
  checkSizeHint(ctx, args.sizeHintBytes);
  if (args.plan !== undefined) {
    try {
      checkPlanShape(args.plan);
    } catch (err) {
      // Named by rank, as every other refusal of a call is: ranks as processes print to one terminal.
      throw err instanceof UsageError ? new UsageError(`rank ${ctx.rank}: ${err.message}`, { cause: err }) : err;
    }
  }
  return checkLane(ctx, args.lane, args.stream);
}

function checkMaxBlocks(ctx: CheckContext, maxBlocks: number | undefined): void {
  if (maxBlocks !== undefined && (!Number.isSafeInteger(maxBlocks) || maxBlocks < 1)) {
    throw new UsageError(`rank ${ctx.rank}: maxBlocks must be a positive integer, got ${shown(maxBlocks)}`);
  }
}

// The hint picks the launch plan on cuda, where NaN would become a grid of NaN blocks; any other
// wrong guess stays correct (Infinity: the whole input).
function checkSizeHint(ctx: CheckContext, bytes: number | undefined): void {
  if (bytes !== undefined && (typeof bytes !== 'number' || !(bytes >= 0))) {
    throw new UsageError(`rank ${ctx.rank}: sizeHintBytes must be a number of bytes >= 0, got ${shown(bytes)}`);
  }
}

/** Checks an allToAllV2d (dispatch) call; returns the lane index to run it on. */
export function checkAllToAllV2d(ctx: CheckContext, args: AllToAllV2dArgs): number {
  checkArgsObject(ctx, 'allToAllV2d', args, ALL_TO_ALL_V2D_ARGS);
  checkRowBytes(ctx, args.rowBytes);
  const n = ctx.worldSize * checkExperts(ctx, args.expertsPerRank);
  checkMajorAlign(ctx, args.majorAlign);
  checkBuffer(ctx, 'inSplits (int64[W*E])', args.inSplits, 8 * n);
  checkBuffer(ctx, 'outSplitsOffsets (int64[2][E*W])', args.outSplitsOffsets, 16 * n);
  checkPayload(ctx, args.input, args.output, args.inSplits, args.outSplitsOffsets);
  checkMaxBlocks(ctx, args.maxBlocks);
  checkSizeHint(ctx, args.sizeHintBytes);
  return checkLane(ctx, args.lane, args.stream);
}

/** Checks an allToAllV2dOffset (combine) call; returns the lane index to run it on. */
export function checkAllToAllV2dOffset(ctx: CheckContext, args: AllToAllV2dOffsetArgs): number {
  checkArgsObject(ctx, 'allToAllV2dOffset', args, ALL_TO_ALL_V2D_OFFSET_ARGS);
  checkRowBytes(ctx, args.rowBytes);
  const n = ctx.worldSize * checkExperts(ctx, args.expertsPerRank);
  checkBuffer(ctx, 'inSplitsOffsets (int64[2][E*W])', args.inSplitsOffsets, 16 * n);
  checkBuffer(ctx, 'outSplitsOffsets (int64[2][W*E])', args.outSplitsOffsets, 16 * n);
  checkPayload(ctx, args.input, args.output, args.inSplitsOffsets, args.outSplitsOffsets, 'inSplitsOffsets');
  checkMaxBlocks(ctx, args.maxBlocks);
  checkSizeHint(ctx, args.sizeHintBytes);
  return checkLane(ctx, args.lane, args.stream);
}

/**
 * Checks an allReduce call; returns the lane index to run it on. Only what every backend shares:
 * sizes, dtype, op, lane. Whether ranks agree on count and dtype is not checked here (the host sees
 * only its own call).
 */
export function checkAllReduce(ctx: CheckContext, args: AllReduceArgs): number {
  checkArgsObject(ctx, 'allReduce', args, ALL_REDUCE_ARGS);
  const { count, dtype, op } = args;
  if (!Number.isSafeInteger(count) || count < 0) {
    throw new UsageError(`rank ${ctx.rank}: allReduce count must be a non-negative integer${pastSafeBound(count)}, got ${shown(count)}`);
  }
  if (dtype !== 'f32' && dtype !== 'bf16') throw new UsageError(`rank ${ctx.rank}: allReduce dtype must be 'f32' or 'bf16', got ${shown(dtype, 'string')}`);
  if (op !== 'sum') throw new UsageError(`rank ${ctx.rank}: allReduce op must be 'sum', got ${shown(op, 'string')}`);
  const bytes = count * ELEMENT_BYTES[dtype];
  checkBuffer(ctx, 'allReduce input', args.input, bytes);
  checkBuffer(ctx, 'allReduce output', args.output, bytes);
  return checkLane(ctx, args.lane, args.stream);
}

/** What an exchange plan's creation takes, whichever kind (the fields a kind lacks are absent). */
export interface PlanCheckArgs extends PlanCapacity {
  inSplits?: DeviceBuffer;
  inSplitsOffsets?: DeviceBuffer;
  outSplitsOffsets: DeviceBuffer;
  expertsPerRank?: number;
  majorAlign?: number;
  lane?: Lane;
  stream?: Stream;
  maxBlocks?: number;
}

/** Checks the creation of an exchange plan of `kind`; returns the lane index to run it on. */
export function checkPlan(ctx: CheckContext, kind: ExchangeKind, args: PlanCheckArgs): number {
  checkArgsObject(ctx, kind === '1d' ? 'planAllToAllV' : kind === 'dispatch' ? 'planAllToAllV2d' : 'planAllToAllV2dOffset', args, PLAN_ARGS[kind]);
  for (const [what, rows] of [['inputRows', args.inputRows], ['outputRows', args.outputRows]] as const) {
    if (!Number.isSafeInteger(rows) || rows < 0) throw new UsageError(`rank ${ctx.rank}: plan ${what} must be a non-negative integer, got ${shown(rows)}`);
  }
  const n = ctx.worldSize * (kind === '1d' ? 1 : checkExperts(ctx, args.expertsPerRank));
  if (kind === 'dispatch') checkMajorAlign(ctx, args.majorAlign);
  checkMaxBlocks(ctx, args.maxBlocks);
  if (kind === 'combine') checkBuffer(ctx, 'inSplitsOffsets (int64[2][E*W])', args.inSplitsOffsets, 16 * n);
  else checkBuffer(ctx, kind === '1d' ? 'inSplits (int64[W])' : 'inSplits (int64[W*E])', args.inSplits, 8 * n);
  checkBuffer(ctx, kind === 'dispatch' ? 'outSplitsOffsets (int64[2][E*W])' : 'outSplitsOffsets (int64[2][W*E])', args.outSplitsOffsets, 16 * n);
  const splitsIn = kind === 'combine' ? 'inSplitsOffsets' : 'inSplits';
  if (args[splitsIn] === args.outSplitsOffsets) {
    throw new UsageError(`rank ${ctx.rank}: the plan's ${splitsIn} and outSplitsOffsets are the same buffer (give each its own)`);
  }
  return checkLane(ctx, args.lane, args.stream);
}

/** What a plan's moves are checked against: its capacity and its own splits buffers. */
export interface PlanBuffers extends PlanCapacity {
  /** 1d, dispatch: inSplits; combine: inSplitsOffsets. */
  splits: DeviceBuffer;
  splitsName: 'inSplits' | 'inSplitsOffsets';
  outSplitsOffsets: DeviceBuffer;
  /** The calls' SM budget on cuda (checked with the plan). */
  maxBlocks?: number;
}

/** A checked plan's PlanBuffers. */
export function planBuffers(args: PlanCheckArgs): PlanBuffers {
  const splitsName = args.inSplits !== undefined ? 'inSplits' : 'inSplitsOffsets';
  return { inputRows: args.inputRows, outputRows: args.outputRows, splits: args[splitsName]!, splitsName, outSplitsOffsets: args.outSplitsOffsets, maxBlocks: args.maxBlocks };
}

/** Checks one payload of an exchange plan against the plan's capacity and buffers. */
export function checkPlanMove(ctx: CheckContext, plan: PlanBuffers, args: PlanMoveArgs): void {
  checkArgsObject(ctx, 'plan.move', args, PLAN_MOVE_ARGS);
  checkStream(ctx, args.stream);
  checkRowBytes(ctx, args.rowBytes);
  checkPayload(ctx, args.input, args.output);
  // Peers write rows into output: into the plan's splits, a replayed exchange would read rows as
  // splits; into its offsets, the combine that follows would.
  if (args.output === plan.splits || args.output === plan.outSplitsOffsets) {
    const name = args.output === plan.outSplitsOffsets ? 'outSplitsOffsets' : plan.splitsName;
    throw new UsageError(`rank ${ctx.rank}: plan.move output is the plan's ${name}: peers write rows into output (give each its own)`);
  }
  checkRows(ctx, 'input', args.input, plan.inputRows, args.rowBytes);
  checkRows(ctx, 'output', args.output, plan.outputRows, args.rowBytes);
}

function checkRows(ctx: CheckContext, what: string, buf: DeviceBuffer, rows: number, rowBytes: number): void {
  if (buf.bytes < rows * rowBytes) {
    throw new UsageError(`rank ${ctx.rank}: plan ${what} holds ${buf.bytes} bytes, needs the plan's ${rows} rows of ${rowBytes} bytes`);
  }
}

/**
 * What a refusal of `v` as a count adds where `v` reads as a positive integer but is past 2^53 - 1,
 * no longer held exactly: the bound. Else nothing.
 */
export function pastSafeBound(v: unknown): string {
  return Number.isInteger(v) && (v as number) > 0 ? ' at most 2^53-1 (Number.MAX_SAFE_INTEGER)' : '';
}

function checkRowBytes(ctx: CheckContext, rowBytes: number): void {
  if (!Number.isSafeInteger(rowBytes) || rowBytes < 1) {
    throw new UsageError(`rank ${ctx.rank}: rowBytes must be a positive integer${pastSafeBound(rowBytes)}, got ${shown(rowBytes)}`);
  }
}

function checkExperts(ctx: CheckContext, experts: number | undefined): number {
  if (!Number.isInteger(experts) || experts! < 1 || experts! > MAX_EXPERTS_PER_RANK) {
    throw new UsageError(`rank ${ctx.rank}: expertsPerRank must be an integer in 1..${MAX_EXPERTS_PER_RANK}, got ${shown(experts)}`);
  }
  return experts!;
}

function checkMajorAlign(ctx: CheckContext, align: number | undefined): void {
  if (align === undefined) return;
  if (!Number.isInteger(align) || align < 1 || align > MAX_MAJOR_ALIGN) {
    throw new UsageError(`rank ${ctx.rank}: majorAlign must be an integer in 1..${MAX_MAJOR_ALIGN}, got ${shown(align)}`);
  }
}

/**
 * The payload buffers: ours, a symmetric output that is neither the input nor a splits buffer.
 * `splitsName` names `splits` in the messages: the call's argument (combine's is inSplitsOffsets).
 */
function checkPayload(ctx: CheckContext, input: DeviceBuffer, output: DeviceBuffer, splits?: DeviceBuffer, outSplitsOffsets?: DeviceBuffer, splitsName = 'inSplits'): void {
  checkBuffer(ctx, 'input', input);
  checkBuffer(ctx, 'output', output);
  if (!output.symmetric) {
    throw new UsageError(`rank ${ctx.rank}: output must be a symmetric buffer (allocSymmetric) so peers can write it`);
  }
  if (output === input) throw new UsageError(`rank ${ctx.rank}: output and input are the same buffer`);
  if (splits === undefined) return;
  if (output === splits || output === outSplitsOffsets) {
    throw new UsageError(`rank ${ctx.rank}: output is also ${output === splits ? splitsName : 'outSplitsOffsets'}: peers write rows into output (give each its own)`);
  }
  // The call writes the offsets it receives while its own kernels (and a graph's next replay) may
  // still read the splits: one buffer for both would read half-overwritten splits.
  if (splits === outSplitsOffsets) throw new UsageError(`rank ${ctx.rank}: ${splitsName} and outSplitsOffsets are the same buffer (give each its own)`);
  // Likewise the offsets would land in input while its rows are still being sent.
  if (input === outSplitsOffsets) throw new UsageError(`rank ${ctx.rank}: input and outSplitsOffsets are the same buffer: the call writes the offsets while it sends input's rows (give each its own)`);
}

/**
 * gatherOnHost()'s values: an array of numbers, refused otherwise on the calling rank (a BigInt
 * failed inside JSON there while its peers waited out the set-up floor). They travel as JSON, so
 * those it has no form for (NaN, ±Infinity, -0) go as their names and come back as they were.
 */
export function gatherWords(rank: number, values: unknown): (number | string)[] {
  if (!Array.isArray(values)) throw new UsageError(`rank ${rank}: gatherOnHost takes an array of numbers, got ${shown(values)}`);
  const bad = values.findIndex((v) => typeof v !== 'number');
  if (bad >= 0) throw new UsageError(`rank ${rank}: gatherOnHost takes an array of numbers; item ${bad} is ${shown(values[bad])}`);
  return (values as number[]).map((v) => (Object.is(v, -0) ? '-0' : Number.isFinite(v) ? v : String(v)));
}

/** A rank's values from gatherWords' form. */
export function gatheredValues(words: readonly (number | string)[]): number[] {
  return words.map(Number);
}

/** barrier()'s options: only timeoutMs, a positive number of ms. */
export function checkBarrier(rank: number, options: BarrierOptions | undefined): void {
  if (options === undefined) return;
  if (typeof options !== 'object' || options === null) throw new UsageError(`rank ${rank}: barrier() takes { timeoutMs }, got ${shown(options)}`);
  const unknown = Object.keys(options).filter((k) => k !== 'timeoutMs');
  if (unknown.length > 0) throw new UsageError(`rank ${rank}: barrier() takes { timeoutMs }; unknown option ${unknown.map((k) => `'${k}'`).join(', ')}`);
  const t = options.timeoutMs;
  const why = t === undefined ? undefined : timeoutProblem(t, 'barrier timeoutMs');
  if (why !== undefined) throw new UsageError(`rank ${rank}: ${why}`);
}
