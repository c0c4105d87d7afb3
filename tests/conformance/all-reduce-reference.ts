// Host reference for allReduce: every rank's input from the shared seed (so any rank can build all of
// them), the expected bits (the rank-ordered f32 sum of src/collectives/reduce.ts), and a check
// against a float64 sum that shares no code with it.
import type { ReduceDtype } from '../../src/backends/backend.js';
import { ELEMENT_BYTES, orderedSum } from '../../src/collectives/reduce.js';
import { ConformanceError } from './harness.js';
import { Rng } from './reference.js';

/**
 * Rank `q`'s input of call `call`: random sign, exponent in [-6, 6) and mantissa, so sums carry
 * and round; 1 in 16 elements is ±0. Built from bits, not through the code under test.
 */
export function allReduceInput(seed: number, call: number, q: number, dtype: ReduceDtype, count: number): Uint8Array {
  const rng = new Rng(seed, call, q, 0xa11);
  if (dtype === 'f32') {
    const bits = new Uint32Array(count);
    for (let i = 0; i < count; i++) {
      const r = rng.next();
      const sign = (r & 1) << 31;
      bits[i] = (r & 0xf0) === 0 ? sign >>> 0 : (sign | ((127 - 6 + ((r >>> 1) % 12)) << 23) | (rng.next() & 0x7fffff)) >>> 0;
    }
    return new Uint8Array(bits.buffer);
  }
  const bits = new Uint16Array(count);
  for (let i = 0; i < count; i++) {
    const r = rng.next();
    const sign = (r & 1) << 15;
    bits[i] = (r & 0xf0) === 0 ? sign : sign | ((127 - 6 + ((r >>> 1) % 12)) << 7) | ((r >>> 8) & 0x7f);
  }
  return new Uint8Array(bits.buffer);
}

/** Every rank's input of `call`, by rank. */
export function allInputs(seed: number, call: number, world: number, dtype: ReduceDtype, count: number): Uint8Array[] {
  return Array.from({ length: world }, (_, q) => allReduceInput(seed, call, q, dtype, count));
}

/** The expected output bytes: the ordered f32 sum, rank 0 first. */
export function orderedReference(inputs: Uint8Array[], dtype: ReduceDtype, count: number): Uint8Array {
  const out = new Uint8Array(count * ELEMENT_BYTES[dtype]);
  orderedSum({ dtype, sources: inputs, output: out, count });
  return out;
}

const widened = new DataView(new ArrayBuffer(4));

/** Element `i` of `view` as a number (bf16 widened by hand: its bits are the top half of an f32's). */
function valueAt(view: DataView, dtype: ReduceDtype, i: number): number {
  if (dtype === 'f32') return view.getFloat32(4 * i, true);
  widened.setUint32(0, view.getUint16(2 * i, true) << 16, true);
  return widened.getFloat32(0, true);
}

/**
 * Checks `got` against a float64 sum of the inputs, independently of the ordered reference. Stated
 * tolerance: W - 1 f32 additions each err by at most 2^-24 of the running sum, bounded by Σ|x|;
 * bf16 adds its one final rounding, at most 2^-9 of the result (2^-8 taken).
 */
export function checkAgainstFloat64(got: Uint8Array, inputs: Uint8Array[], dtype: ReduceDtype, count: number, label: string): void {
  const views = inputs.map((b) => new DataView(b.buffer, b.byteOffset, b.byteLength));
  const out = new DataView(got.buffer, got.byteOffset, got.byteLength);
  const W = inputs.length;
  for (let i = 0; i < count; i++) {
    let sum = 0;
    let abs = 0;
    for (const v of views) {
      const x = valueAt(v, dtype, i);
      sum += x;
      abs += Math.abs(x);
    }
    const tol = (W - 1) * 2 ** -24 * abs + (dtype === 'bf16' ? 2 ** -8 * Math.abs(sum) : 0);
    const g = valueAt(out, dtype, i);
    if (!(Math.abs(g - sum) <= tol)) {
      throw new ConformanceError(`${label}: element ${i} is ${g}, the float64 sum is ${sum} (tolerance ${tol})`);
    }
  }
}

/** Checks `got` is `want` bit for bit, then that the canary bytes past it are `poison`'s. */
export function checkBits(got: Uint8Array, want: Uint8Array, poison: Uint8Array, label: string): void {
  for (let i = 0; i < got.length; i++) {
    const expected = i < want.length ? want[i] : poison[i];
    if (got[i] !== expected) {
      const where = i < want.length ? `sum byte ${i}` : `canary ${i - want.length} past the ${want.length}-byte sum`;
      throw new ConformanceError(`${label}: ${where} is ${got[i]}, expected ${expected}`);
    }
  }
}
