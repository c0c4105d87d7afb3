// The pipeline's compute on the cpu backend: kernels/pipeline.cu's kernels as loops over the
// communicator's shared-memory buffers, run at once in the rank's thread. Every f32 operation is
// rounded where the kernel rounds it: a product or sum of two f32 values done in double and rounded
// once to f32 (Math.fround, or a Float32Array store) is the correctly rounded f32 result, which is
// what __fmul_rn / __fadd_rn give (double carries more than 2·24 + 2 bits).
import type { DeviceBuffer, Stream } from '../backends/backend.js';
import type {
  BagArgs,
  BasesArgs,
  Clock,
  ColSumArgs,
  Compute,
  DenseArgs,
  FillArgs,
  GemmArgs,
  IdsArgs,
  LossArgs,
  PermuteArgs,
  Ref,
  ReluGradArgs,
  ScanArgs,
  SgdArgs,
} from './compute.js';
import { cpuStream } from '../backends/cpu/lane.js';
import { hostBytes } from '../backends/raw.js';
import { colSumChunks, gemmChunks } from './compute.js';
import { ownedBy, slotFeature } from './shapes.js';
import { bagHash, bagLength, checksumWords, denseValue, fillBits, label, rintInt32, step } from './synth.js';

/** Names this code in the errors of src/backends/raw.ts. */
const WHO = 'pipeline';

/** pl_loss's block: strided running sums, then a tree (the sum's order is part of the model). */
export const LOSS_THREADS = 256;

const fround = Math.fround;

interface Views {
  f32: Float32Array;
  i32: Int32Array;
  u32: Uint32Array;
}

export class CpuCompute implements Compute {
  readonly compute: Stream = cpuStream();
  readonly data: Stream = cpuStream();
  readonly clock: Clock = new HostClock();
  readonly gemmName = 'host loops (the cpu backend)';
  readonly #views = new WeakMap<DeviceBuffer, Views>();

  scanLengths(_s: Stream, a: ScanArgs): void {
    const len = this.#i32(a.lengths);
    const off = this.#i32(a.offsets);
    const g = a.generate;
    for (let seg = 0; seg < a.segments; seg++) {
      const feature = g ? slotFeature(seg, g.features, g.world) : 0;
      let running = 0;
      for (let b = 0; b < a.segLen; b++) {
        const i = seg * a.segLen + b;
        if (g) len.a[len.at + i] = bagLength(g, feature, b, g.pooling);
        off.a[off.at + i] = running;
        running += len.a[len.at + i];
      }
      this.#setI64(a.totals, seg, running);
    }
  }

  segmentBases(_s: Stream, a: BasesArgs): void {
    let base = 0;
    for (let q = 0; q < a.segments; q++) {
      this.#setI64(a.bases, q, base);
      base += this.#getI64(a.totals, q);
    }
    if (!a.groupSums) return;
    let q = 0;
    for (let owner = 0; owner < a.world; owner++) {
      let sum = 0;
      for (let n = ownedBy(a.features, a.world, owner); n > 0; n--) sum += this.#getI64(a.totals, q++);
      this.#setI64(a.groupSums, owner, sum);
    }
  }

  genIds(_s: Stream, a: IdsArgs): void {
    const len = this.#i32(a.lengths);
    const off = this.#i32(a.offsets);
    const ids = this.#i32(a.ids);
    for (let seg = 0; seg < a.segments; seg++) {
      const feature = slotFeature(seg, a.features, a.world);
      const base = this.#getI64(a.bases, seg);
      for (let b = 0; b < a.segLen; b++) {
        const g = seg * a.segLen + b;
        const h = bagHash(a, feature, b);
        const out = ids.at + base + off.a[off.at + g];
        for (let j = 0, n = len.a[len.at + g]; j < n; j++) ids.a[out + j] = step(h, j) % a.rows;
      }
    }
  }

  genDense(_s: Stream, a: DenseArgs): void {
    const x = this.#f32(a.x);
    const labels = this.#f32(a.labels);
    for (let b = 0; b < a.batchSize; b++) {
      for (let c = 0; c < a.denseIn; c++) x.a[x.at + b * a.denseIn + c] = denseValue(a, b, c);
      labels.a[labels.at + b] = label(a, b);
    }
  }

