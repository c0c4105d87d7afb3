// Host reference for the token-level MoE group (src/moe/), written from the semantics in the README,
// independently of src/moe: every rank builds any rank's tokens, routing and expert outputs from the
// shared seed, and its own expected receive layout and combined rows.
import { bf16ToF32, f32ToBf16 } from '../../src/collectives/reduce.js';
import { hash32, mix, patternBytes, Rng } from './reference.js';

export type TokenPattern = 'random' | 'unbalanced' | 'zeroRank' | 'dropped' | 'oneExpert';
export const TOKEN_PATTERNS: readonly TokenPattern[] = ['random', 'unbalanced', 'zeroRank', 'dropped', 'random'];
export type Dtype = 'f32' | 'bf16' | 'f16';
export const DTYPE_BYTES: Readonly<Record<Dtype, number>> = { f32: 4, bf16: 2, f16: 2 };

export interface TokenJob {
  world: number;
  /** Experts a rank. */
  experts: number;
  topk: number;
  maxTokens: number;
  layout: 'expanded' | 'compact';
  align: number;
  rowBytes: number;
}

/** One rank's tokens in one call: its count and each token's top-k ids (-1 = none). */
export interface Routing {
  tokens: number;
  /** [tokens][K]. */
  ids: number[];
}

/**
 * Rank q's routing in call `call`. random: K distinct experts, a slot -1 one time in 6, a token
 * all -1 one time in 8; unbalanced: most picks from two hot experts; zeroRank: one rank has no
 * tokens; dropped: half the tokens all -1; oneExpert: every token to expert `hot` (slot 0), else -1.
 */
export function routing(job: TokenJob, seed: number, call: number, q: number, pattern: TokenPattern): Routing {
  const { world: W, topk: K, maxTokens } = job;
  const N = W * job.experts;
  const callRng = new Rng(seed, call, 0x70);
  const [hot0, hot1, emptyRank] = [callRng.int(N), callRng.int(N), callRng.int(W)];
  const rng = new Rng(seed, call, q, 0x71);
  let tokens = rng.int(maxTokens + 1);
  if (pattern === 'zeroRank' && q === emptyRank) tokens = 0;
  if (pattern === 'oneExpert') tokens = maxTokens;
  const ids: number[] = [];
  for (let t = 0; t < tokens; t++) {
    const row: number[] = [];
    const dropToken = pattern === 'dropped' ? rng.int(2) === 0 : rng.int(8) === 0;
    for (let k = 0; k < K; k++) {
      if (pattern === 'oneExpert') {
        row.push(k === 0 ? hot0 : -1);
        continue;
      }
      let id = -1;
      for (let tries = 0; tries < 50 && id < 0; tries++) {
        const pick = pattern === 'unbalanced' && rng.int(8) !== 0 ? (rng.int(2) === 0 ? hot0 : hot1) : rng.int(N);
        if (!row.includes(pick)) id = pick;
      }
      row.push(dropToken || rng.int(6) === 0 ? -1 : id);
    }
    ids.push(...row);
  }
  return { tokens, ids };
}

/** Rank q's row for token t: its own byte stream, with (q, t) in its first 8 bytes when it has them. */
export function tokenRow(seed: number, call: number, q: number, t: number, rowBytes: number): Uint8Array {
  const row = patternBytes(mix(seed, call, q, t, 0x72), 0, rowBytes);
  if (rowBytes >= 8) {
    const view = new DataView(row.buffer);
    view.setUint32(0, q, true);
    view.setUint32(4, t, true);
  }
  return row;
}

/** Weight of rank q's (t, k): a multiple of 2^-9 in [-2, 2], exact in f32. */
export const weightOf = (seed: number, call: number, q: number, t: number, k: number): number => ((hash32(mix(seed, call, q, t, k, 0x73)) % 2049) - 1024) / 512;

/** Bits of a finite value of `dtype` with a modest exponent, from a hash: sums stay finite. */
function valueBits(dtype: Dtype, h: number): number {
  const sign = h & 1;
  if (dtype === 'f32') return ((sign << 31) | ((120 + ((h >>> 1) % 15)) << 23) | ((h >>> 5) & 0x7fffff)) >>> 0;
  if (dtype === 'bf16') return (sign << 15) | ((120 + ((h >>> 1) % 15)) << 7) | ((h >>> 5) & 0x7f);
  return (sign << 15) | ((8 + ((h >>> 1) % 15)) << 10) | ((h >>> 5) & 0x3ff);
}

/** Element h of an expert output, as its bits: source rank q's token t at `where` (expanded: the expert; compact: the rank). */
export const outputBits = (dtype: Dtype, seed: number, call: number, q: number, t: number, where: number, h: number): number =>
  valueBits(dtype, hash32(mix(seed, call, q, t, where, h, 0x74)));
export const biasBits = (dtype: Dtype, seed: number, call: number, t: number, h: number): number => valueBits(dtype, hash32(mix(seed, call, t, h, 0x75)));

const f32 = new Float32Array(1);
const u32 = new Uint32Array(f32.buffer);

