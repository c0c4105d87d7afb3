// The one interface every backend implements. A Comm is one rank's view of a job (SPMD: every rank
// runs the same program and makes the same collective calls in the same order).

import type { LaunchPlan } from '../tune/plan.js';

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

/** What a collective returns: a point in stream order that the host or another stream can wait on. */
export interface Handle {
  /** Blocks the host until the work is done; throws the device's error (SplitsError, TimeoutError). */
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

/** A recorded sequence of calls that can be replayed (a CUDA graph; on CPU, the closure itself). */
export interface Replay {
  launch(stream?: Stream): void;
  close(): void;
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
