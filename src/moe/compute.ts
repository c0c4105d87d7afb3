// The group's own compute, around the exchanges: routing, gather, the received layout, combine's
// reduction. Two implementations compute the same bits: host-compute.ts (the cpu backend, on its
// shared-memory buffers) and kernel-compute.ts (kernels/moe-tokens.cu, on the cuda and nccl
// backends' streams). Each step reads what the step before it left in the group's buffers.
import type { DeviceBuffer, Stream } from '../backends/backend.js';
import type { CombineDtype } from './api.js';
import type { TokenShape } from './shape.js';

/** The group's buffers, allocated once (see shape.ts for their rows). */
export interface TokenBuffers {
  /** int32 [chunks][buckets]: each chunk's count per bucket, then where its entries start in the send order. */
  hist: DeviceBuffer;
  /** int32 [tokenCap][K]: an entry's rank among its chunk's entries of its bucket; -1 none. */
  local: DeviceBuffer;
  /** int32 [tokenCap][K]: the send row of each entry; -1 none. The routing that combine reads. */
  slot: DeviceBuffer;
  /** int64 [buckets]: where each bucket starts in the send order. */
  starts: DeviceBuffer;
  /** int64 [buckets]: the dispatch's inSplits. */
  inSplits: DeviceBuffer;
  /** 8 bytes, zero between calls: the lowest bad entry of a routing, while it is worked out. */
  fault: DeviceBuffer;
  /** 8 bytes each, zero between calls: the blocks of a routing, of a reduction, done so far (the last one finishes the call). */
  routeTicket: DeviceBuffer;
  reduceTicket: DeviceBuffer;
  /** int64 [1]: the token count of the current routing. */
  routeTokens: DeviceBuffer;
  /**
   * int64 [2][buckets] each: the x exchange's outSplitsOffsets (combine's inSplitsOffsets), the
   * metadata's, combine's. routeOso and combineOso are -1 before their exchanges (gather sets the
   * first, the group's set-up and each reduce the second), so that a refused call leaves them so.
   */
  routeOso: DeviceBuffer;
  metaOso: DeviceBuffer;
  combineOso: DeviceBuffer;
  /**
   * [sendRows][rowBytes]: the rows in send order (cpu, nccl); on cuda none: rowOf, int32 [sendRows],
   * names each send row's token and the exchange reads it from x (no staging copy: at 4096 tokens
   * the copy was a quarter of a dispatch). [sendRows][metaBytes]: the metadata in send order.
   */
  send?: DeviceBuffer;
  rowOf?: DeviceBuffer;
  /** With rowOf: u64 [tokenCap][K], the exchange's scratch for where each entry's row lands (backend.ts SCATTER). */
  dests?: DeviceBuffer;
  sendMeta: DeviceBuffer;
  /** Symmetric [recvRows][metaBytes]: the metadata received. */
  recvMeta: DeviceBuffer;
  /** Symmetric [sendRows][combineRowBytes]: the expert outputs back, in send order. */
  back: DeviceBuffer;
}

export interface RouteCall {
  topkIdx: DeviceBuffer;
  idx64: boolean;
  /** int64 [1] on the device; absent: `tokens` is the count. */
  numTokens?: DeviceBuffer;
  tokens: number;
  /** Tokens this call's buffers hold: a device count past it is refused. */
  tokenCap: number;
}

export interface GatherCall {
  /** true: a new routing, whose slots are worked out; false: the current one's are read. */
  place: boolean;
  topkIdx: DeviceBuffer;
  idx64: boolean;
  x: DeviceBuffer;
  weights?: DeviceBuffer;
  /** Tokens the route holds at most: sizes the grid. */
  tokenCap: number;
}

export interface LayoutCall {
  recvX: DeviceBuffer;
  recvIdx?: DeviceBuffer;
  idx64: boolean;
  recvWeights?: DeviceBuffer;
  counts: DeviceBuffer;
  offsets?: DeviceBuffer;
  numRecvRows?: DeviceBuffer;
}

export interface ReduceCall {
  out: DeviceBuffer;
  weights?: DeviceBuffer;
  bias?: DeviceBuffer;
  dtype: CombineDtype;
  /** Elements a row. */
  hidden: number;
  /** Tokens the route holds at most: sizes the grid. */
  tokenCap: number;
}

export interface TokenCompute {
  /**
   * A new routing: works it out (inSplits, each entry's send row, the token count; a bad id or count
   * becomes a negative split), then gathers by it as gather() does.
   */
  routeAndGather(stream: Stream, r: RouteCall, g: GatherCall): void;
  /** Copies the rows (or, with rowOf, their token numbers) and their metadata (every dispatch: group.ts says why) into send order, a new routing's slots first; sets routeOso to -1. */
  gather(stream: Stream, c: GatherCall): void;
  /** After the dispatch's exchanges: counts, offsets, padding, the metadata unpacked. Nothing if refused. */
  layout(stream: Stream, c: LayoutCall): void;
  /** After combine's exchange: the weighted sum of each token's rows (nothing if refused); sets combineOso back to -1. */
  reduce(stream: Stream, c: ReduceCall): void;
  /**
   * Where the compute can (kernels on a GPU, `y` a symmetric buffer every rank addresses, the
   * buckets within PULL_BUCKETS): the reduction of reduce(), its terms read from every rank's `y`
   * instead of `back`, to launch between combine's exchange and its completion (backend.ts
   * BETWEEN), on the exchange's stream. Else undefined.
   */
  pullFrom?(y: DeviceBuffer): ((stream: Stream, c: ReduceCall) => void) | undefined;
  close(): void;
}

export type ComputeFactory = (shape: TokenShape, bufs: TokenBuffers) => TokenCompute;

/** Element bytes and the kernels' code of each combine dtype. */
export const DTYPES: Readonly<Record<CombineDtype, { bytes: number; code: number }>> = {
  f32: { bytes: 4, code: 0 },
  bf16: { bytes: 2, code: 1 },
  f16: { bytes: 2, code: 2 },
};

/** inSplits[0] of a bad token count (kernels/moe-tokens.cu MT_BAD_TOKEN_COUNT); a bad id at entry i leaves -1 - i. */
export const BAD_TOKEN_COUNT = -(2 ** 40);
