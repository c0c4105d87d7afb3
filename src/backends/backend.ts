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
   * know): picks the default launch plan. Default: all of `input`. Any value stays correct.
   */
  sizeHintBytes?: number;
  /** Overrides the launch plan (GPU backends; validated, ignored on CPU). */
  plan?: LaunchPlan;
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
  /** Synchronous host -> buffer copy (waits for nothing: order it after collectives with Handle.wait). */
  write(buf: DeviceBuffer, data: ArrayBufferView, offsetBytes?: number): void;
  /** Synchronous buffer -> host copy. */
  read(buf: DeviceBuffer, offsetBytes: number, bytes: number): Uint8Array;
  /** Stream-ordered device copy (the benchmark's reference). */
  copy(dst: DeviceBuffer, src: DeviceBuffer, bytes: number, stream?: Stream): void;
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

  lane(index: number): Lane;
  readonly laneCount: number;
  allToAllV(args: AllToAllVArgs): Handle;

  /** Records `fn`'s work on `stream` for replay (CUDA graph capture). */
  capture(stream: Stream, fn: () => void): Replay;
  /**
   * Runs `fn` `iters` times back to back on `stream` and returns device time in ms. `leadIn` calls
   * run first, untimed: for a collective they line the ranks up on the device, so the clock starts
   * without the host-side skew between ranks (threads that woke or launched later than others).
   */
  timeLoop(stream: Stream, iters: number, fn: () => void, leadIn?: number): number;
  /** Host barrier across ranks (rendezvous store). */
  barrier(): Promise<void>;
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
