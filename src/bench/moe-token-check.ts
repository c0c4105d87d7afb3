// What `bench --op moe-*` checks of each token count before timing it, against the routing every
// rank can work out from the seed: the counts, the received rows where they must land, and the
// combine's reduction of them. x rows hold small integers (exact in bf16) that name their rank and
// token, and the combine's y is the dispatch's recvX, so a row sent to the wrong place, or a term
// reduced into the wrong token, changes a value the host can predict to the bit.
import type { Comm, DeviceBuffer } from '../backends/backend.js';
import { bf16ToF32, f32ToBf16 } from '../collectives/reduce.js';
import type { MoeLayout } from '../moe/api.js';
import { WrongResultError, type WrongByte } from './verify.js';

/**
 * Element h of token t's row on rank q: an integer in 1..256, exact in bf16 and in f32 sums. The
 * first three name the row (rank, then the token in base 251: distinct up to 63001 tokens a rank);
 * the rest vary along it.
 */
export function tokenValue(q: number, t: number, h: number): number {
  if (h === 0) return (q % 256) + 1;
  if (h === 1) return (t % 251) + 1;
  if (h === 2) return (Math.floor(t / 251) % 251) + 1;
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
/** Elements read of each sampled row: its rank and token (the first three), and some of the rest. */
const ROW_ELEMENTS = 8;
/** At most this many tokens' combined rows are compared whole. */
const TOKEN_SAMPLES = 256;

/** What a token count's checks are made from; tokenCheck() adds the receive layout they share. */
export interface TokenCheckFields {
  comm: Comm;
  op: 'moe-dispatch' | 'moe-combine';
  layout: MoeLayout;
  /** Every rank's ids, [tokens][topk] each. */
  all: readonly BigInt64Array[];
  expertsPerRank: number;
  topk: number;
  hidden: number;
  tokens: number;
  /** The group's expertAlignment (expanded): each expert's block starts at a multiple of it, an empty one takes it. */
  align: number;
  /** What is checked: the first call, or a graph's replays (default eager). */
  form?: 'eager' | 'graph';
}

/** This rank's receive layout: each block's start (expanded: per local expert; compact: one), the rows' places, and the rows it spans (padding included). */
export interface ReceiveLayout {
  starts: number[];
  places: Place[];
  rows: number;
}

export interface TokenCheck extends TokenCheckFields {
  /** Worked out once a token count: every check and poison of it reads the same places. */
  readonly receive: ReceiveLayout;
}

/** A token count's checks, with the layout where its rows must land. */
export function tokenCheck(fields: TokenCheckFields): TokenCheck {
  return { ...fields, receive: layoutOf(fields) };
}

/** Where each row this rank receives must land: recvX row `at` holds rank `q`'s token `t` (of local expert `e`). */
interface Place {
  q: number;
  t: number;
  e: number;
  at: number;
}

function layoutOf(c: TokenCheckFields): ReceiveLayout {
  const blocks = expectedRows(c);
  const starts: number[] = [];
  let at = 0;
  for (const block of blocks) {
    starts.push(at);
    at += c.layout === 'compact' ? block.length : block.length === 0 ? c.align : Math.ceil(block.length / c.align) * c.align;
  }
  const places = blocks.flatMap((rows, e) => rows.map((row, i) => ({ ...row, e, at: starts[e]! + i })));
  return { starts, places, rows: at };
}

/** Up to `most` of `n` indices, evenly spread, the first and last among them. */
function spread(n: number, most: number): number[] {
  if (n <= most) return Array.from({ length: n }, (_, i) => i);
  return Array.from({ length: most }, (_, i) => Math.round((i * (n - 1)) / (most - 1)));
}

function wrong(c: TokenCheckFields, buffer: WrongByte['buffer'], offset: number, detail: string): never {
  throw new WrongResultError({ rank: c.comm.rank, form: c.form ?? 'eager', op: c.op, bytesPerRank: c.tokens * c.hidden * 2, wrong: { buffer, offset, detail } });
}

function int64s(comm: Comm, buf: DeviceBuffer, n: number): number[] {
  return Array.from(new BigInt64Array(comm.read(buf, 0, 8 * n).slice().buffer), Number);
}

/**
 * The rows this rank must receive, in recvX's order: expanded, for each local expert its (rank,
 * token) selections, ranks in order, tokens in order; compact, each (rank, token) naming one of
 * this rank's experts once, likewise in order.
 */
function expectedRows(c: TokenCheckFields): { q: number; t: number }[][] {
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
 * After a dispatch: expertCounts against the ids' histogram, the layout (expanded: expertOffsets;
 * compact: numRecvRows) against where the rows must land, then sampled rows of recvX against the
 * row each position must hold. `layout`: whether expertOffsets and numRecvRows were written by this
 * dispatch (a graph's replays write only the counts and rows).
 */
export function checkDispatch(c: TokenCheck, b: { recvX: DeviceBuffer; expertCounts: DeviceBuffer; expertOffsets: DeviceBuffer; numRecvRows: DeviceBuffer }, layout = true): void {
  const { comm, hidden } = c;
  const E = c.expertsPerRank;
  const { starts, places, rows } = c.receive;
  const counts = int64s(comm, b.expertCounts, E);
  // expertCounts: expanded, the rows each expert received; compact, the (token, k) entries naming it.
  const want = new Array<number>(E).fill(0);
  for (const ids of c.all) {
    for (const g of ids.subarray(0, c.tokens * c.topk)) if (Number(g) >= comm.rank * E && Number(g) < (comm.rank + 1) * E) want[Number(g) - comm.rank * E]! += 1;
  }
  const counted = c.layout === 'expanded' ? 'received' : 'was named'; // compact: (token, k) entries, not rows
  counts.forEach((n, e) => {
    if (n !== want[e]) wrong(c, 'expertCounts', 8 * e, `expert ${comm.rank * E + e} ${counted} ${n} ${c.layout === 'expanded' ? 'rows' : 'times'}, the ids give ${want[e]}`);
  });
  if (layout && c.layout === 'expanded') {
    int64s(comm, b.expertOffsets, E).forEach((start, e) => {
      if (start !== starts[e]) wrong(c, 'expertOffsets', 8 * e, `expert ${comm.rank * E + e}'s block starts at row ${start}, the counts (aligned to ${c.align}) put it at ${starts[e]}`);
    });
  }
  if (layout && c.layout === 'compact') {
    const [got] = int64s(comm, b.numRecvRows, 1);
    if (got !== rows) wrong(c, 'numRecvRows', 0, `${got} rows received, the ids give ${rows} (token, rank) rows`);
  }
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
 * Before a graph's replays are checked: the counts and the rows checkDispatch samples overwritten
 * with what no dispatch writes (-1; zeros, which no tokenValue is), so a replay that wrote nothing fails.
 */
export function poisonDispatch(c: TokenCheck, b: { recvX: DeviceBuffer; expertCounts: DeviceBuffer }): void {
  const { comm, hidden } = c;
  comm.write(b.expertCounts, new BigInt64Array(c.expertsPerRank).fill(-1n));
  const { places } = c.receive;
  const zeros = new Uint16Array(Math.min(ROW_ELEMENTS, hidden));
  for (const i of spread(places.length, ROW_SAMPLES)) comm.write(b.recvX, zeros, places[i]!.at * hidden * 2);
}

/** Before a graph's replays are checked: the tokens' combined rows zeroed (no combine of tokenValues gives 0). */
export function poisonCombine(c: TokenCheck, out: DeviceBuffer): void {
  c.comm.write(out, new Uint8Array(c.tokens * c.hidden * 2));
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
