// The one interface every backend implements. A Comm is one rank's view of a job (SPMD: every rank
// runs the same program and makes the same collective calls in the same order).

import type { LaunchPlan } from '../tune/plan.js';
import type { Store } from '../world/store.js';

export type BackendName = 'cpu' | 'cuda' | 'nccl';

/** Memory owned by one rank: GPU memory on `cuda`, shared memory on `cpu`. */
export interface DeviceBuffer {
  readonly bytes: number;
  /** Collective allocations are addressable by every peer; only they may be a collective's output. */
  readonly symmetric: boolean;
  /** Index of the collective allocation (same on every rank), -1 for local buffers. */
  readonly symmetricId: number;
  readonly freed: boolean;
}

/** An ordered queue of work on one rank (a CUDA stream; on CPU, calls run in the caller's thread). */
export interface Stream {
  readonly kind: 'stream';
}

/** An independent channel of collectives: its own stream, signal-pad region and counters. */
export interface Lane {
  readonly index: number;
  readonly stream: Stream;
}

/**
 * What a collective returns: a point in stream order that the host or another stream can wait on.
 * A handle reports its own call's outcome and no other's: a refused call's handle throws its
 * SplitsError, a good call's handle never throws another call's error, in whatever order (or
 * whether at all) the handles are waited. A handle can be waited any number of times.
 */
export interface Handle {
  /**
   * Blocks the host until the work is done, then throws its error (SplitsError; TimeoutError, after
   * which the communicator is aborted). After it returns, `read` sees what the work wrote.
   */
  wait(): void;
  /** Makes `stream` wait for the work, on the device, with no host synchronisation. */
  waitOn(stream: Stream): void;
}

export interface AllToAllVArgs {
  /** Rows to send, peer by peer, contiguous. Any buffer of this rank. */
  input: DeviceBuffer;
  /** Rows received, grouped by source rank in rank order. Must be symmetric. */
  output: DeviceBuffer;
  /** int64[W]: rows to send to each peer. Read on the device when the call runs. */
  inSplits: DeviceBuffer;
  /** int64[2][W]: written on the device: row 0 = rows received from each source, row 1 = exclusive prefix sum. */
  outSplitsOffsets: DeviceBuffer;
  /** Bytes per row, >= 1; the same on every rank. */
  rowBytes: number;
  /** Default lane 0. */
  lane?: Lane;
  /** The caller's stream: the collective starts after the work queued there. */
  stream?: Stream;
  /**
   * Bytes this rank expects to send per call (the splits stay on the device, so the host cannot
   * know): picks the default launch plan. Default: all of `input`. Any number >= 0 stays correct
   * (NaN or a negative one is a UsageError).
   */
  sizeHintBytes?: number;
  /** Overrides the launch plan (GPU backends; validated, ignored on CPU). */
  plan?: LaunchPlan;
  /**
   * At most this many thread blocks for this call on the cuda backend (its data grid included): an
   * SM budget, so the collective leaves SMs to compute running beside it. Slower, never wrong.
   * Ignored by cpu and nccl.
   */
  maxBlocks?: number;
}

/**
 * MoE dispatch (PyTorch's all_to_all_vdev_2d): rows go to the ranks holding their experts and land
 * grouped by expert. W ranks with E experts each; counts and offsets in rows, int64, on the device.
 */
export interface AllToAllV2dArgs {
  /** Rows to send, packed rank-major then expert: all rows for (peer 0, expert 0), (0, 1), ... */
  input: DeviceBuffer;
  /** Rows received, expert-major: for each local expert its rows from rank 0..W-1. Symmetric. */
  output: DeviceBuffer;
  /** int64[W·E]: index peer·E + e = rows this rank sends to local expert e of peer. */
  inSplits: DeviceBuffer;
  /**
   * int64[2][E·W], written on the device: index e·W + src, row 0 = rows received from src for my
   * expert e, row 1 = where they start in `output`.
   */
  outSplitsOffsets: DeviceBuffer;
  /** E, the same on every rank; at most MAX_EXPERTS_PER_RANK. */
  expertsPerRank: number;
  rowBytes: number;
  /**
   * Each expert's block starts at a multiple of this many rows, and an expert that receives nothing
   * still takes this many (grouped GEMMs reject empty groups); row 0 keeps the true counts. Default 1.
   */
  majorAlign?: number;
  lane?: Lane;
  stream?: Stream;
  /** As in AllToAllVArgs: bytes this rank usually sends, to size the launch. */
  sizeHintBytes?: number;
  /** As in AllToAllVArgs: at most this many thread blocks for the call on cuda (an SM budget). */
  maxBlocks?: number;
}

