// What `bench --op moe-*` checks of each token count before timing it, against the routing every
// rank can work out from the seed: the counts, the received rows where they must land, and the
// combine's reduction of them. x rows hold small integers (exact in bf16) that name their rank and
// token, and the combine's y is the dispatch's recvX, so a row sent to the wrong place, or a term
// reduced into the wrong token, changes a value the host can predict to the bit.
import type { Comm, DeviceBuffer } from '../backends/backend.js';
import { bf16ToF32, f32ToBf16 } from '../collectives/reduce.js';
import type { MoeLayout } from '../moe/api.js';
import { WrongResultError, type WrongByte } from './verify.js';

/** Element h of token t's row on rank q: an integer in 1..255, exact in bf16 and in f32 sums. */
export function tokenValue(q: number, t: number, h: number): number {
  return ((q * 131 + t * 7 + h * 3) % 255) + 1;
}

/** Rank q's x: `tokens` rows of `hidden` bf16 elements, tokenValue's. */
export function tokenRows(q: number, tokens: number, hidden: number): Uint16Array {
  const rows = new Uint16Array(tokens * hidden);
  for (let t = 0; t < tokens; t++) for (let h = 0; h < hidden; h++) rows[t * hidden + h] = f32ToBf16(tokenValue(q, t, h));
  return rows;
}

/** At most this many received rows are read back a token count (each a device read on cuda). */
const ROW_SAMPLES = 512;
/** Elements read of each sampled row: enough to tell its rank and token. */
const ROW_ELEMENTS = 8;
/** At most this many tokens' combined rows are compared whole. */
const TOKEN_SAMPLES = 256;

export interface TokenCheck {
  comm: Comm;
  op: 'moe-dispatch' | 'moe-combine';
  layout: MoeLayout;
  /** Every rank's ids, [tokens][topk] each. */
  all: readonly BigInt64Array[];
  expertsPerRank: number;
  topk: number;
  hidden: number;
  tokens: number;
}

/** Up to `most` of `n` indices, evenly spread, the first and last among them. */
function spread(n: number, most: number): number[] {
  if (n <= most) return Array.from({ length: n }, (_, i) => i);
  return Array.from({ length: most }, (_, i) => Math.round((i * (n - 1)) / (most - 1)));
}

function wrong(c: TokenCheck, buffer: WrongByte['buffer'], offset: number, detail: string): never {
  throw new WrongResultError({ rank: c.comm.rank, form: 'eager', op: c.op, bytesPerRank: c.tokens * c.hidden * 2, wrong: { buffer, offset, detail } });
}

function int64s(comm: Comm, buf: DeviceBuffer, n: number): number[] {
  return Array.from(new BigInt64Array(comm.read(buf, 0, 8 * n).slice().buffer), Number);
}

/**
 * The rows this rank must receive, in recvX's order: expanded, for each local expert its (rank,
 * token) selections, ranks in order, tokens in order; compact, each (rank, token) naming one of
 * this rank's experts once, likewise in order.
 */
function expectedRows(c: TokenCheck): { q: number; t: number }[][] {
  const [me, E, K] = [c.comm.rank, c.expertsPerRank, c.topk];
  const mine = (g: number) => g >= me * E && g < (me + 1) * E;
  if (c.layout === 'compact') {
    const rows: { q: number; t: number }[] = [];
    c.all.forEach((ids, q) => {
      for (let t = 0; t < c.tokens; t++) if (ids.subarray(t * K, (t + 1) * K).some((g) => mine(Number(g)))) rows.push({ q, t });
    });
    return [rows];
  }
  const blocks = Array.from({ length: E }, () => [] as { q: number; t: number }[]);
  c.all.forEach((ids, q) => {
    for (let t = 0; t < c.tokens; t++) for (let k = 0; k < K; k++) if (mine(Number(ids[t * K + k]))) blocks[Number(ids[t * K + k]) - me * E]!.push({ q, t });
  });
  return blocks;
}

/**
 * After the first dispatch: expertCounts against the ids' histogram, then sampled rows of recvX
 * against the row each position must hold (expanded: at expertOffsets; compact: numRecvRows of them).
 */
