// Byte copies between shared buffers at memcpy speed.
//
// TypedArray.prototype.set touching a SharedArrayBuffer copies word by word with relaxed atomics
// (V8 must not tear what another thread reads), 2-4x slower than memcpy from 64 KiB up. Node's
// Buffer.prototype.fill with a Buffer value is a plain memcpy in C++ of min(value.length,
// end - offset) bytes, then doubles the pattern only if the range is longer; with a value exactly
// as long as the range it is one memcpy. Our protocol already orders every copy against its
// readers with Atomics, so the plain copy is safe.

import { Buffer } from 'node:buffer';

/** Below this, the C++ call's fixed cost outweighs the faster copy. */
const FILL_MIN_BYTES = 512;

/** Copies `bytes` bytes from src[srcOffset..] to dst[dstOffset..]; the ranges must not overlap. */
export function copyBytes(dst: Buffer, dstOffset: number, src: Buffer, srcOffset: number, bytes: number): void {
  if (bytes <= 0) return;
  const from = src.subarray(srcOffset, srcOffset + bytes);
  if (bytes < FILL_MIN_BYTES) dst.set(from, dstOffset);
  else dst.fill(from, dstOffset, dstOffset + bytes);
}