/**
 * MoE combine (PyTorch's all_to_all_vdev_2d_offset): dispatch's reverse permutation, no reduction.
 * Dispatch then combine gives back the input exactly.
 */
export interface AllToAllV2dOffsetArgs {
  /** Expert-major rows, as dispatch left them (padding between chunks is not sent). */
  input: DeviceBuffer;
  /** Rank-major rows: for each peer, the rows returned by each of its experts, packed. Symmetric. */
  output: DeviceBuffer;
  /** int64[2][E·W]: dispatch's outSplitsOffsets as it is (index e·W + dst: rows, where they start in `input`). */
  inSplitsOffsets: DeviceBuffer;
  /** int64[2][W·E], written on the device: index peer·E + e: rows returned by peer's expert e, where they start. */
  outSplitsOffsets: DeviceBuffer;
  expertsPerRank: number;
  rowBytes: number;
  lane?: Lane;
  stream?: Stream;
  sizeHintBytes?: number;
  /** As in AllToAllVArgs: at most this many thread blocks for the call on cuda (an SM budget). */
  maxBlocks?: number;
}

/** Element types allReduce sums. bf16 is summed in f32 and rounded once (see AllReduceArgs). */
export type ReduceDtype = 'f32' | 'bf16';
/** Reductions allReduce does. */
export type ReduceOp = 'sum';

/**
 * All-reduce: every rank's `output` gets the elementwise sum of every rank's `input`, with the same
 * bits on every rank and every run. The cpu and cuda backends sum in rank order 0..W-1 in f32 (bf16: each
 * input widened to f32, summed in that order, rounded once to bf16, nearest-even);
 * collectives/reduce.ts is that reference. nccl sums in NCCL's own order (the same on every rank for
 * a given job, not rank order past W = 2).
 */
export interface AllReduceArgs {
  /** `count` elements of this rank's contribution. Any buffer of this rank. */
  input: DeviceBuffer;
  /**
   * Receives `count` elements of the sum; bytes past them are left as they were. May be `input`
   * (in place). On cuda a symmetric buffer (peers write the sum into it); any buffer of this rank
   * elsewhere.
   */
  output: DeviceBuffer;
  /** Elements (not bytes), the same on every rank; 0 is a call that moves nothing. */
  count: number;
  dtype: ReduceDtype;
  op: ReduceOp;
  /** Default lane 0. */
  lane?: Lane;
  /** The caller's stream: the collective starts after the work queued there. */
  stream?: Stream;
}

/** How many rows the payloads of an exchange plan may have, on this rank. */
export interface PlanCapacity {
  /** Rows every payload's input holds (at least): the splits are checked against it. */
  inputRows: number;
  /** Rows every payload's output holds (at least): the receives are checked against it. */
  outputRows: number;
}

export type PlanAllToAllVArgs = Omit<AllToAllVArgs, 'input' | 'output' | 'rowBytes' | 'plan' | 'sizeHintBytes'> & PlanCapacity;
export type PlanAllToAllV2dArgs = Omit<AllToAllV2dArgs, 'input' | 'output' | 'rowBytes' | 'sizeHintBytes'> & PlanCapacity;
export type PlanAllToAllV2dOffsetArgs = Omit<AllToAllV2dOffsetArgs, 'input' | 'output' | 'rowBytes' | 'sizeHintBytes'> & PlanCapacity;

/** One payload moved along an exchange plan's routing. */
export interface PlanMoveArgs {
  /** At least the plan's inputRows rows of rowBytes. */
  input: DeviceBuffer;
  /** Symmetric, at least the plan's outputRows rows of rowBytes. */
  output: DeviceBuffer;
  /** Any row size: each payload of a routing may have its own (tokens, indices, weights). */
  rowBytes: number;
  /** Default: the plan's lane stream, after the work queued so far on it. */
  stream?: Stream;
}