export function checkDispatch(c: TokenCheck, b: { recvX: DeviceBuffer; expertCounts: DeviceBuffer; expertOffsets: DeviceBuffer; numRecvRows: DeviceBuffer }): void {
  const { comm, hidden } = c;
  const E = c.expertsPerRank;
  const blocks = expectedRows(c);
  const counts = int64s(comm, b.expertCounts, E);
  // expertCounts: expanded, the rows each expert received; compact, the (token, k) entries naming it.
  const want = new Array<number>(E).fill(0);
  for (const ids of c.all) {
    for (const g of ids.subarray(0, c.tokens * c.topk)) if (Number(g) >= comm.rank * E && Number(g) < (comm.rank + 1) * E) want[Number(g) - comm.rank * E]! += 1;
  }
  counts.forEach((n, e) => {
    if (n !== want[e]) wrong(c, 'expertCounts', 8 * e, `expert ${comm.rank * E + e} received ${n} rows, the ids give ${want[e]}`);
  });
  const starts = c.layout === 'expanded' ? int64s(comm, b.expertOffsets, E) : [0];
  if (c.layout === 'compact') {
    const [rows] = int64s(comm, b.numRecvRows, 1);
    if (rows !== blocks[0]!.length) wrong(c, 'numRecvRows', 0, `${rows} rows received, the ids give ${blocks[0]!.length} (token, rank) rows`);
  }
  const places = blocks.flatMap((rows, e) => rows.map((row, i) => ({ ...row, e, at: starts[e]! + i })));
  const n = Math.min(ROW_ELEMENTS, hidden);
  for (const i of spread(places.length, ROW_SAMPLES)) {
    const { q, t, e, at } = places[i]!;
    const got = new Uint16Array(comm.read(b.recvX, at * hidden * 2, n * 2).slice().buffer);
    for (let h = 0; h < n; h++) {
      if (bf16ToF32(got[h]!) !== tokenValue(q, t, h)) {
        const which = c.layout === 'expanded' ? `expert ${comm.rank * E + e}'s row ${at - starts[e]!} (recvX row ${at})` : `recvX row ${at}`;
        wrong(c, 'recvX', (at * hidden + h) * 2, `${which} should be rank ${q}'s token ${t}: element ${h} is ${bf16ToF32(got[h]!)}, not ${tokenValue(q, t, h)}`);
      }
    }
  }
}

/**
 * After a combine whose y is the dispatch's recvX: each sampled token's row of `out` against the
 * reduction of its own x row in the group's order. expanded: the top-k terms weighted by `weight`,
 * each product and each sum rounded to f32; compact (no weights): its row once per rank it names.
 * Then rounded once to bf16.
 */
export function checkCombine(c: TokenCheck, out: DeviceBuffer, weight: number): void {
  const { comm, hidden, topk: K } = c;
  const me = comm.rank;
  const ids = c.all[me]!;
  const got = new Uint16Array(comm.read(out, 0, c.tokens * hidden * 2).slice().buffer);
  for (const t of spread(c.tokens, TOKEN_SAMPLES)) {
    const named = ids.subarray(t * K, (t + 1) * K);
    const terms = c.layout === 'expanded' ? named.length : new Set(Array.from(named, (g) => Math.floor(Number(g) / c.expertsPerRank))).size;
    for (let h = 0; h < hidden; h++) {
      const v = Math.fround(c.layout === 'expanded' ? Math.fround(weight * tokenValue(me, t, h)) : tokenValue(me, t, h));
      let sum = v;
      for (let k = 1; k < terms; k++) sum = Math.fround(sum + v);
      const want = f32ToBf16(sum);
      if (got[t * hidden + h] !== want) {
        wrong(c, 'out', (t * hidden + h) * 2, `token ${t}, element ${h}: ${bf16ToF32(got[t * hidden + h]!)}, the ${terms} term${terms === 1 ? '' : 's'} of its own row give ${bf16ToF32(want)}`);
      }
    }
  }
}
