// The host's summation for allReduce: element conversions and the rank-ordered sum. The cpu backend
// reduces with it and the tests use it as the reference, so "deterministic" has one definition:
// sources summed in the order given (rank 0..W-1) in f32; bf16 widened to f32 exactly, summed in
// f32, rounded once to bf16 (nearest-even). Summing in f32 in JS is exact to that definition: a sum
// of two f32 values done in double and then rounded to f32 (a Float32Array store) is the correctly
// rounded f32 sum (double has more than 2·24 + 2 bits, so the double rounding is harmless).
import type { ReduceDtype } from '../backends/backend.js';
import { DTYPE_CODE, OP_CODE } from '../codes.js';

export const ELEMENT_BYTES: Readonly<Record<ReduceDtype, number>> = { f32: 4, bf16: 2 };
/** Element types and ops as ranks compare their allReduce calls: a code for every ReduceDtype. */
export { DTYPE_CODE, OP_CODE };
DTYPE_CODE satisfies Record<ReduceDtype, number>;

const one = new Float32Array(1);
const oneBits = new Uint32Array(one.buffer);

/** The f32 value of bf16 `bits` (exact: bf16 is the top half of an f32). */
export function bf16ToF32(bits: number): number {
  oneBits[0] = (bits & 0xffff) << 16;
  return one[0];
}

/** bf16 bits of the f32 whose bits are `f32Bits`: round to nearest, ties to even; NaN stays NaN (quiet). */
export function f32BitsToBf16(f32Bits: number): number {
  const bits = f32Bits >>> 0;
  if ((bits & 0x7fffffff) > 0x7f800000) return (bits >>> 16) | 0x0040;
  return ((bits + 0x7fff + ((bits >>> 16) & 1)) >>> 16) & 0xffff;
}

/** bf16 bits of `x` rounded first to f32, then to bf16 (nearest-even each time). */
export function f32ToBf16(x: number): number {
  one[0] = x;
  return f32BitsToBf16(oneBits[0]);
}

export interface OrderedSumArgs {
  dtype: ReduceDtype;
  /** Each rank's elements, in the order to sum them; each at least `count` elements long. */
  sources: readonly Uint8Array[];
  /** Receives `count` elements; may not overlap a source unless it is the first one. */
  output: Uint8Array;
  count: number;
  /** bf16 only: an f32 accumulator of `count` elements at least, reused between calls (else allocated). */
  accumulator?: Float32Array;
}

/** output = sources[0] + sources[1] + ... in that order, in f32 (see the file's comment). */
export function orderedSum(args: OrderedSumArgs): void {
  const { dtype, sources, output, count } = args;
  if (count === 0 || sources.length === 0) return;
  if (dtype === 'f32') {
    const out = f32View(output, count);
    // The first source's bits as they are (a copy through a float would canonicalize NaN payloads).
    new Uint32Array(out.buffer, out.byteOffset, count).set(u32View(sources[0], count));
    for (let r = 1; r < sources.length; r++) {
      const src = f32View(sources[r], count);
      for (let i = 0; i < count; i++) out[i] += src[i];
    }
    if (out.buffer !== output.buffer) output.set(new Uint8Array(out.buffer, 0, 4 * count));
    return;
  }
  const acc = args.accumulator !== undefined && args.accumulator.length >= count ? args.accumulator : new Float32Array(count);
  const accBits = new Uint32Array(acc.buffer, acc.byteOffset, count);
  const first = u16View(sources[0], count);
  for (let i = 0; i < count; i++) accBits[i] = first[i] << 16;
  for (let r = 1; r < sources.length; r++) {
    const src = u16View(sources[r], count);
    for (let i = 0; i < count; i++) {
      oneBits[0] = src[i] << 16;
      acc[i] += one[0];
    }
  }
  const out = u16View(output, count, true);
  for (let i = 0; i < count; i++) out[i] = f32BitsToBf16(accBits[i]);
  if (out.buffer !== output.buffer) output.set(new Uint8Array(out.buffer, 0, 2 * count));
}

// Views of `count` elements; an unaligned byte range is copied (the result is then copied back).
function f32View(u8: Uint8Array, count: number): Float32Array {
  return u8.byteOffset % 4 === 0 ? new Float32Array(u8.buffer, u8.byteOffset, count) : new Float32Array(u8.slice(0, 4 * count).buffer);
}
function u32View(u8: Uint8Array, count: number): Uint32Array {
  return u8.byteOffset % 4 === 0 ? new Uint32Array(u8.buffer, u8.byteOffset, count) : new Uint32Array(u8.slice(0, 4 * count).buffer);
}
function u16View(u8: Uint8Array, count: number, forOutput = false): Uint16Array {
  if (u8.byteOffset % 2 === 0) return new Uint16Array(u8.buffer, u8.byteOffset, count);
  return forOutput ? new Uint16Array(count) : new Uint16Array(u8.slice(0, 2 * count).buffer);
}