/**
 * The splits exchange of one routing, done once on the device and kept there, then reused for
 * several payloads with no second exchange. Built and moved in stream order on the plan's lane;
 * capturable into a graph (a replay redoes the exchange with the splits then in the buffers).
 */
export interface ExchangePlan {
  /** The exchange itself: wait() throws its SplitsError if the routing was refused. */
  readonly ready: Handle;
  /**
   * Moves one payload as the routing says (outSplitsOffsets was written by the exchange). A refused
   * routing moves nothing: the handle throws the exchange's error. Ranks must agree on rowBytes
   * and output (checked on the device: SplitsError 'mismatch').
   */
  move(args: PlanMoveArgs): Handle;
  /**
   * Frees the plan's device memory (after its last move has run). Not inside capture() (UsageError):
   * a plan made in a captured closure belongs to the graph and is closed after its last launch.
   */
  close(): void;
}

/** Experts per rank the MoE calls take at most (kernels/config.cuh A2AV_MAX_EXPERTS). */
export const MAX_EXPERTS_PER_RANK = 256;

/**
 * Internal, not exported from the package: set on the token MoE group's exchanges, the same on every
 * rank. Where every rank is on one GPU, true keeps such a call in the cuda backend's one-kernel path
 * and false takes it out (exchange, copy, completion: three launches), whatever the output's size:
 * the group's output holds the worst case, so the size rule for other calls says nothing here.
 */
export const ONE_GPU_FUSED = Symbol('a2av.oneGpuFused');

/**
 * Internal, cuda only: a second payload moved along the same exchange as a 2-D call's rows, in the
 * same launch (the token MoE group's metadata beside its rows): the same row counts and row
 * positions, its own row size. `output` is symmetric, as large in rows on every rank. The call's
 * capacities are the smaller of the two; an exchange of its own would cost a whole second
 * splits round (about 10 µs across two GPUs).
 */
export const COMPANION = Symbol('a2av.companion');
export interface Companion {
  input: DeviceBuffer;
  output: DeviceBuffer;
  rowBytes: number;
}

/**
 * Internal, cuda only: int32 [rows], the input row of each send row, so a 2-D call reads its rows
 * where they are (the token group's x) rather than from a staged copy in send order. The call's
 * input capacity is then the table's rows; each entry must be a row of `input`.
 */
export const GATHER = Symbol('a2av.gather');

/**
 * Internal, cuda only, with GATHER on a dispatch: the same rows named from the input's side, so
 * that where every rank shares one GPU each input row is read once and stored at each of its send
 * rows' places (x_copy_scatter) rather than read again for each send row. `slots`: int32
 * [rows][topk], each (row, k)'s send row or -1 (every send row named once); `dests`: u64
 * [rows][topk], the call's scratch for where they land; `tokens`: int64 [1], the input rows that
 * send this call, read when it runs; `rows`: as many at most, known on the host (the grid is sized
 * by them). Elsewhere ignored (GATHER alone then serves).
 */
export const SCATTER = Symbol('a2av.scatter');
export interface Scatter {
  slots: DeviceBuffer;
  dests: DeviceBuffer;
  tokens: DeviceBuffer;
  topk: number;
  rows: number;
}

/**
 * Internal, cuda only: a 2-D call whose data the caller moves itself, between the exchange's
 * agreement (every rank has reached the call, so what it wrote before is there to read) and its
 * completion (no rank goes on before every rank is done): `launch` queues that work on the call's
 * stream instead of the copy. `input` is then the symmetric buffer the work reads from every rank,
 * checked as one allocation on every rank (as an output is). The token MoE group's combine reads
 * each expert output where it lies this way, and reduces as it reads.
 */
export const BETWEEN = Symbol('a2av.between');
export interface Between {
  launch(stream: Stream): void;
}

/**
 * Internal, cuda only: inside a capture, `comm[ON_REPLAY](fn)` keeps `fn` to run on the host each
 * time that capture's replay is launched, after the graph is queued, and returns true; outside one
 * it keeps nothing and returns false. The token MoE group marks a replayed dispatch's routing as its
 * current one so (a replay replaces the routing on the device as an eager dispatch does). Absent
 * where a replay calls the closure again (cpu) or there is no capture (nccl).
 */
