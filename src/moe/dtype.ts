// Element conversions of combine's types on the host, bit for bit as kernels/moe-tokens.cu does
// them: values widen to f32 exactly, and a sum is rounded once to the output type, nearest-even.
import { bf16ToF32, f32BitsToBf16 } from '../collectives/reduce.js';

const one = new Float32Array(1);
const oneBits = new Uint32Array(one.buffer);

/** The f32 value of f16 `bits` (exact: every f16 is an f32). */
export function f16ToF32(bits: number): number {
  const sign = bits & 0x8000 ? -1 : 1;
  const e = (bits >>> 10) & 0x1f;
  const m = bits & 0x3ff;
  if (e === 31) return m === 0 ? sign * Infinity : NaN;
  if (e === 0) return sign * m * 2 ** -24;
  return sign * (1024 + m) * 2 ** (e - 25);
}

/** f16 bits of the f32 whose bits are `f32Bits`: nearest-even, overflow to infinity, a NaN quiet. */
export function f32BitsToF16(f32Bits: number): number {
  const bits = f32Bits >>> 0;
  const sign = (bits >>> 16) & 0x8000;
  const a = bits & 0x7fffffff;
  if (a > 0x7f800000) return sign | 0x7e00;
  if (a >= 0x477ff000) return sign | 0x7c00;
  if (a >= 0x38800000) return sign | (((a + 0xfff + ((a >>> 13) & 1) - 0x38000000) >>> 13) & 0xffff);
  const s = 126 - (a >>> 23);
  if (s > 24) return sign;
  const m = (a & 0x7fffff) | 0x800000;
  const q = m >>> s;
  const rem = m & ((1 << s) - 1);
  const half = 1 << (s - 1);
  return sign | (q + (rem > half || (rem === half && (q & 1) === 1) ? 1 : 0));
}

/** f32 bits of `x` rounded to f32. */
export function f32Bits(x: number): number {
  one[0] = x;
  return oneBits[0];
}

/** Reads element i of a row of 16-bit or 32-bit elements as f32. */
export type Load = (i: number) => number;

export function loader(dtype: 'f32' | 'bf16' | 'f16', bytes: Uint8Array): Load {
  if (dtype === 'f32') {
    const f = new Float32Array(bytes.buffer, bytes.byteOffset, bytes.byteLength >>> 2);
    return (i) => f[i];
  }
  const h = new Uint16Array(bytes.buffer, bytes.byteOffset, bytes.byteLength >>> 1);
  return dtype === 'bf16' ? (i) => bf16ToF32(h[i]) : (i) => f16ToF32(h[i]);
}

/** Writes element i, rounding the f32 value once to the type. */
export function storer(dtype: 'f32' | 'bf16' | 'f16', bytes: Uint8Array): (i: number, v: number) => void {
  if (dtype === 'f32') {
    const f = new Float32Array(bytes.buffer, bytes.byteOffset, bytes.byteLength >>> 2);
    return (i, v) => {
      f[i] = v;
    };
  }
  const h = new Uint16Array(bytes.buffer, bytes.byteOffset, bytes.byteLength >>> 1);
  const round = dtype === 'bf16' ? f32BitsToBf16 : f32BitsToF16;
  return (i, v) => {
    h[i] = round(f32Bits(v));
  };
}
