// Element conversions of combine's types on the host, bit for bit as kernels/moe-tokens.cu does
// them: values widen to f32 exactly, and a sum is rounded once to the output type, nearest-even.
import { f32BitsToBf16 } from '../collectives/reduce.js';

/** The f32 value of f16 `bits` (exact: every f16 is an f32). */
export function f16ToF32(bits: number): number {
  const sign = bits & 0x8000 ? -1 : 1;
  const e = (bits >>> 10) & 0x1f;
  const m = bits & 0x3ff;
  if (e === 31) return m === 0 ? sign * Infinity : NaN;
  if (e === 0) return sign * m * 2 ** -24;
  return sign * (1024 + m) * 2 ** (e - 25);
}

/**
 * The f32 bits of f16 `bits`, as kernels/moe-tokens.cu's mt_f16_value widens them: a NaN keeps its
 * sign and payload (a JS number would not), so a term passed through unchanged has the same bits.
 */
export function f16BitsToF32Bits(bits: number): number {
  const sign = (bits & 0x8000) << 16;
  const e = (bits >>> 10) & 0x1f;
  const m = bits & 0x3ff;
  if (e === 31) return (sign | 0x7f800000 | (m << 13)) >>> 0;
  if (e === 0) {
    if (m === 0) return sign >>> 0;
    const shift = Math.clz32(m) - 21; // brings the leading one to bit 10
    return (sign | ((113 - shift) << 23) | (((m << shift) & 0x3ff) << 13)) >>> 0;
  }
  return (sign | ((e + 112) << 23) | (m << 13)) >>> 0;
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

/** A row of f32 values and the same memory as bits (for the encodings to 16-bit types). */
export class F32Row {
  readonly f: Float32Array;
  readonly bits: Uint32Array;
  constructor(readonly length: number) {
    this.f = new Float32Array(length);
    this.bits = new Uint32Array(this.f.buffer);
  }
}

/**
 * Decodes `row.length` elements from element `start` of `bytes` into `row`: a whole row at a time,
 * with no call per element (the combine's reduction on the host runs over rows of 7168).
 */
export function rowDecoder(dtype: 'f32' | 'bf16' | 'f16', bytes: Uint8Array): (start: number, row: F32Row) => void {
  if (dtype === 'f32') {
    const f = new Float32Array(bytes.buffer, bytes.byteOffset, bytes.byteLength >>> 2);
    return (start, row) => row.f.set(f.subarray(start, start + row.length));
  }
  const h = new Uint16Array(bytes.buffer, bytes.byteOffset, bytes.byteLength >>> 1);
  if (dtype === 'bf16') {
    return (start, row) => {
      const b = row.bits;
      for (let i = 0; i < row.length; i++) b[i] = h[start + i] << 16;
    };
  }
  return (start, row) => {
    const b = row.bits;
    for (let i = 0; i < row.length; i++) b[i] = f16BitsToF32Bits(h[start + i]);
  };
}

/** Encodes `row` into `bytes` from element `start`, each value rounded once to the type. */
export function rowEncoder(dtype: 'f32' | 'bf16' | 'f16', bytes: Uint8Array): (start: number, row: F32Row) => void {
  if (dtype === 'f32') {
    const f = new Float32Array(bytes.buffer, bytes.byteOffset, bytes.byteLength >>> 2);
    return (start, row) => f.set(row.f, start);
  }
  const h = new Uint16Array(bytes.buffer, bytes.byteOffset, bytes.byteLength >>> 1);
  const round = dtype === 'bf16' ? f32BitsToBf16 : f32BitsToF16;
  return (start, row) => {
    const b = row.bits;
    for (let i = 0; i < row.length; i++) h[start + i] = round(b[i]);
  };
}