export const ON_REPLAY = Symbol('a2av.onReplay');

/**
 * Internal: `comm[EXPLAINED](explain, queue)` runs `queue` and returns what it returns; inside a
 * capture (cuda) or a replayed closure (cpu), a refusal of a call `queue` made is reported by the
 * replay's handle as `explain(err)`, as the handles `queue` returns report it eagerly through their
 * own wrapper: the token MoE group's refusals in its own terms (moe/errors.ts), not as the
 * exchange's stand-in splits. Absent where there is no capture (nccl).
 */
export const EXPLAINED = Symbol('a2av.explained');
/**
 * Internal: `comm[ABORTED]()` is the error that ended the communicator (a peer's timeout), or
 * undefined. init()'s close reads it: rank 0, serving the store, need not wait for a rank that a
 * timeout already named to say it has left.
 */
export const ABORTED = Symbol('a2av.aborted');

/** What a refusal means to the caller that made the call (an error; others pass as they are). */
export type Explain = (err: Error) => unknown;
/** explain(err) where that is an error, else err. */
export function explained(explain: Explain | undefined, err: Error): Error {
  if (explain === undefined) return err;
  const e = explain(err);
  return e instanceof Error ? e : err;
}

/** Where Comm.copy reads and writes, in bytes from the start of each buffer. */
export interface CopyOffsets {
  dstOffset?: number;
  srcOffset?: number;
}

/** Comm.copyToPeer's arguments. */
export interface PeerCopyArgs {
  /** A symmetric buffer: the bytes land in peer `peer`'s copy of it, at `dstOffset` (default 0). */
  dst: DeviceBuffer;
  dstOffset?: number;
  peer: number;
  /** Any buffer of this rank, read from `srcOffset` (default 0). */
  src: DeviceBuffer;
  srcOffset?: number;
  bytes: number;
  /** Default lane 0's stream. */
  stream?: Stream;
}

/** A recorded sequence of calls that can be replayed (a CUDA graph; on CPU, the closure itself). */
export interface Replay {
  /**
   * Queues one replay on `stream` (default: the capture stream). The handle covers every replayed
   * call: wait() throws the first refused call's error (in the order the calls were captured).
   */
  launch(stream?: Stream): Handle;
  close(): void;
}

/** What every backend needs to build one rank's communicator. */
export interface CommOptions {
  backend: BackendName;
  rank: number;
  worldSize: number;
  /** Rendezvous store shared by the job's ranks. The cpu backend needs one that passes SharedArrayBuffers (the thread store). */
  store: Store;
  /** Bound on every wait, in milliseconds. */
  timeoutMs: number;
  /** Number of lanes (independent channels of collectives). */
  lanes: number;
  /** This rank's index among the ranks of its node, and their count (launcher jobs). Default: rank, worldSize. */
  localRank?: number;
  localWorldSize?: number;
}

export interface Comm {
  readonly backend: BackendName;
  readonly rank: number;
  readonly worldSize: number;
  /** Default bound on every wait, in milliseconds. */
  readonly timeoutMs: number;
  /** A short human description of where this rank runs ("H200 #0", "cpu thread"). */
  readonly deviceName: string;

  alloc(bytes: number): DeviceBuffer;
  /** Collective: every rank calls it in the same order with the same size. */
  allocSymmetric(bytes: number): Promise<DeviceBuffer>;
  free(buf: DeviceBuffer): void;
  /**
   * Synchronous host -> buffer copy (waits for nothing: order it after collectives with Handle.wait).
   * On GPUs it never queues behind other streams' work (cuda/host-copies.ts), and a copy the device
   * has not finished within the timeout is a TimeoutError.
   */
  write(buf: DeviceBuffer, data: ArrayBufferView, offsetBytes?: number): void;
  /** Synchronous buffer -> host copy (as write: never behind other streams' work, bounded). */
  read(buf: DeviceBuffer, offsetBytes: number, bytes: number): Uint8Array;
  /**
   * Stream-ordered device copy (the benchmark's reference), from `src` at `at.srcOffset` to `dst` at
   * `at.dstOffset` (default 0 each). Within one buffer the two ranges must not overlap.
   */
  copy(dst: DeviceBuffer, src: DeviceBuffer, bytes: number, stream?: Stream, at?: CopyOffsets): void;
  /**
   * Stream-ordered copy-engine copy from this rank's `src` into peer `peer`'s copy of the symmetric
   * buffer `dst`: the benchmark's reference across GPUs. Only where peers' buffers are addressable
   * (cuda); absent on cpu and nccl. Nothing orders it against the peer's own work: the caller keeps
   * the peer off those bytes (a barrier before and after).
   */
  copyToPeer?(args: PeerCopyArgs): void;

