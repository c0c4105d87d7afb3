// Split matrices for the benchmark: how many rows each rank sends to each peer, and with experts
// (the MoE ops) to each (peer, expert) chunk. Deterministic from a seed, so a sweep (and a rerun)
// measures the same layouts.

export const SPLITS_KINDS = ['uniform', 'zipf'] as const;
export type SplitsKind = (typeof SPLITS_KINDS)[number];

/** Exponent of the zipf law over destinations: weight of the k-th hottest peer ∝ 1 / k^1.1. */
export const DEFAULT_ZIPF_EXPONENT = 1.1;

export interface SplitsOptions {
  kind: SplitsKind;
  worldSize: number;
  /** Input bytes per rank; every rank sends floor(bytesPerRank / rowBytes) rows. */
  bytesPerRank: number;
  rowBytes: number;
  seed: number;
  zipfExponent?: number;
  /**
   * Experts per rank, E (default 1): every rank's rows are split over W·E (peer, expert) chunks, as
   * the split kind splits them over W peers with E = 1 (which gives the same matrix as before).
   */
  experts?: number;
}

export interface Splits {
  /** rows[src][dst]: rows rank `src` sends to rank `dst`. Every row of the matrix sums to rowsPerRank. */
  readonly rows: readonly (readonly number[])[];
  readonly rowsPerRank: number;
  /** Largest number of rows any rank receives: the output capacity the matrix needs. */
  readonly maxRowsReceived: number;
  /** E: experts per rank. */
  readonly experts: number;
  /**
   * chunks[src][peer·E + e]: rows rank `src` sends to expert e of `peer` (a dispatch's inSplits,
   * rank-major); each row of `rows` is the sum over its peer's experts. The same arrays as `rows` when E = 1.
   */
  readonly chunks: readonly (readonly number[])[];
}

export function makeSplits(opts: SplitsOptions): Splits {
  const { kind, worldSize: w, bytesPerRank, rowBytes, seed, experts = 1 } = opts;
  if (!Number.isInteger(w) || w < 1) throw new RangeError(`worldSize must be a positive integer, got ${w}`);
  if (!Number.isInteger(rowBytes) || rowBytes < 1) throw new RangeError(`rowBytes must be a positive integer, got ${rowBytes}`);
  if (!Number.isInteger(experts) || experts < 1) throw new RangeError(`experts must be a positive integer, got ${experts}`);
  const rowsPerRank = Math.floor(bytesPerRank / rowBytes);
  // Destinations: the W·E (peer, expert) chunks, in inSplits order (peer·E + e).
  const n = w * experts;
  let chunks: number[][];
  if (kind === 'uniform') {
    chunks = Array.from({ length: w }, (_, src) => uniformRow(n, rowsPerRank, src * experts));
  } else {
    const weights = zipfWeights(n, opts.zipfExponent ?? DEFAULT_ZIPF_EXPONENT);
    const random = mulberry32(seed);
    // Each sender ranks its destinations by its own permutation, so the hot receivers (and hot
    // experts) vary by sender, as tokens of different ranks favour different experts, rather than
    // all piling onto rank 0.
    chunks = Array.from({ length: w }, () => {
      const order = shuffled(n, random);
      const byHotness = apportion(rowsPerRank, weights);
      const row = new Array<number>(n);
      order.forEach((dst, k) => (row[dst] = byHotness[k]));
      return row;
    });
  }
  const rows = experts === 1 ? chunks : chunks.map((row) =>
    Array.from({ length: w }, (_, peer) => row.slice(peer * experts, (peer + 1) * experts).reduce((a, b) => a + b, 0)));
  let maxRowsReceived = 0;
  for (let dst = 0; dst < w; dst++) {
    let received = 0;
    for (let src = 0; src < w; src++) received += rows[src][dst];
    maxRowsReceived = Math.max(maxRowsReceived, received);
  }
  return { rows, rowsPerRank, maxRowsReceived, experts, chunks };
}

/**
 * rows/n to each of n destinations; the remainder's extra rows go to destinations first, first+1, …
 * (sender s starts at its own chunk s·E), so receivers stay balanced too.
 */
function uniformRow(n: number, rows: number, first: number): number[] {
  const base = Math.floor(rows / n);
  const extra = rows % n;
  return Array.from({ length: n }, (_, dst) => base + ((dst - first + n) % n < extra ? 1 : 0));
}

function zipfWeights(w: number, exponent: number): number[] {
  const raw = Array.from({ length: w }, (_, k) => 1 / (k + 1) ** exponent);
  const sum = raw.reduce((a, b) => a + b, 0);
  return raw.map((x) => x / sum);
}

/** Whole numbers proportional to `weights` summing to exactly `total` (largest remainder; ties to the lower index). */
function apportion(total: number, weights: number[]): number[] {
  const quotas = weights.map((p) => total * p);
  const out = quotas.map(Math.floor);
  let left = total - out.reduce((a, b) => a + b, 0);
  const byRemainder = quotas.map((q, i) => i).sort((a, b) => quotas[b] - out[b] - (quotas[a] - out[a]) || a - b);
  for (const i of byRemainder) {
    if (left-- <= 0) break;
    out[i]++;
  }
  return out;
}

function shuffled(n: number, random: () => number): number[] {
  const a = Array.from({ length: n }, (_, i) => i);
  for (let i = n - 1; i > 0; i--) {
    const j = Math.floor(random() * (i + 1));
    [a[i], a[j]] = [a[j], a[i]];
  }
  return a;
}

/** A small seeded generator with uniform output in [0, 1); plenty for layouts and row sampling. */
export function mulberry32(seed: number): () => number {
  let s = seed >>> 0;
  return () => {
    s = (s + 0x6d2b79f5) | 0;
    let t = Math.imul(s ^ (s >>> 15), 1 | s);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}
