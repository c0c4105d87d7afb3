// The group's compute on the cpu backend: loops over its shared-memory buffers, in the caller's
// thread (a cpu collective is done when its call returns, so each step sees the one before). The
// same bits as kernels/moe-tokens.cu: a stable order within each bucket, the same refusal
// encodings, the same gates, the same f32 sums.
import { Buffer } from 'node:buffer';
import type { DeviceBuffer } from '../backends/backend.js';
import { copyBytes } from '../backends/cpu/memcpy.js';
import { BAD_TOKEN_COUNT, DTYPES, type GatherCall, type LayoutCall, type ReduceCall, type RouteCall, type TokenBuffers, type TokenCompute } from './compute.js';
import { F32Row, rowDecoder, rowEncoder } from './dtype.js';
import { hostBytes } from '../backends/raw.js';
import type { TokenShape } from './shape.js';

/** Names this code in the errors of src/backends/raw.ts. */
const WHO = 'MoE group';

/** A buffer's bytes as a Buffer, for copyBytes and zeroBytes. */
const bytes = (buf: DeviceBuffer): Buffer => {
  const u8 = hostBytes(buf, WHO);
  return Buffer.from(u8.buffer, u8.byteOffset, u8.byteLength);
};
const i32 = (buf: DeviceBuffer): Int32Array => {
  const u8 = hostBytes(buf, WHO);
  return new Int32Array(u8.buffer, u8.byteOffset, u8.byteLength >>> 2);
};
const f32 = (buf: DeviceBuffer): Float32Array => {
  const u8 = hostBytes(buf, WHO);
  return new Float32Array(u8.buffer, u8.byteOffset, u8.byteLength >>> 2);
};
/** int64 element i of an Int32Array view (exact below 2^53). */
const int64At = (a: Int32Array, i: number): number => a[2 * i + 1] * 4294967296 + (a[2 * i] >>> 0);
const setInt64 = (a: Int32Array, i: number, v: number): void => {
  a[2 * i] = v | 0;
  a[2 * i + 1] = Math.floor(v / 4294967296);
};

/**
 * What zeroBytes fills from. fill(0) on shared memory goes element by element (V8 must not tear
 * what another thread reads), fill with a Buffer is a memcpy in C++ that doubles itself: 633 vs
 * 67 µs for the 1.7 MB of padding a 1-token dispatch zeroes (a row for each of ~120 empty experts,
 * hidden 7168 bf16), which made 1 token cost more than 16 (whose experts are mostly not empty).
 */
const ZEROS = Buffer.alloc(4096);
const zeroBytes = (dst: Buffer, from: number, to: number): void => {
  if (to > from) dst.fill(ZEROS, from, to);
};

export class HostCompute implements TokenCompute {
  readonly #shape: TokenShape;
  readonly #bufs: TokenBuffers;
  /** Rows per bucket, then the next row of each, while a routing is worked out. */
  readonly #cursor: Float64Array;
  /** The combine's running sums and its term, a row each (reused while the hidden size stays). */
  #acc: F32Row | undefined;
  #term: F32Row | undefined;

  constructor(shape: TokenShape, bufs: TokenBuffers) {
    this.#shape = shape;
    this.#bufs = bufs;
    this.#cursor = new Float64Array(shape.buckets);
  }

  routeAndGather(s: unknown, r: RouteCall, g: GatherCall): void {
    this.route(s, r);
    this.gather(s, g);
  }

