// What the pipeline asks of a backend's compute: the kernels of kernels/pipeline.cu as calls that
// queue work on a stream (cuda, nccl) or run it at once (cpu, compute-cpu.ts). Each argument type
// names the fields of the kernel's struct; buffers are refs into the communicator's buffers.
import type { DeviceBuffer, Stream } from '../backends/backend.js';
import type { GemmShape } from '../cuda/cublas.js';

/** A position inside a buffer, in bytes. */
export interface Ref {
  buf: DeviceBuffer;
  byte: number;
}

/** Element `i` of a buffer of 4-byte elements (int32, f32). */
export function at4(buf: DeviceBuffer, i = 0): Ref {
  return { buf, byte: 4 * i };
}
/** Element `i` of a buffer of 8-byte elements (int64 counts). */
export function at8(buf: DeviceBuffer, i = 0): Ref {
  return { buf, byte: 8 * i };
}

/** pl_scan_lengths: per segment of segLen bags, the offset of each bag's ids and the segment's total. */
export interface ScanArgs {
  lengths: Ref;
  offsets: Ref;
  totals: Ref;
  segments: number;
  segLen: number;
  /** Draw the lengths of this batch first (send side: segment = send slot). */
  generate?: { seed: number; batch: number; rank: number; world: number; features: number; pooling: number };
}

/** pl_segment_bases: exclusive prefix sum of the totals; with groupSums, each owner's share (the ids' splits). */
export interface BasesArgs {
  totals: Ref;
  bases: Ref;
  groupSums?: Ref;
  segments: number;
  world: number;
  features: number;
}

export interface IdsArgs {
  lengths: Ref;
  offsets: Ref;
  bases: Ref;
  ids: Ref;
  segments: number;
  segLen: number;
  seed: number;
  batch: number;
  rank: number;
  world: number;
  features: number;
  rows: number;
}

export interface DenseArgs {
  x: Ref;
  labels: Ref;
  batchSize: number;
  denseIn: number;
  seed: number;
  batch: number;
  rank: number;
}

/** pl_embedding_bag (pooled out, scale 2^-FIXED_SHIFT) and pl_scatter_update (pooled = gradients in, scale = -lr·2^FIXED_SHIFT). */
export interface BagArgs {
  lengths: Ref;
  offsets: Ref;
  bases: Ref;
  ids: Ref;
  table: Ref;
  pooled: Ref;
  bags: number;
  segLen: number;
  featuresHere: number;
  rows: number;
  dim: number;
  scale: number;
}

export interface GemmArgs extends GemmShape {
  a: Ref;
  b: Ref;
  c: Ref;
  bias?: Ref;
  relu: boolean;
  /**
   * Where given, k is summed in chunks (gemmChunks): each chunk from zero in k order, then the
   * chunks' sums in chunk order, and on a GPU the chunks' sums go here (f32 [chunks][m][n]) between
   * two kernels. The bits of C depend on it, so every Compute honours it. For long k with few
   * outputs (the weight gradients: k is the batch), where one thread per output would walk all of k.
   */
  partials?: Ref;
}

/** Chunks of a split k: at most 16, each at least 512 and a multiple of 16 (the kernel's k tile). */
export function gemmChunks(k: number): { count: number; size: number } {
  const count = Math.max(1, Math.min(16, Math.ceil(k / 512)));
  const size = Math.max(16, Math.ceil(Math.ceil(k / count) / 16) * 16);
  return { count: Math.max(1, Math.ceil(k / size)), size };
}

/** f32 elements of `partials` for a GEMM of m x n outputs over k. */
export function gemmPartialFloats(m: number, n: number, k: number): number {
  const { count } = gemmChunks(k);
  return count > 1 ? count * m * n : 0;
}

/** out[c] = the sum of x[r·ld + c] over the rows, in colSumChunks' order (a bias gradient). */
export interface ColSumArgs {
  x: Ref;
  out: Ref;
  rows: number;
  cols: number;
  ld: number;
  /**
   * f32 [count][cols] (colSumPartialFloats): on a GPU each chunk's sums go here between two kernels.
   * Only touched when colSumChunks(rows).count > 1; the order, and so the bits, do not depend on it.
   */
  partials: Ref;
}

