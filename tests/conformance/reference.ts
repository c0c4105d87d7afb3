// Host reference for the conformance suite: deterministic data and splits from a shared seed, so
// every rank can build any rank's input and compute its own expected output without talking.
import { fmix32 } from '../../src/bench/data.js';

/** murmur3's 32-bit finaliser: a cheap stateless hash with good avalanche (shared with the bench). */
export const hash32 = fmix32;

/** Combines numbers into one 32-bit key. */
export function mix(...xs: number[]): number {
  let h = 0x9e3779b9;
  for (const x of xs) h = hash32(h ^ hash32(x >>> 0) ^ Math.floor(x / 4294967296));
  return h;
}

/** Small deterministic generator (hash of a counter): same seed, same sequence, on every rank. */
export class Rng {
  #key: number;
  #n = 0;
  constructor(...seed: number[]) {
    this.#key = mix(...seed);
  }
  next(): number {
    return hash32(this.#key ^ hash32(++this.#n));
  }
  /** Integer in [0, n). */
  int(n: number): number {
    return Math.floor((this.next() / 4294967296) * n);
  }
  pick<T>(xs: readonly T[]): T {
    return xs[this.int(xs.length)];
  }
}

/** Bytes [start, start+len) of the endless stream named `key` (any range, no prefix needed). */
export function patternBytes(key: number, start: number, len: number): Uint8Array {
  const out = new Uint8Array(len);
  let word = 0;
  let wordIndex = -1;
  for (let i = 0; i < len; i++) {
    const b = start + i;
    const wi = b >>> 2;
    if (wi !== wordIndex) {
      wordIndex = wi;
      word = hash32(key ^ Math.imul(wi + 1, 0x9e3779b9));
    }
    out[i] = word >>> ((b & 3) * 8);
  }
  return out;
}

/** What outputs are filled with before a call: any byte still equal to it was not written. */
export function poisonBytes(salt: number, len: number): Uint8Array {
  const out = new Uint8Array(len);
  for (let i = 0; i < len; i++) out[i] = (0xa5 ^ salt ^ Math.imul(i, 131)) & 0xff;
  return out;
}

export type SplitsPattern = 'random' | 'sparse' | 'zero' | 'skew' | 'self';
export const PATTERNS: readonly SplitsPattern[] = ['random', 'sparse', 'zero', 'skew', 'self'];
export const ROW_SIZES = [1, 3, 7, 13, 16, 17, 48, 255, 1000, 1024, 4099, 16384] as const;

/** S[p][r] = rows rank p sends rank r; every entry in [0, maxRows]. */
export function makeSplits(rng: Rng, world: number, pattern: SplitsPattern, maxRows: number): number[][] {
  const target = rng.int(world);
  return Array.from({ length: world }, (_, p) =>
    Array.from({ length: world }, (_, r) => {
      switch (pattern) {
        case 'random':
          return rng.int(maxRows + 1);
        case 'sparse':
          return rng.int(3) === 0 ? rng.int(maxRows + 1) : 0;
        case 'zero':
          return 0;
        case 'skew': // all-to-one: every rank sends everything to `target`
          return r === target ? 1 + rng.int(maxRows) : 0;
        case 'self':
          return r === p ? rng.int(maxRows + 1) : 0;
      }
    }),
  );
}

export const rowSum = (S: number[][], p: number): number => S[p].reduce((a, b) => a + b, 0);
export const colSum = (S: number[][], r: number): number => S.reduce((a, row) => a + row[r], 0);

/** First row of rank q's input that goes to rank r. */
export const sendOffset = (S: number[][], q: number, r: number): number => S[q].slice(0, r).reduce((a, b) => a + b, 0);

/** Key of rank q's input stream in call `call`. */
export const inputKey = (seed: number, call: number, q: number): number => mix(seed, call, q, 0x1f);

/** The bytes rank `me` must hold after the call: rows from each source, in source order. */
export function expectedOutput(seed: number, call: number, S: number[][], me: number, rowBytes: number): Uint8Array {
  const parts = S.map((row, q) => patternBytes(inputKey(seed, call, q), sendOffset(S, q, me) * rowBytes, row[me] * rowBytes));
  const out = new Uint8Array(parts.reduce((a, p) => a + p.length, 0));
  let at = 0;
  for (const p of parts) {
    out.set(p, at);
    at += p.length;
  }
  return out;
}

/** int64[2][W]: row 0 rows received from each source, row 1 the exclusive prefix sum. */
export function expectedSplitsOffsets(S: number[][], me: number): bigint[] {
  const W = S.length;
  const counts = S.map((row) => BigInt(row[me]));
  const offsets: bigint[] = [];
  let sum = 0n;
  for (let q = 0; q < W; q++) {
    offsets.push(sum);
    sum += counts[q];
  }
  return [...counts, ...offsets];
}