  /** Works out the routing: inSplits, the chunks' offsets, the token count; a bad id or count becomes a negative split. */
  route(_s: unknown, c: RouteCall): void {
    const { topk: K, experts: N, expertsPerRank: E, buckets } = this.#shape;
    const compact = this.#shape.layout === 'compact';
    const ids = i32(c.topkIdx);
    const idx = c.idx64 ? (i: number) => int64At(ids, i) : (i: number) => ids[i];
    const n = c.numTokens ? int64At(i32(c.numTokens), 0) : c.tokens;
    const T = n < 0 || n > c.tokenCap ? -1 : n;
    const bucketOf = i32(this.#bufs.local);
    const cursor = this.#cursor.fill(0);
    let fault = -1;
    for (let g = 0; g < Math.max(T, 0) * K; g++) {
      const [t, k] = [Math.floor(g / K), g % K];
      const id = idx(g);
      let b = id === -1 ? -1 : id < -1 || id >= N ? -2 : compact ? Math.floor(id / E) : id;
      for (let j = 0; compact && b >= 0 && j < k; j++) {
        const o = idx(t * K + j);
        if (o >= 0 && o < N && Math.floor(o / E) === b) b = -1;
      }
      if (b === -2 && fault < 0) fault = g;
      bucketOf[g] = b < 0 ? -1 : b;
      if (b >= 0) cursor[b]++;
    }
    const splits = i32(this.#bufs.inSplits);
    let start = 0;
    for (let b = 0; b < buckets; b++) {
      setInt64(splits, b, cursor[b]);
      [cursor[b], start] = [start, start + cursor[b]];
    }
    const slot = i32(this.#bufs.slot);
    for (let g = 0; g < Math.max(T, 0) * K; g++) slot[g] = bucketOf[g] < 0 ? -1 : cursor[bucketOf[g]]++;
    if (T < 0) setInt64(splits, 0, BAD_TOKEN_COUNT);
    else if (fault >= 0) setInt64(splits, 0, -1 - fault);
    setInt64(i32(this.#bufs.routeTokens), 0, Math.max(T, 0));
  }

  gather(_s: unknown, c: GatherCall): void {
    const { topk: K, experts: N, expertsPerRank: E, rowBytes, metaBytes } = this.#shape;
    hostBytes(this.#bufs.routeOso, WHO).fill(0xff);
    const compact = this.#shape.layout === 'compact';
    const T = int64At(i32(this.#bufs.routeTokens), 0);
    const slot = i32(this.#bufs.slot);
    const [x, send] = [bytes(c.x), bytes(this.#bufs.send!)];
    const ids = i32(c.topkIdx);
    const idx = c.idx64 ? (i: number) => int64At(ids, i) : (i: number) => ids[i];
    // Weights move as bits (an f32 through a JS number would have its signalling NaNs quieted).
    const w = c.weights ? i32(c.weights) : undefined;
    const metaI = i32(this.#bufs.sendMeta);
    const words = metaBytes >>> 2;
    for (let g = 0; g < T * K; g++) {
      const s = slot[g];
      if (s < 0) continue;
      const t = Math.floor(g / K);
      copyBytes(send, s * rowBytes, x, t * rowBytes, rowBytes);
      if (!compact) {
        metaI[s * words] = w ? w[g] : 0;
        continue;
      }
      const id = idx(g);
      const dst = id >= 0 && id < N ? Math.floor(id / E) : -1;
      for (let k = 0; k < K; k++) {
        const o = idx(t * K + k);
        const here = dst >= 0 && o >= 0 && o < N && Math.floor(o / E) === dst;
        metaI[s * words + k] = here ? o - dst * E : -1;
        metaI[s * words + K + k] = here && w ? w[t * K + k] : 0;
      }
    }
  }

  layout(_s: unknown, c: LayoutCall): void {
    const { world: W, expertsPerRank: E, topk: K, rowBytes, metaBytes, align } = this.#shape;
    const oso = i32(this.#bufs.routeOso);
    if (int64At(oso, 0) < 0) return;
    const counts = i32(c.counts);
    const words = metaBytes >>> 2;
    const metaI = i32(this.#bufs.recvMeta);
    const rw = c.recvWeights ? i32(c.recvWeights) : undefined;
    if (this.#shape.layout === 'compact') {
      let rows = 0;
      for (let src = 0; src < W; src++) rows += int64At(oso, src);
      const n = new Float64Array(E);
      const ri = c.recvIdx ? i32(c.recvIdx) : undefined;
      for (let i = 0; i < rows * K; i++) {
        const [r, k] = [Math.floor(i / K), i % K];
        const id = metaI[r * words + k];
        if (ri) {
          if (c.idx64) setInt64(ri, i, id);
          else ri[i] = id;
        }
        if (rw) rw[i] = metaI[r * words + K + k];
        if (id >= 0 && id < E) n[id]++;
      }
      for (let e = 0; e < E; e++) setInt64(counts, e, n[e]);
      if (c.numRecvRows) setInt64(i32(c.numRecvRows), 0, rows);
      return;
    }
    const recvX = bytes(c.recvX);
    const offsets = c.offsets ? i32(c.offsets) : undefined;
    for (let e = 0; e < E; e++) {
      let cnt = 0;
      for (let src = 0; src < W; src++) cnt += int64At(oso, e * W + src);
      const start = int64At(oso, W * E + e * W);
      const span = cnt === 0 ? align : Math.ceil(cnt / align) * align;
      setInt64(counts, e, cnt);
      if (offsets) setInt64(offsets, e, start);
      zeroBytes(recvX, (start + cnt) * rowBytes, (start + span) * rowBytes);
      for (let r = 0; rw && r < span; r++) rw[start + r] = r < cnt ? metaI[(start + r) * words] : 0;
      // Experts' blocks follow one another: the last one's end is the end of what was written.
      if (c.numRecvRows && e === E - 1) setInt64(i32(c.numRecvRows), 0, start + span);
    }
  }

  /**
   * out[t] = the sum over k, in order, of w[t, k] x y[slot of (t, k)] (plus the bias), in f32: row by
   * row (a term's whole row, then the next), each element's sum in the same order and with the
   * same roundings as one element at a time.
   */
  reduce(_s: unknown, c: ReduceCall): void {
    const K = this.#shape.topk;
    const H = c.hidden;
    const gate = i32(this.#bufs.combineOso);
    if (int64At(gate, 0) < 0) return;
    const T = int64At(i32(this.#bufs.routeTokens), 0);
    const slot = i32(this.#bufs.slot);
    const readY = rowDecoder(c.dtype, hostBytes(this.#bufs.back, WHO));
    const readBias = c.bias ? rowDecoder(c.dtype, hostBytes(c.bias, WHO)) : undefined;
    const w = c.weights ? f32(c.weights) : undefined;
    const write = rowEncoder(c.dtype, hostBytes(c.out, WHO).subarray(0, T * H * DTYPES[c.dtype].bytes));
    if (this.#acc?.length !== H) [this.#acc, this.#term] = [new F32Row(H), new F32Row(H)];
    const [acc, term] = [this.#acc, this.#term!];
    const [a, v] = [acc.f, term.f];
    for (let t = 0; t < T; t++) {
      let any = false;
      for (let k = 0; k < K; k++) {
        const s = slot[t * K + k];
        if (s < 0) continue;
        readY(s * H, term);
        if (w) {
          const wk = w[t * K + k];
          for (let h = 0; h < H; h++) v[h] = wk * v[h]; // a Float32Array store rounds: fround(w * y)
        }
        if (any) for (let h = 0; h < H; h++) a[h] = a[h] + v[h];
        else a.set(v);
        any = true;
      }
      if (readBias) {
        readBias(t * H, term);
        if (any) for (let h = 0; h < H; h++) a[h] = a[h] + v[h];
        else a.set(v);
      } else if (!any) {
        a.fill(0);
      }
      write(t * H, acc);
    }
    gate.fill(-1);
  }

  close(): void {}
}
