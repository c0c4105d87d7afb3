// Host reference for the MoE calls (dispatch = allToAllV2d, combine = allToAllV2dOffset), written
// from the semantics in the README, independently of src/collectives/exchange-rules.ts: every rank
// computes any rank's splits and rows from the shared seed, and its own expected output and offsets.
// Splits and rows are hashes of their coordinates, so a rank computes only what it needs, O(W·E)
// (with W = 72 and E = 256, the whole matrix on every rank would dominate the test).
import { hash32, mix, patternBytes, type Rng } from './reference.js';

export type MoePattern = 'random' | 'zeroExpert' | 'zeroRank' | 'zero' | 'oneExpert' | 'sparse';
export const MOE_PATTERNS: readonly MoePattern[] = ['random', 'zeroExpert', 'random', 'zeroRank', 'sparse', 'oneExpert', 'zero'];

/** C(q, r, e) = rows rank q sends to expert e of rank r: a rule, with entries overridden by set(). */
export class MoeSplits {
  readonly world: number;
  readonly experts: number;
  readonly #rule: (q: number, r: number, e: number) => number;
  readonly #set = new Map<number, number>();

  constructor(world: number, experts: number, rule: (q: number, r: number, e: number) => number) {
    this.world = world;
    this.experts = experts;
    this.#rule = rule;
  }

  at(q: number, r: number, e: number): number {
    return this.#set.get((q * this.world + r) * this.experts + e) ?? this.#rule(q, r, e);
  }

  set(q: number, r: number, e: number, rows: number): this {
    this.#set.set((q * this.world + r) * this.experts + e, rows);
    return this;
  }

  /** Rank q's counts for rank r's experts, then sets them. */
  setRow(q: number, r: number, rows: readonly number[]): this {
    rows.forEach((n, e) => this.set(q, r, e, n));
    return this;
  }

  /** Rank q's inSplits: int64[W·E], index r·E + e. */
  row(q: number): number[] {
    const out: number[] = [];
    for (let r = 0; r < this.world; r++) for (let e = 0; e < this.experts; e++) out.push(this.at(q, r, e));
    return out;
  }