export function valueOf(dtype: Dtype, bits: number): number {
  if (dtype === 'bf16') return bf16ToF32(bits);
  if (dtype === 'f32') {
    u32[0] = bits;
    return f32[0];
  }
  const e = (bits >>> 10) & 0x1f;
  const m = bits & 0x3ff;
  const mag = e === 0 ? m * 2 ** -24 : (1024 + m) * 2 ** (e - 25);
  return bits & 0x8000 ? -mag : mag;
}

/** f16 bits of an f32 value by arithmetic (not bit tricks): nearest, ties to even. */
function f16Of(x: number): number {
  const sign = x < 0 || Object.is(x, -0) ? 0x8000 : 0;
  const a = Math.abs(x);
  if (a >= 65520) return sign | 0x7c00;
  const e = a === 0 ? -14 : Math.max(Math.floor(Math.log2(a)), -14);
  const ulp = 2 ** (e - 10);
  let q = a / ulp;
  const fl = Math.floor(q);
  q = q - fl > 0.5 || (q - fl === 0.5 && fl % 2 === 1) ? fl + 1 : fl;
  const v = q * ulp;
  if (v === 0) return sign;
  const ve = Math.max(Math.floor(Math.log2(v)), -14);
  if (v < 2 ** -14) return sign | Math.round(v / 2 ** -24);
  return sign | ((ve + 15) << 10) | (Math.round(v / 2 ** (ve - 10)) - 1024);
}

export function bitsOf(dtype: Dtype, v: number): number {
  if (dtype === 'bf16') return f32ToBf16(v);
  if (dtype === 'f32') {
    f32[0] = v;
    return u32[0];
  }
  return f16Of(v);
}

/** One received row: who sent it, which token, which k (expanded) and for which local expert. */
export interface Received {
  src: number;
  token: number;
  k: number;
  /** expanded: the local expert; compact: -1. */
  expert: number;
}

/** Rank me's receive layout: its rows in order, (null: a padding row), and each local expert's count and start. */
export function receiveLayout(job: TokenJob, routings: Routing[], me: number): { rows: (Received | null)[]; counts: number[]; starts: number[] } {
  const { world: W, experts: E, topk: K } = job;
  const rows: (Received | null)[] = [];
  const counts = new Array<number>(E).fill(0);
  const starts = new Array<number>(E).fill(0);
  if (job.layout === 'compact') {
    for (let src = 0; src < W; src++) {
      const r = routings[src];
      for (let t = 0; t < r.tokens; t++) {
        const mine = r.ids.slice(t * K, (t + 1) * K).filter((id) => id >= 0 && Math.floor(id / E) === me);
        for (const id of mine) counts[id - me * E]++;
        if (mine.length > 0) rows.push({ src, token: t, k: -1, expert: -1 });
      }
    }
    return { rows, counts, starts };
  }
  for (let e = 0; e < E; e++) {
    starts[e] = rows.length;
    for (let src = 0; src < W; src++) {
      const r = routings[src];
      for (let i = 0; i < r.tokens * K; i++) if (r.ids[i] === me * E + e) rows.push({ src, token: Math.floor(i / K), k: i % K, expert: e });
    }
    counts[e] = rows.length - starts[e];
    const span = counts[e] === 0 ? job.align : Math.ceil(counts[e] / job.align) * job.align;
    while (rows.length < starts[e] + span) rows.push(null);
  }
  return { rows, counts, starts };
}

/**
 * Rank me's combined rows, as element bits: per token, its terms in top-k order (expanded: each
 * k's output times its weight, rounded to f32; compact: each rank's output, in the order the
 * ranks first appear), then the bias; the first as it is, the rest added in f32; rounded once.
 */
export function combined(job: TokenJob, r: Routing, me: number, o: { dtype: Dtype; hidden: number; seed: number; call: number; weights: boolean; bias: boolean }): number[] {
  const { experts: E, topk: K } = job;
  const out: number[] = [];
  for (let t = 0; t < r.tokens; t++) {
    const ids = r.ids.slice(t * K, (t + 1) * K);
    for (let h = 0; h < o.hidden; h++) {
      const terms: number[] = [];
      ids.forEach((id, k) => {
        if (id < 0) return;
        if (job.layout === 'compact') {
          const rank = Math.floor(id / E);
          if (ids.slice(0, k).some((x) => x >= 0 && Math.floor(x / E) === rank)) return;
          terms.push(valueOf(o.dtype, outputBits(o.dtype, o.seed, o.call, me, t, rank, h)));
          return;
        }
        const y = valueOf(o.dtype, outputBits(o.dtype, o.seed, o.call, me, t, id, h));
        terms.push(o.weights ? Math.fround(weightOf(o.seed, o.call, me, t, k) * y) : y);
      });
      if (o.bias) terms.push(valueOf(o.dtype, biasBits(o.dtype, o.seed, o.call, t, h)));
      let acc = 0;
      terms.forEach((v, i) => (acc = i === 0 ? v : Math.fround(acc + v)));
      out.push(bitsOf(o.dtype, acc));
    }
  }
  return out;
}