/**
 * The rows of a column sum in chunks of 64: each chunk summed from zero in row order, then the
 * chunks' sums from zero in chunk order, every add an f32 add rounded to nearest. One chunk where
 * rows <= 64. One thread a column walking the whole batch (8192 rows) left a few blocks of dependent
 * loads; a chunk a block spreads the rows over the GPU, and every Compute keeps the same order.
 */
export function colSumChunks(rows: number): { count: number; size: number } {
  const size = 64;
  return { count: Math.max(1, Math.ceil(rows / size)), size };
}

/** f32 elements of `partials` for a column sum of rows x cols. */
export function colSumPartialFloats(rows: number, cols: number): number {
  const { count } = colSumChunks(rows);
  return count > 1 ? count * cols : 0;
}

export interface ReluGradArgs {
  dy: Ref;
  y: Ref;
  dz: Ref;
  rows: number;
  cols: number;
  ldDy: number;
  ldY: number;
  ldDz: number;
}

export interface PermuteArgs {
  wide: Ref;
  blocks: Ref;
  batchSize: number;
  slots: number;
  dim: number;
  ldWide: number;
  col0: number;
  toWide: boolean;
}

export interface LossArgs {
  y: Ref;
  labels: Ref;
  dy: Ref;
  loss: Ref;
  rows: number;
  ldY: number;
  invRows: number;
}

export interface SgdArgs {
  params: Ref;
  grads: Ref;
  count: number;
  lr: number;
}

/** f32: centred 24 random bits × scale; int32: centred bits >> shift (synth.ts fillBits). */
export interface FillArgs {
  out: Ref;
  count: number;
  seed: number;
  tag: number;
  key: number;
  kind: 'f32' | 'int32';
  shift: number;
  scale: number;
}

/** Points in stream order and the time between them (device events; host clock on cpu). */
export interface Clock {
  /** Marks the point reached on `stream` so far; returns its id. */
  mark(stream: Stream): number;
  /** µs from mark `from` to mark `to`, once the work before both has run. */
  micros(from: number, to: number): number;
  /** Hands mark `id` back once read: a later mark() may take it. */
  release(id: number): void;
  /** Forgets every mark (ids start again at 0). */
  reset(): void;
  /**
   * Makes `marks` marks ready before the timed steps, so none is created while peers wait in a
   * collective (creating driver objects then is what has stalled ranks before).
   */
  reserve(marks: number): void;
}

export interface Compute {
  /** The stream of the training step's compute. */
  readonly compute: Stream;
  /** The stream that draws the next batch and its splits. */
  readonly data: Stream;
  readonly clock: Clock;
  /** What computes the GEMMs, for the report. */
  readonly gemmName: string;
  scanLengths(s: Stream, a: ScanArgs): void;
  segmentBases(s: Stream, a: BasesArgs): void;
  genIds(s: Stream, a: IdsArgs): void;
  genDense(s: Stream, a: DenseArgs): void;
  embeddingBag(s: Stream, a: BagArgs): void;
  scatterUpdate(s: Stream, a: BagArgs): void;
  gemm(s: Stream, a: GemmArgs): void;
  colSum(s: Stream, a: ColSumArgs): void;
  reluGrad(s: Stream, a: ReluGradArgs): void;
  permute(s: Stream, a: PermuteArgs): void;
  loss(s: Stream, a: LossArgs): void;
  sgd(s: Stream, a: SgdArgs): void;
  fill(s: Stream, a: FillArgs): void;
  zero(s: Stream, at: Ref, bytes: number): void;
  /** synth.ts checksumWords of `words` 4-byte words from `at`: waits for the work queued on `s`. */
  checksum(s: Stream, at: Ref, words: number): [number, number];
  /** Blocks the host until the work queued on `s` has run. */
  sync(s: Stream): void;
  close(): void;
}