  copy(): MoeSplits {
    const c = new MoeSplits(this.world, this.experts, this.#rule);
    for (const [k, v] of this.#set) c.#set.set(k, v);
    return c;
  }
}

/** Every entry in [0, maxRows]: random, or with an expert, a rank or everyone left with nothing, or all rows to one expert. */
export function makeMoeSplits(rng: Rng, world: number, experts: number, pattern: MoePattern, maxRows: number): MoeSplits {
  const key = rng.next();
  const [tr, te, sender] = [rng.int(world), rng.int(experts), rng.int(2) === 0]; // zeroRank: one that sends, or receives, nothing
  const h = (q: number, r: number, e: number, salt: number): number => hash32(mix(key, q, r, e, salt));
  const random = (q: number, r: number, e: number): number => h(q, r, e, 1) % (maxRows + 1);
  const rules: Record<MoePattern, (q: number, r: number, e: number) => number> = {
    random,
    sparse: (q, r, e) => (h(q, r, e, 2) % 4 === 0 ? random(q, r, e) : 0),
    zeroExpert: (q, r, e) => (e === te ? 0 : random(q, r, e)), // expert te of every rank receives nothing
    zeroRank: (q, r, e) => ((sender ? q : r) === tr ? 0 : random(q, r, e)),
    zero: () => 0,
    oneExpert: (q, r, e) => (r === tr && e === te ? 1 + (h(q, r, e, 3) % maxRows) : 0), // all rows to expert te of rank tr
  };
  return new MoeSplits(world, experts, rules[pattern]);
}

/** Key of rank q's input rows in call `call`, payload `payload` (plans move several). */
export const moeInputKey = (seed: number, call: number, q: number, payload = 0): number => mix(seed, call, q, payload, 0x2d);

/** The bytes of rank q's rows for expert e of rank r: each chunk its own stream, so no rank needs another's send offsets. */
export const chunkBytes = (key: number, r: number, e: number, rows: number, rowBytes: number): Uint8Array => patternBytes(mix(key, r, e), 0, rows * rowBytes);

/** Rank q's whole input: its chunks packed in (r, e) order (negative counts, of the error cases, hold no rows). */
export function moeInput(key: number, C: MoeSplits, q: number, rowBytes: number): Uint8Array {
  const out = new Uint8Array(C.row(q).reduce((a, b) => a + Math.max(b, 0), 0) * rowBytes);
  let at = 0;
  for (let r = 0; r < C.world; r++) {
    for (let e = 0; e < C.experts; e++) {
      const rows = C.at(q, r, e);
      if (rows <= 0) continue;
      out.set(chunkBytes(key, r, e, rows, rowBytes), at);
      at += rows * rowBytes;
    }
  }
  return out;
}

export const rowsSent = (C: MoeSplits, q: number): number => C.row(q).reduce((a, b) => a + b, 0);

/** Where dispatch puts (src, e) in rank me's output (start[src][e]), and the rows its layout takes in all. */
export function dispatchLayout(C: MoeSplits, me: number, align: number): { start: number[][]; total: number } {
  const start = Array.from({ length: C.world }, () => new Array<number>(C.experts).fill(0));
  let pos = 0;
  for (let e = 0; e < C.experts; e++) {
    const block = pos;
    for (let src = 0; src < C.world; src++) {
      start[src][e] = pos;
      pos += C.at(src, me, e);
    }
    const used = pos - block;
    pos = block + (used === 0 ? align : Math.ceil(used / align) * align);
  }
  return { start, total: pos };
}

/** dispatch's outSplitsOffsets of rank me: int64[2][E·W], index e·W + src. */
export function dispatchOffsets(C: MoeSplits, me: number, align: number): bigint[] {
  const [W, E] = [C.world, C.experts];
  const { start } = dispatchLayout(C, me, align);
  const out = new Array<bigint>(2 * W * E);
  for (let e = 0; e < E; e++) {
    for (let src = 0; src < W; src++) {
      out[e * W + src] = BigInt(C.at(src, me, e));
      out[W * E + e * W + src] = BigInt(start[src][e]);
    }
  }
  return out;
}

/** combine's outSplitsOffsets of rank me when every rank returns what it received: int64[2][W·E], index peer·E + e. */
export function combineOffsets(C: MoeSplits, me: number): bigint[] {
  const [W, E] = [C.world, C.experts];
  const out = new Array<bigint>(2 * W * E);
  let pos = 0;
  for (let r = 0; r < W; r++) {
    for (let e = 0; e < E; e++) {
      out[r * E + e] = BigInt(C.at(me, r, e));
      out[W * E + r * E + e] = BigInt(pos);
      pos += C.at(me, r, e);
    }
  }
  return out;
}

/**
 * The bytes rank me's dispatch output must hold: `poison` (what it held before: padding rows and
 * everything past the layout stay so), with each source's rows (stream key(src)) at their place.
 */
export function expectedDispatch(key: (q: number) => number, C: MoeSplits, me: number, align: number, rowBytes: number, poison: Uint8Array): Uint8Array {
  const out = poison.slice();
  const { start } = dispatchLayout(C, me, align);
  for (let src = 0; src < C.world; src++) {
    for (let e = 0; e < C.experts; e++) {
      const rows = C.at(src, me, e);
      if (rows > 0) out.set(chunkBytes(key(src), me, e, rows, rowBytes), start[src][e] * rowBytes);
    }
  }
  return out;
}

/** Where dispatch's layout of receiver r first passes `cap` rows: the chunk's (peer, expert), or the padding's (-1, e). */
export function dispatchOutputFault(C: MoeSplits, r: number, align: number, cap: number): { peer: number; expert: number; needed: number } | undefined {
  const { start, total } = dispatchLayout(C, r, align);
  for (let e = 0; e < C.experts; e++) {
    for (let src = 0; src < C.world; src++) if (start[src][e] + C.at(src, r, e) > cap) return { peer: src, expert: e, needed: total };
    const end = e + 1 < C.experts ? start[0][e + 1] : total;
    if (end > cap) return { peer: -1, expert: e, needed: total };
  }
  return undefined;
}

/** The first (r, e), in (r, e) order, where a running sum of `row` (index r·E + e) passes `cap`. */
export function firstPast(row: readonly bigint[], experts: number, cap: bigint): { peer: number; expert: number } {
  let sum = 0n;
  const i = row.findIndex((x) => (sum += x) > cap);
  return { peer: Math.floor(i / experts), expert: i % experts };
}