  embeddingBag(_s: Stream, a: BagArgs): void {
    const table = this.#i32(a.table);
    const pooled = this.#f32(a.pooled);
    this.#bags(a, (g, ids, first, n, row0) => {
      for (let d = 0; d < a.dim; d++) {
        let sum = 0; // integers below 2^53: exact in double, as the kernel's int64
        for (let j = 0; j < n; j++) sum += table.a[table.at + row0 + ids[first + j] * a.dim + d];
        pooled.a[pooled.at + g * a.dim + d] = fround(fround(sum) * a.scale);
      }
    });
  }

  scatterUpdate(_s: Stream, a: BagArgs): void {
    const table = this.#i32(a.table);
    const grad = this.#f32(a.pooled);
    this.#bags(a, (g, ids, first, n, row0) => {
      for (let d = 0; d < a.dim; d++) {
        const q = rintInt32(fround(grad.a[grad.at + g * a.dim + d] * a.scale));
        // Int32Array stores wrap as the device's int32 atomics do.
        for (let j = 0; j < n; j++) table.a[table.at + row0 + ids[first + j] * a.dim + d] += q;
      }
    });
  }

  gemm(_s: Stream, a: GemmArgs): void {
    // Locals only in the loops: the argument objects come in many shapes, and their loads would stay in them.
    const { a: A, at: a0 } = this.#f32(a.a);
    const { a: B, at: b0 } = this.#f32(a.b);
    const { a: C, at: c0 } = this.#f32(a.c);
    const bias = a.bias ? this.#f32(a.bias) : undefined;
    const { m: M, n: N, k: K, lda, ldb, ldc, transA, transB, relu } = a;
    // A k-major copy of B when it is stored transposed, so the inner loop walks memory in order.
    const Bk = transB ? new Float32Array(K * N) : B;
    if (transB) for (let n = 0; n < N; n++) for (let k = 0; k < K; k++) Bk[k * N + n] = B[b0 + n * ldb + k];
    const bRow = transB ? N : ldb;
    const bAt = transB ? 0 : b0;
    const acc = new Float32Array(N);
    const total = new Float32Array(N);
    // Split k (a.partials): each chunk summed from zero, then the chunks in order, as the kernels do.
    const chunk = a.partials ? gemmChunks(K).size : Math.max(K, 1);
    // Row by row, k outermost: each output still sums k = 0, 1, ... in order, as the kernel does.
    for (let m = 0; m < M; m++) {
      for (let k0 = 0; k0 < Math.max(K, 1); k0 += chunk) {
        acc.fill(0);
        for (let k = k0; k < Math.min(K, k0 + chunk); k++) {
          const av = A[a0 + (transA ? k * lda + m : m * lda + k)];
          for (let n = 0, row = bAt + k * bRow; n < N; n++) acc[n] += fround(av * Bk[row + n]);
        }
        if (k0 === 0) total.set(acc);
        else for (let n = 0; n < N; n++) total[n] += acc[n];
      }
      for (let n = 0; n < N; n++) {
        let v = total[n];
        if (bias) v = fround(v + bias.a[bias.at + n]);
        if (relu) v = v > 0 ? v : 0;
        C[c0 + m * ldc + n] = v;
      }
    }
  }

  colSum(_s: Stream, a: ColSumArgs): void {
    const { a: X, at: x0 } = this.#f32(a.x);
    const { a: O, at: o0 } = this.#f32(a.out);
    const { rows: R, cols: C, ld } = a;
    // The kernels' order (colSumChunks): each chunk of rows from zero, then the chunks from zero in
    // order; Float32Array stores round every add. Row by row, so the inner loop walks memory in order.
    const size = colSumChunks(R).size;
    const acc = new Float32Array(C);
    const total = new Float32Array(C);
    for (let r0 = 0; r0 < R; r0 += size) {
      acc.fill(0);
      for (let r = r0; r < Math.min(R, r0 + size); r++) for (let c = 0, row = x0 + r * ld; c < C; c++) acc[c] += X[row + c];
      for (let c = 0; c < C; c++) total[c] += acc[c];
    }
    O.set(total, o0);
  }

  reluGrad(_s: Stream, a: ReluGradArgs): void {
    const dy = this.#f32(a.dy);
    const y = this.#f32(a.y);
    const dz = this.#f32(a.dz);
    for (let r = 0; r < a.rows; r++) {
      for (let c = 0; c < a.cols; c++) dz.a[dz.at + r * a.ldDz + c] = y.a[y.at + r * a.ldY + c] > 0 ? dy.a[dy.at + r * a.ldDy + c] : 0;
    }
  }

  permute(_s: Stream, a: PermuteArgs): void {
    const wide = this.#f32(a.wide);
    const blocks = this.#f32(a.blocks);
    for (let q = 0; q < a.slots; q++) {
      for (let b = 0; b < a.batchSize; b++) {
        const w = wide.at + b * a.ldWide + a.col0 + q * a.dim;
        const k = blocks.at + (q * a.batchSize + b) * a.dim;
        if (a.toWide) wide.a.set(blocks.a.subarray(k, k + a.dim), w);
        else blocks.a.set(wide.a.subarray(w, w + a.dim), k);
      }
    }
  }

  loss(_s: Stream, a: LossArgs): void {
    const y = this.#f32(a.y);
    const labels = this.#f32(a.labels);
    const dy = this.#f32(a.dy);
    const part = new Float32Array(LOSS_THREADS);
    for (let t = 0; t < LOSS_THREADS; t++) {
      let acc = 0;
      for (let i = t; i < a.rows; i += LOSS_THREADS) {
        const e = fround(y.a[y.at + i * a.ldY] - labels.a[labels.at + i]);
        dy.a[dy.at + i] = fround(e * a.invRows);
        acc = fround(acc + fround(e * e));
      }
      part[t] = acc;
    }
    for (let s = LOSS_THREADS / 2; s > 0; s >>= 1) for (let t = 0; t < s; t++) part[t] += part[t + s];
    this.#f32(a.loss).a[this.#f32(a.loss).at] = fround(fround(part[0] * 0.5) * a.invRows);
  }

  sgd(_s: Stream, a: SgdArgs): void {
    const p = this.#f32(a.params);
    const g = this.#f32(a.grads);
    for (let i = 0; i < a.count; i++) p.a[p.at + i] -= fround(a.lr * g.a[g.at + i]);
  }

  fill(_s: Stream, a: FillArgs): void {
    if (a.kind === 'f32') {
      const out = this.#f32(a.out);
      for (let i = 0; i < a.count; i++) out.a[out.at + i] = fillBits(a.seed, a.tag, a.key, i) * a.scale;
    } else {
      const out = this.#i32(a.out);
      for (let i = 0; i < a.count; i++) out.a[out.at + i] = fillBits(a.seed, a.tag, a.key, i) >> a.shift;
    }
  }

  zero(_s: Stream, at: Ref, bytes: number): void {
    hostBytes(at.buf, WHO).fill(0, at.byte, at.byte + bytes);
  }

  checksum(_s: Stream, at: Ref, words: number): [number, number] {
    const u8 = hostBytes(at.buf, WHO);
    return checksumWords(new Uint32Array(u8.buffer, u8.byteOffset + at.byte, words));
  }

  sync(): void {}

  close(): void {}

  /** Runs `fn` on every received bag: its index, the ids array, where its ids start, how many, its table's element offset. */
  #bags(a: BagArgs, fn: (g: number, ids: Int32Array, first: number, n: number, row0: number) => void): void {
    const len = this.#i32(a.lengths);
    const off = this.#i32(a.offsets);
    const ids = this.#i32(a.ids);
    for (let g = 0; g < a.bags; g++) {
      const seg = Math.floor(g / a.segLen);
      const row0 = (seg % a.featuresHere) * a.rows * a.dim;
      fn(g, ids.a, ids.at + this.#getI64(a.bases, seg) + off.a[off.at + g], len.a[len.at + g], row0);
    }
  }

  #viewsOf(buf: DeviceBuffer): Views {
    let v = this.#views.get(buf);
    if (v === undefined) {
      const u8 = hostBytes(buf, WHO);
      const n = u8.byteLength >>> 2;
      v = { f32: new Float32Array(u8.buffer, u8.byteOffset, n), i32: new Int32Array(u8.buffer, u8.byteOffset, n), u32: new Uint32Array(u8.buffer, u8.byteOffset, n) };
      this.#views.set(buf, v);
    }
    return v;
  }
  #f32(r: Ref): { a: Float32Array; at: number } {
    return { a: this.#viewsOf(r.buf).f32, at: r.byte >>> 2 };
  }
  #i32(r: Ref): { a: Int32Array; at: number } {
    return { a: this.#viewsOf(r.buf).i32, at: r.byte >>> 2 };
  }
  // int64 counts as two 32-bit halves (little-endian), without a BigInt per element.
  #getI64(r: Ref, i: number): number {
    const v = this.#viewsOf(r.buf);
    const w = (r.byte >>> 2) + 2 * i;
    return v.u32[w] + v.i32[w + 1] * 2 ** 32;
  }
  #setI64(r: Ref, i: number, value: number): void {
    const v = this.#viewsOf(r.buf);
    const w = (r.byte >>> 2) + 2 * i;
    v.u32[w] = value >>> 0;
    v.i32[w + 1] = Math.floor(value / 2 ** 32);
  }
}

/** Host timestamps: on cpu the work is done when its call returns. Comparable across threads and processes (epoch based). */
export class HostClock implements Clock {
  #marks: number[] = [];
  #free: number[] = [];
  mark(): number {
    const id = this.#free.pop() ?? this.#marks.length;
    this.#marks[id] = performance.timeOrigin + performance.now();
    return id;
  }
  micros(from: number, to: number): number {
    return (this.#marks[to] - this.#marks[from]) * 1000;
  }
  release(id: number): void {
    this.#free.push(id);
  }
  reset(): void {
    this.#marks = [];
    this.#free = [];
  }
  reserve(): void {}
}
