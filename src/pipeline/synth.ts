// The synthetic model's definition, shared by every backend: the hash that draws batches and
// initial values from a seed (kernels/pipeline.cu has the same functions), the fixed-point format of
// the embedding tables, the learning rates, and the checksum of a buffer's words. Every value drawn
// is exact in f32 (a 24-bit integer times a power of two), so no rounding is left to agree on.
import { fmix32 } from '../bench/data.js';

/** Streams of the hash: kernels/pipeline.cu PL_TAG_*. */
export const Tag = { length: 1, id: 2, dense: 3, label: 4, table: 5, weight: 6 } as const;

/**
 * Embedding tables hold int32 in units of 2^-FIXED_SHIFT: pooling sums integers and the update adds
 * integers, both the same whatever the order, so the scatter-add may use atomics and keep every
 * bit. 26 bits leave ±32 of range and resolve updates down to 1.5e-8.
 */
export const FIXED_SHIFT = 26;
/** Initial table entries: 24 random bits >> 2, so within ±2^-5. */
export const TABLE_INIT_SHIFT = 2;
/** Powers of two: multiplying by them rounds nowhere. Dense gradients are summed over ranks, not averaged. */
export const DENSE_LR = 2 ** -4;
export const EMBEDDING_LR = 2 ** -3;

/** The bench's hash (MurmurHash3's finaliser); kernels/pipeline.cu has the same one. */
export const mix = fmix32;

export function step(h: number, v: number): number {
  return mix((h + mix((v + 0x9e3779b9) >>> 0)) >>> 0);
}

export function start(seed: number, tag: number): number {
  return mix((seed ^ Math.imul(tag, 0x9e3779b1)) >>> 0);
}

/** Which batch: drawn from (seed, batch index, rank). */
export interface BatchKey {
  seed: number;
  batch: number;
  rank: number;
}

/** Ids of one (sample, feature) bag: uniform in 0..2·pooling. */
export function bagLength(k: BatchKey, feature: number, sample: number, pooling: number): number {
  return step(step(step(step(start(k.seed, Tag.length), k.batch), k.rank), feature), sample) % (2 * pooling + 1);
}

/** The hash the bag's ids are drawn from: id j = step(bagHash, j) % rows. */
export function bagHash(k: BatchKey, feature: number, sample: number): number {
  return step(step(step(step(start(k.seed, Tag.id), k.batch), k.rank), feature), sample);
}

/** Dense input c of a sample, in [0, 1). */
export function denseValue(k: BatchKey, sample: number, c: number): number {
  return (step(step(step(step(start(k.seed, Tag.dense), k.batch), k.rank), sample), c) >>> 8) * 2 ** -24;
}

export function label(k: BatchKey, sample: number): number {
  return step(step(step(start(k.seed, Tag.label), k.batch), k.rank), sample) & 1;
}

/** The 24 random bits of element i of fill stream (tag, key), centred: in [-2^23, 2^23). */
export function fillBits(seed: number, tag: number, key: number, i: number): number {
  return (step(step(step(start(seed, tag), key), Math.floor(i / 2 ** 32)), i >>> 0) >>> 8) - (1 << 23);
}

/** A layer of fan-in n starts within ±2^-e, e = ceil(log2(n) / 2) (about 1/sqrt(n), exactly a power of two). */
export function weightScale(fanIn: number): number {
  return 2 ** -(23 + Math.ceil(Math.log2(fanIn) / 2));
}

/** Round to nearest, ties to even, saturated to int32 (NaN to 0): __float2int_rn. */
export function rintInt32(x: number): number {
  if (Number.isNaN(x)) return 0;
  if (x >= 2147483647) return 2147483647;
  if (x <= -2147483648) return -2147483648;
  const f = Math.floor(x);
  const d = x - f;
  return d > 0.5 || (d === 0.5 && f % 2 !== 0) ? f + 1 : f;
}

/**
 * Two 32-bit sums of a hash of (index, word) over `words` (kernels/pipeline.cu pl_checksum): the
 * same whatever order they are added in, so a device pass and this loop agree.
 */
export function checksumWords(words: Uint32Array, sums: [number, number] = [0, 0], first = 0): [number, number] {
  let [a, b] = sums;
  for (let j = 0; j < words.length; j++) {
    const i = first + j;
    const x = mix((words[j] + mix(((i >>> 0) ^ mix((Math.floor(i / 2 ** 32) + 0x7f4a7c15) >>> 0)) >>> 0)) >>> 0);
    a = (a + x) >>> 0;
    b = (b + mix((x ^ 0x5bd1e995) >>> 0)) >>> 0;
  }
  return [a, b];
}

/** One 64-bit hex digest of several 32-bit values, in order (checksums of several ranks or steps). */
export function digest(values: Iterable<number>): string {
  let a = start(0x2545f491, 7);
  let b = start(0x9e3779b9, 11);
  for (const v of values) {
    a = step(a, v >>> 0);
    b = step(b ^ a, v >>> 0);
  }
  return a.toString(16).padStart(8, '0') + b.toString(16).padStart(8, '0');
}
