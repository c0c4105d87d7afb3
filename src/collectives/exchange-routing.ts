// One rank's share of an accepted exchange (exchange-rules.ts judge()): the chunks it sends, where
// each lands in its receiver's output, and its own outSplitsOffsets. Arrays are reused from call to
// call (grown to W·E), so a call allocates nothing. Rows are doubles: an accepted call's rows all
// fit capacities that are safe integers.
import { putInt64, RecordField, type ExchangeKind, type Records } from './exchange-records.js';

export class Routing {
  readonly rank: number;
  readonly world: number;
  kind: ExchangeKind = '1d';
  experts = 1;
  /** Filled by the layout walk: where this rank's chunk (r, e) starts in r's output (index r·E + e). */
  dstOf = new Float64Array(0);
  /** outSplitsOffsets of this rank, in the kind's order (dispatch e·W + src, else src·E + e). */
  outCounts = new Float64Array(0);
  outStarts = new Float64Array(0);
  /** This rank's chunks with rows, in (peer, expert) order: `chunks` of them. */
  chunks = 0;
  peer = new Int32Array(0);
  expert = new Int32Array(0);
  rows = new Float64Array(0);
  srcRow = new Float64Array(0);
  dstRow = new Float64Array(0);

  constructor(rank: number, world: number) {
    this.rank = rank;
    this.world = world;
  }

  /** outSplitsOffsets' length in int64 words: 2·W·E. */
  get splitsOffsetsWords(): number {
    return 2 * this.world * this.experts;
  }

  /** Called by the layout walk before it starts. */
  begin(m: Records): void {
    this.kind = m.kind(0);
    this.experts = m.header(0, RecordField.experts);
    const n = this.world * this.experts;
    if (this.dstOf.length < n) {
      this.dstOf = new Float64Array(n);
      this.outCounts = new Float64Array(n);
      this.outStarts = new Float64Array(n);
      this.peer = new Int32Array(n);
      this.expert = new Int32Array(n);
      this.rows = new Float64Array(n);
      this.srcRow = new Float64Array(n);
      this.dstRow = new Float64Array(n);
    }
    this.chunks = 0;
  }

  /** The layout walk of this rank's output: `rows` from src for expert e start at `start`. */
  received(src: number, e: number, rows: number, start: number): void {
    const i = this.kind === 'dispatch' ? e * this.world + src : src * this.experts + e;
    this.outCounts[i] = rows;
    this.outStarts[i] = start;
  }

  /** After the walk of an accepted call: this rank's chunks, from its own record. */
  finish(m: Records): void {
    const W = this.world;
    const E = this.experts;
    const me = this.rank;
    const combine = this.kind === 'combine';
    const w = m.words[me];
    let src = 0;
    let k = 0;
    for (let r = 0; r < W; r++) {
      for (let e = 0; e < E; e++) {
        const at = m.countAt(me, r, e, combine, E);
        const rows = w[at + 1] * 4294967296 + (w[at] >>> 0);
        if (rows === 0) continue;
        const o = combine ? m.offsetAt(me, r, e, E) : 0;
        this.peer[k] = r;
        this.expert[k] = e;
        this.rows[k] = rows;
        this.srcRow[k] = combine ? w[o + 1] * 4294967296 + (w[o] >>> 0) : src;
        this.dstRow[k] = this.dstOf[r * E + e];
        src += rows;
        k++;
      }
    }
    this.chunks = k;
  }

  /** Writes outSplitsOffsets (int64[2][W·E]) at int32 index `at` of `w`. */
  writeSplitsOffsets(w: Int32Array, at = 0): void {
    const n = this.world * this.experts;
    for (let i = 0; i < n; i++) {
      putInt64(w, at + 2 * i, this.outCounts[i]);
      putInt64(w, at + 2 * (n + i), this.outStarts[i]);
    }
  }

  /** Rows this rank receives from `src` in all. */
  rowsFrom(src: number): number {
    let sum = 0;
    for (let e = 0; e < this.experts; e++) sum += this.outCounts[this.kind === 'dispatch' ? e * this.world + src : src * this.experts + e];
    return sum;
  }
}
