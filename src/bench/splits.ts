// Split matrices for the benchmark: how many rows each rank sends to each peer. Deterministic from a
// seed, so a sweep (and a rerun) measures the same layouts.

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
}

export interface Splits {
  /** rows[src][dst]: rows rank `src` sends to rank `dst`. Every row of the matrix sums to rowsPerRank. */
  readonly rows: readonly (readonly number[])[];
  readonly rowsPerRank: number;
  /** Largest number of rows any rank receives: the output capacity the matrix needs. */
  readonly maxRowsReceived: number;
}

export function makeSplits(opts: SplitsOptions): Splits {
  const { kind, worldSize: w, bytesPerRank, rowBytes, seed } = opts;
  if (!Number.isInteger(w) || w < 1) throw new RangeError(`worldSize must be a positive integer, got ${w}`);
  if (!Number.isInteger(rowBytes) || rowBytes < 1) throw new RangeError(`rowBytes must be a positive integer, got ${rowBytes}`);
  const rowsPerRank = Math.floor(bytesPerRank / rowBytes);
  let rows: number[][];
  if (kind === 'uniform') {
    rows = Array.from({ length: w }, (_, src) => uniformRow(w, rowsPerRank, src));
  } else {
    const weights = zipfWeights(w, opts.zipfExponent ?? DEFAULT_ZIPF_EXPONENT);
    const random = mulberry32(seed);
    // Each sender ranks its destinations by its own permutation, so the hot receivers vary by sender
    // (as tokens of different ranks favour different experts) rather than all piling onto rank 0.
    rows = Array.from({ length: w }, () => {
      const order = shuffled(w, random);
      const byHotness = apportion(rowsPerRank, weights);
      const row = new Array<number>(w);
      order.forEach((dst, k) => (row[dst] = byHotness[k]));
      return row;
    });
  }
  let maxRowsReceived = 0;
  for (let dst = 0; dst < w; dst++) {
    let received = 0;
    for (let src = 0; src < w; src++) received += rows[src][dst];
    maxRowsReceived = Math.max(maxRowsReceived, received);
  }
  return { rows, rowsPerRank, maxRowsReceived };
}

/** rows/W to every peer; sender s gives the remainder's extra rows to peers s, s+1, … so receivers stay balanced too. */
function uniformRow(w: number, rows: number, src: number): number[] {
  const base = Math.floor(rows / w);
  const extra = rows % w;
  return Array.from({ length: w }, (_, dst) => base + ((dst - src + w) % w < extra ? 1 : 0));
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
