// The benchmark's input bytes: pseudo-random, yet any rank can recompute any byte of any rank's
// input from (key, rank, offset) alone. That lets a receiver check sampled rows from every source
// without a host-side exchange.
import type { Comm, DeviceBuffer } from '../backends/backend.js';

/** Host staging size for filling device buffers (multiple of 4). */
const FILL_CHUNK_BYTES = 16 << 20;

/** One rank's input stream: 32-bit words, word i = mix(base + i·golden). */
export class InputPattern {
  readonly #base: number;

  constructor(key: number, rank: number) {
    this.#base = fmix32((key ^ Math.imul(rank + 1, 0x85ebca6b)) >>> 0);
  }

  /** Writes the first `bytes` bytes of the pattern into `buf`, through a bounded host staging buffer. */
  fill(comm: Comm, buf: DeviceBuffer, bytes: number): void {
    const words = new Uint32Array(Math.ceil(Math.min(FILL_CHUNK_BYTES, bytes) / 4));
    for (let offset = 0; offset < bytes; offset += FILL_CHUNK_BYTES) {
      const first = offset / 4;
      for (let i = 0; i < words.length; i++) words[i] = this.#word(first + i);
      const n = Math.min(FILL_CHUNK_BYTES, bytes - offset);
      comm.write(buf, new Uint8Array(words.buffer, 0, n), offset);
    }
  }

  /** The `length` bytes at byte `offset` of the pattern (as `fill` lays them out, little-endian words). */
  bytes(offset: number, length: number): Uint8Array {
    const out = new Uint8Array(length);
    for (let i = 0; i < length; i++) {
      const b = offset + i;
      out[i] = (this.#word(Math.floor(b / 4)) >>> ((b % 4) * 8)) & 0xff;
    }
    return out;
  }

  #word(index: number): number {
    return fmix32((this.#base + Math.imul(index, 0x9e3779b1)) >>> 0);
  }
}

/** MurmurHash3's finaliser: a bijection on 32-bit words with good avalanche. */
export function fmix32(h: number): number {
  h ^= h >>> 16;
  h = Math.imul(h, 0x85ebca6b);
  h ^= h >>> 13;
  h = Math.imul(h, 0xc2b2ae35);
  h ^= h >>> 16;
  return h >>> 0;
}
