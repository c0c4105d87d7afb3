// A group's fixed sizes, worked out once from its options: the exchange it runs, the routing's
// chunks, and the rows every buffer holds. Everything a call touches is sized from these, so a call
// allocates nothing and a graph of it can be replayed with any routing.
import type { MoeLayout } from './api.js';

/**
 * Entries (token, k) a routing block takes at least: one tile of its threads (kernels/moe-tokens.cu
 * mt_route ranks a tile's entries against each other, so a tile costs its length squared).
 */
const MIN_CHUNK_ENTRIES = 256;
/** Chunks at most: more blocks count at once, and mt_route's last block scans more counts. */
const MAX_CHUNKS = 64;
/**
 * Counts (chunks x buckets) mt_route's last block scans at most: 256 a thread, 16 round trips to L2
 * a pass (DeepSeek-V3's 256 experts: 64 x 256, four).
 */
const SCAN_BUDGET = 1 << 16;

export interface TokenShape {
  world: number;
  rank: number;
  layout: MoeLayout;
  /** N: experts of the job. */
  experts: number;
  /** E: experts a rank. */
  expertsPerRank: number;
  topk: number;
  tokenCap: number;
  rowBytes: number;
  combineRowBytes: number;
  align: number;
  /** The exchange's experts a rank: E (expanded), 1 (compact: one row per token and rank). */
  exchangeExperts: number;
  /** The exchange's majorAlign: the expert alignment (expanded), 1 (compact). */
  exchangeAlign: number;
  /** W · exchangeExperts: the routing's buckets, in the exchange's rank-major order. */
  buckets: number;
  /** Rows a token sends at most: K (expanded), min(K, W) (compact). */
  rowsPerToken: number;
  /** Rows a rank sends at most: every (token, k) (expanded), every (token, rank) (compact). */
  sendRows: number;
  /**
   * Rows a token sends where the routing is even (its K experts drawn alike from all N): K
   * (expanded); compact, the ranks its experts fall on, W · (1 - C(N - E, K) / C(N, K)): DeepSeek-V3
   * on 8 ranks 5.25 of the 8 at most. The exchanges' launches are sized by it (sizeHintBytes): on
   * one GPU a block of the slice grid copies two slices where the send bytes reach, and with the
   * grid sized for the most a compact route can send most blocks found their second slice empty
   * (measured at W = 8 on one H200, 4096 tokens: 1735 µs, 1455 with a third fewer blocks; docs/perf.md).
   */
  evenRowsPerToken: number;
  /** Rows a rank receives at most, padding included. */
  recvRows: number;
  /**
   * Bytes of a send row's metadata: its weight (expanded); K local ids, K weights (compact); then
   * padding to whole 16-byte words, which the exchange copies a tile at a time (with 4-byte rows it
   * took a chunk at a time, bytes at its ends: 140 µs of a 128-token dispatch on two GPUs).
   */
  metaBytes: number;
  /** The routing's chunks of tokens (one block each, those of a call's tokens only) and tokens a chunk. */
  chunks: number;
  chunkTokens: number;
}

export function tokenShape(o: {
  world: number;
  rank: number;
  layout: MoeLayout;
  experts: number;
  topk: number;
  tokenCap: number;
  rowBytes: number;
  combineRowBytes: number;
  align: number;
}): TokenShape {
  const E = o.experts / o.world;
  const expanded = o.layout === 'expanded';
  const exchangeExperts = expanded ? E : 1;
  const exchangeAlign = expanded ? o.align : 1;
  const buckets = o.world * exchangeExperts;
  const perToken = expanded ? o.topk : Math.min(o.topk, o.world);
  const most = Math.max(1, Math.min(Math.ceil((o.tokenCap * o.topk) / MIN_CHUNK_ENTRIES), MAX_CHUNKS, Math.floor(SCAN_BUDGET / buckets)));
  const chunkTokens = Math.max(1, Math.ceil(o.tokenCap / most));
  return {
    ...o,
    expertsPerRank: E,
    exchangeExperts,
    exchangeAlign,
    buckets,
    rowsPerToken: perToken,
    sendRows: o.tokenCap * perToken,
    evenRowsPerToken: expanded ? o.topk : evenRanksPerToken(o.world, E, o.topk),
    // Each expert's block at most its rows plus its alignment (an empty one takes the alignment).
    recvRows: o.world * o.tokenCap * (expanded ? o.topk : 1) + exchangeExperts * exchangeAlign,
    metaBytes: Math.ceil((expanded ? 4 : 8 * o.topk) / 16) * 16,
    chunks: Math.max(1, Math.ceil(o.tokenCap / chunkTokens)),
    chunkTokens,
  };
}

/** The ranks K distinct experts of N = W · E, drawn alike, fall on, on average: W · P(a rank is hit). */
export function evenRanksPerToken(world: number, expertsPerRank: number, topk: number): number {
  const n = world * expertsPerRank;
  let missed = 1;  // C(N - E, K) / C(N, K): none of the K on a given rank
  for (let i = 0; i < topk; i++) missed *= Math.max(0, n - expertsPerRank - i) / (n - i);
  return world * (1 - missed);
}