  /**
   * A handle for everything queued on `stream` so far (default: lane 0's stream): wait() blocks the
   * host until it has run, so that `read` then sees what it wrote (and a `write` after it cannot
   * overtake it); waitOn(other) orders `other` after it on the device. It orders, and reports no
   * collective's error: a collective runs on its lane's stream, and only its own handle (or its
   * replay's) reports its outcome.
   */
  record(stream?: Stream): Handle;

  /** MoE dispatch: see AllToAllV2dArgs. */
  allToAllV2d(args: AllToAllV2dArgs): Handle;
  /** MoE combine: see AllToAllV2dOffsetArgs. */
  allToAllV2dOffset(args: AllToAllV2dOffsetArgs): Handle;
  /** Exchange plans: the splits exchange of allToAllV / allToAllV2d / allToAllV2dOffset, kept for several payloads. */
  planAllToAllV(args: PlanAllToAllVArgs): ExchangePlan;
  planAllToAllV2d(args: PlanAllToAllV2dArgs): ExchangePlan;
  planAllToAllV2dOffset(args: PlanAllToAllV2dOffsetArgs): ExchangePlan;

  lane(index: number): Lane;
  readonly laneCount: number;
  allToAllV(args: AllToAllVArgs): Handle;
  /** Sum of every rank's input in every rank's output: see AllReduceArgs. */
  allReduce(args: AllReduceArgs): Handle;

  /** Records `fn`'s work on `stream` for replay (CUDA graph capture). */
  capture(stream: Stream, fn: () => void): Replay;
  /** See ON_REPLAY. */
  [ON_REPLAY]?(fn: () => void): boolean;
  /** See EXPLAINED. */
  [EXPLAINED]?<T>(explain: Explain, queue: () => T): T;
  [ABORTED]?(): Error | undefined;
  /**
   * Runs `fn` `iters` times back to back on `stream` and returns device time in ms. `leadIn` calls
   * run first, untimed: for a collective they line the ranks up on the device, so the clock starts
   * without the host-side skew between ranks (threads that woke or launched later than others).
   */
  timeLoop(stream: Stream, iters: number, fn: () => void, leadIn?: number): number;
  /** Host barrier across ranks (rendezvous store), bounded by `options.timeoutMs`, else the communicator's timeoutMs (on cpu at least its start floor: set-up-waits.ts). */
  barrier(options?: BarrierOptions): Promise<void>;
  /**
   * Collective, on the host over the rendezvous store (never a lane): every rank's `values`, in rank
   * order. For agreements at set-up (a MoE group's options), which a lane's timeoutMs would end
   * while a peer is still starting: bounded by `options.timeoutMs`, else the communicator's
   * timeoutMs but at least the start floor (set-up-waits.ts).
   */
  gatherOnHost(values: readonly number[], options?: BarrierOptions): Promise<number[][]>;
  /** Free memory for this rank's allocations, in bytes (shared between ranks on one device). */
  freeMemory(): number;
  /** Number of ranks sharing this rank's device (memory and SMs are split between them). */
  readonly ranksOnDevice: number;
  /**
   * nccl only: µs the host has waited for device splits (copy to the host, count exchange), summed
   * over every allToAllV so far: the round trip the cuda backend's device-side splits avoid.
   */
  readonly splitsSyncUs?: number;
  close(): Promise<void>;
}

/** barrier()'s options. */
export interface BarrierOptions {
  /** This wait's bound (ms), where it spans a long step of a peer (a compile) that the communicator's timeoutMs is too short for. */
  timeoutMs?: number;
}
