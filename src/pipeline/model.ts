// One rank's model and the compute of a training step, as calls on its Compute: every buffer the
// step uses (allocated once, before any collective runs), the batch drawn with its splits, the
// embedding lookup and update, and the dense layers forward and backward. train.ts orders these
// against the collectives.
import type { Comm, DeviceBuffer, Stream } from '../backends/backend.js';
import { at4, at8, colSumPartialFloats, gemmPartialFloats, type Compute, type Ref } from './compute.js';
import type { Layer, Layout } from './shapes.js';
import { DENSE_LR, EMBEDDING_LR, FIXED_SHIFT, TABLE_INIT_SHIFT, Tag, weightScale } from './synth.js';

/** A batch in flight: what this rank sends and receives in its input dist. Two alternate. */
export interface Slot {
  sendLen: DeviceBuffer;
  sendOff: DeviceBuffer;
  sendTot: DeviceBuffer;
  sendBase: DeviceBuffer;
  sendIds: DeviceBuffer;
  /** int64[W]: the ids' splits, summed on the device from the lengths. */
  idsSplits: DeviceBuffer;
  recvLen: DeviceBuffer;
  recvIds: DeviceBuffer;
  lenSO: DeviceBuffer;
  idsSO: DeviceBuffer;
}

/** Every buffer of one rank's run. */
export interface Buffers {
  slots: Slot[];
  /** int64[W] splits that do not change: lengths to each owner, pooled rows back to each source, gradients to each owner. */
  lenSplits: DeviceBuffer;
  outSplits: DeviceBuffer;
  gradSplits: DeviceBuffer;
  recvOff: DeviceBuffer;
  recvTot: DeviceBuffer;
  recvBase: DeviceBuffer;
  pooledSend: DeviceBuffer;
  pooledRecv: DeviceBuffer;
  pooledSO: DeviceBuffer;
  dPooledSend: DeviceBuffer;
  dPooledRecv: DeviceBuffer;
  gradSO: DeviceBuffer;
  tables: DeviceBuffer;
  x0: DeviceBuffer;
  labels: DeviceBuffer;
  /** Outputs of the bottom layers but the last (which writes into topX), and of the top layers. */
  bottomOut: DeviceBuffer[];
  topOut: DeviceBuffer[];
  topX: DeviceBuffer;
  dTopX: DeviceBuffer;
  gradA: DeviceBuffer;
  gradB: DeviceBuffer;
  params: DeviceBuffer;
  /** Symmetric: the all-reduce sums into it in place. */
  grads: DeviceBuffer;
  /** f32 per step: this rank's loss. */
  loss: DeviceBuffer;
  /** A word for the all-reduce that lines the ranks' clocks up. */
  align: DeviceBuffer;
  /** The chunks' sums of the weight gradients' split k and the bias gradients' split rows (compute.ts gemmChunks, colSumChunks), the largest layer's. */
  partials: DeviceBuffer;
}

export class Model {
  readonly #all: DeviceBuffer[];

  private constructor(readonly comm: Comm, readonly compute: Compute, readonly layout: Layout, readonly b: Buffers, all: DeviceBuffer[]) {
    this.#all = all;
  }

  /** Collective (symmetric buffers): every buffer of a run of at most `steps` steps. */
  static async create(comm: Comm, compute: Compute, layout: Layout, steps: number): Promise<Model> {
    const { shape, world } = layout;
    const B = shape.batch;
    const all: DeviceBuffer[] = [];
    const local = (bytes: number) => (all.push(comm.alloc(Math.max(8, bytes))), all[all.length - 1]);
    const symmetric = async (bytes: number) => (all.push(await comm.allocSymmetric(Math.max(8, bytes))), all[all.length - 1]);
    const slots: Slot[] = [];
    for (let s = 0; s < 2; s++) {
      slots.push({
        sendLen: local(4 * shape.features * B),
        sendOff: local(4 * shape.features * B),
        sendTot: local(8 * shape.features),
        sendBase: local(8 * shape.features),
        sendIds: local(4 * layout.maxSendIds),
        idsSplits: local(8 * world),
        recvLen: await symmetric(4 * world * layout.maxLocal * B),
        recvIds: await symmetric(4 * layout.maxRecvIds),
        lenSO: local(16 * world),
        idsSO: local(16 * world),
      });
    }
    const pooledBytes = 4 * shape.features * B * shape.dim;
    const recvBagBytes = 4 * world * layout.maxLocal * B * shape.dim;
    const rows = (n: number) => 4 * B * n;
    const b: Buffers = {
      slots,
      lenSplits: local(8 * world),
      outSplits: local(8 * world),
      gradSplits: local(8 * world),
      recvOff: local(4 * layout.recvBags),
      recvTot: local(8 * world * layout.local),
      recvBase: local(8 * world * layout.local),
      pooledSend: local(4 * layout.recvBags * shape.dim),
      pooledRecv: await symmetric(pooledBytes),
      pooledSO: local(16 * world),
      dPooledSend: local(pooledBytes),
      dPooledRecv: await symmetric(recvBagBytes),
      gradSO: local(16 * world),
      tables: local(4 * layout.local * shape.rows * shape.dim),
      x0: local(rows(shape.denseIn)),
      labels: local(rows(1)),
      bottomOut: layout.bottom.slice(0, -1).map((l) => local(rows(l.out))),
      topOut: layout.top.map((l) => local(rows(l.out))),
      topX: local(rows(layout.topIn)),
      dTopX: local(rows(layout.topIn)),
      gradA: local(rows(layout.maxWidth)),
      gradB: local(rows(layout.maxWidth)),
      params: local(4 * layout.paramCount),
      grads: await symmetric(4 * layout.paramCount),
      loss: local(4 * steps),
      align: await symmetric(256),
      partials: local(4 * partialFloats(layout)),
    };
    const model = new Model(comm, compute, layout, b, all);
    const splits = (buf: DeviceBuffer, rowsTo: (p: number) => number) =>
      comm.write(buf, BigInt64Array.from({ length: world }, (_, p) => BigInt(rowsTo(p))));
    splits(b.lenSplits, (p) => layout.owned[p] * B);
    splits(b.outSplits, () => layout.local * B);
    splits(b.gradSplits, (p) => layout.owned[p] * B);
    model.#warmUp();
    return model;
  }

  /**
   * The dense layers forward and backward once, waited for, before any collective of the model:
   * every GEMM kernel a step launches is then loaded. cuBLAS loads a kernel at its first launch, and
   * the driver's load waits for the kernels running in the context, a peer rank's collective too
   * where ranks share a GPU; inside a step that collective spins until this rank, held in the load,
   * queues its own, so each waits out its timeout. The check of createCompute used small GEMMs,
   * whose kernels are not the model's. What this writes, a step overwrites or runArm initialises.
   */
  #warmUp(): void {
    this.bottomForward(0, 0);
    this.topForward(0);
    this.topBackward();
    this.bottomBackward();
    this.compute.sync(this.compute.compute);
  }

  /** Bytes one rank allocates for a shape (to say why a run does not fit). */
  static bytes(layout: Layout, steps: number): number {
    const { shape, world } = layout;
    const B = shape.batch;
    const slot = 4 * shape.features * B * 2 + 4 * layout.maxSendIds + 4 * world * layout.maxLocal * B + 4 * layout.maxRecvIds;
    const widths = [...layout.bottom, ...layout.top].reduce((n, l) => n + l.out, 0) + shape.denseIn + 1 + 2 * layout.topIn + 2 * layout.maxWidth;
    return 2 * slot + 4 * layout.recvBags * (2 + shape.dim) + 8 * shape.features * B * shape.dim + 4 * world * layout.maxLocal * B * shape.dim +
      4 * layout.local * shape.rows * shape.dim + 4 * B * widths + 8 * layout.paramCount + 4 * steps + 4 * partialFloats(layout);
  }

  /** The initial tables and weights of `seed` (the same on every rank and backend), on `s`. */
  init(s: Stream, seed: number): void {
    const { shape } = this.layout;
    const perTable = shape.rows * shape.dim;
    for (let k = 0; k < this.layout.local; k++) {
      this.compute.fill(s, { out: at4(this.b.tables, k * perTable), count: perTable, seed, tag: Tag.table, key: this.layout.featureOf(k), kind: 'int32', shift: TABLE_INIT_SHIFT, scale: 0 });
    }
    [...this.layout.bottom, ...this.layout.top].forEach((l, key) => {
      this.compute.fill(s, { out: at4(this.b.params, l.w), count: l.out * l.in, seed, tag: Tag.weight, key, kind: 'f32', shift: 0, scale: weightScale(l.in) });
      this.compute.zero(s, at4(this.b.params, l.b), 4 * l.out);
    });
  }

  /** Batch `batch` into `slot` on the data stream: lengths, their offsets, the ids' splits, the ids. */
  drawBatch(slot: Slot, batch: number, seed: number): void {
    const { shape, world, rank } = this.layout;
    const s = this.compute.data;
    const segments = shape.features;
    const key = { seed, batch, rank, world, features: shape.features };
    this.compute.scanLengths(s, { lengths: at4(slot.sendLen), offsets: at4(slot.sendOff), totals: at8(slot.sendTot), segments, segLen: shape.batch, generate: { ...key, pooling: shape.pooling } });
    this.compute.segmentBases(s, { totals: at8(slot.sendTot), bases: at8(slot.sendBase), groupSums: at8(slot.idsSplits), segments, world, features: shape.features });
    this.compute.genIds(s, { lengths: at4(slot.sendLen), offsets: at4(slot.sendOff), bases: at8(slot.sendBase), ids: at4(slot.sendIds), segments, segLen: shape.batch, rows: shape.rows, ...key });
  }

  /** Sum pooling of the bags received in `slot`, into pooledSend (grouped by the source to return them to). */
  lookup(slot: Slot): void {
    const s = this.compute.compute;
    const segments = this.layout.world * this.layout.local;
    this.compute.scanLengths(s, { lengths: at4(slot.recvLen), offsets: at4(this.b.recvOff), totals: at8(this.b.recvTot), segments, segLen: this.layout.shape.batch });
    this.compute.segmentBases(s, { totals: at8(this.b.recvTot), bases: at8(this.b.recvBase), segments, world: this.layout.world, features: this.layout.shape.features });
    this.compute.embeddingBag(s, this.#bags(slot, this.b.pooledSend, 2 ** -FIXED_SHIFT));
  }

  /** The embedding update of the bags in `slot` from their gradients (dPooledRecv). */
  update(slot: Slot): void {
    this.compute.scatterUpdate(this.compute.compute, this.#bags(slot, this.b.dPooledRecv, Math.fround(-EMBEDDING_LR * 2 ** FIXED_SHIFT)));
  }

  bottomForward(batch: number, seed: number): void {
    const { shape, rank, bottom } = this.layout;
    const s = this.compute.compute;
    this.compute.genDense(s, { x: at4(this.b.x0), labels: at4(this.b.labels), batchSize: shape.batch, denseIn: shape.denseIn, seed, batch, rank });
    bottom.forEach((l, i) => this.#forward(l, this.#bottomIn(i), this.#bottomOut(i)));
  }

  /** Interaction, over arch and loss of step `step`. */
  topForward(step: number): void {
    const { shape, top, topIn } = this.layout;
    const s = this.compute.compute;
    this.compute.permute(s, { wide: at4(this.b.topX), blocks: at4(this.b.pooledRecv), batchSize: shape.batch, slots: shape.features, dim: shape.dim, ldWide: topIn, col0: this.#bottomWidth(), toWide: true });
    top.forEach((l, i) => this.#forward(l, this.#topIn(i), { ref: at4(this.b.topOut[i]), ld: l.out }));
    const last = this.b.topOut[top.length - 1];
    this.compute.loss(s, { y: at4(last), labels: at4(this.b.labels), dy: at4(this.b.gradA), loss: at4(this.b.loss, step), rows: shape.batch, ldY: 1, invRows: Math.fround(1 / shape.batch) });
  }

  /** Over arch backward from the loss's gradient (gradA) to dTopX, and the pooled embeddings' gradients out of it. */
  topBackward(): void {
    const { shape, top, topIn } = this.layout;
    let dy = { ref: at4(this.b.gradA), ld: 1 };
    for (let i = top.length - 1; i >= 0; i--) {
      const dx = i === 0 ? { ref: at4(this.b.dTopX), ld: topIn } : { ref: at4(dy.ref.buf === this.b.gradA ? this.b.gradB : this.b.gradA), ld: top[i].in };
      this.#backward(top[i], this.#topIn(i), { ref: at4(this.b.topOut[i]), ld: top[i].out }, dy, dx);
      dy = dx;
    }
    this.compute.permute(this.compute.compute, { wide: at4(this.b.dTopX), blocks: at4(this.b.dPooledSend), batchSize: shape.batch, slots: shape.features, dim: shape.dim, ldWide: topIn, col0: this.#bottomWidth(), toWide: false });
  }

  /** Bottom MLP backward from dTopX's first columns (no input gradient for the dense features). */
  bottomBackward(): void {
    const { bottom } = this.layout;
    let dy = { ref: at4(this.b.dTopX), ld: this.layout.topIn };
    for (let i = bottom.length - 1; i >= 0; i--) {
      const dx = i === 0 ? undefined : { ref: at4(dy.ref.buf === this.b.gradA ? this.b.gradB : this.b.gradA), ld: bottom[i].in };
      this.#backward(bottom[i], this.#bottomIn(i), this.#bottomOut(i), dy, dx);
      if (dx) dy = dx;
    }
  }

  sgd(): void {
    this.compute.sgd(this.compute.compute, { params: at4(this.b.params), grads: at4(this.b.grads), count: this.layout.paramCount, lr: DENSE_LR });
  }

  /** Frees every buffer: after the last collective that uses them has run on every rank. */
  free(): void {
    for (const buf of this.#all) this.comm.free(buf);
  }

  #bags(slot: Slot, pooled: DeviceBuffer, scale: number) {
    const { shape, local } = this.layout;
    return {
      lengths: at4(slot.recvLen), offsets: at4(this.b.recvOff), bases: at8(this.b.recvBase), ids: at4(slot.recvIds), table: at4(this.b.tables), pooled: at4(pooled),
      bags: this.layout.recvBags, segLen: shape.batch, featuresHere: local, rows: shape.rows, dim: shape.dim, scale,
    };
  }

  #bottomWidth(): number {
    return this.layout.bottom[this.layout.bottom.length - 1].out;
  }
  #bottomIn(i: number): Mat {
    return i === 0 ? { ref: at4(this.b.x0), ld: this.layout.shape.denseIn } : this.#bottomOut(i - 1);
  }
  #bottomOut(i: number): Mat {
    return i === this.layout.bottom.length - 1 ? { ref: at4(this.b.topX), ld: this.layout.topIn } : { ref: at4(this.b.bottomOut[i]), ld: this.layout.bottom[i].out };
  }
  #topIn(i: number): Mat {
    return i === 0 ? { ref: at4(this.b.topX), ld: this.layout.topIn } : { ref: at4(this.b.topOut[i - 1]), ld: this.layout.top[i - 1].out };
  }

  /** y = relu?(x·Wᵀ + b). */
  #forward(l: Layer, x: Mat, y: Mat): void {
    this.compute.gemm(this.compute.compute, {
      a: x.ref, b: at4(this.b.params, l.w), c: y.ref, bias: at4(this.b.params, l.b),
      m: this.layout.shape.batch, n: l.out, k: l.in, lda: x.ld, ldb: l.in, ldc: y.ld, transA: false, transB: true, relu: l.relu,
    });
  }

  /** From the output's gradient dy: dW = dzᵀ·x and db = Σ dz into grads, and dx = dz·W when asked; dz overwrites dy. */
  #backward(l: Layer, x: Mat, y: Mat, dy: Mat, dx: Mat | undefined): void {
    const s = this.compute.compute;
    const B = this.layout.shape.batch;
    let dz = dy;
    if (l.relu) {
      // dTopX is read again by the other arm's backward: its ReLU gradient goes to scratch.
      dz = dy.ref.buf === this.b.dTopX ? { ref: at4(dx?.ref.buf === this.b.gradA ? this.b.gradB : this.b.gradA), ld: l.out } : dy;
      this.compute.reluGrad(s, { dy: dy.ref, y: y.ref, dz: dz.ref, rows: B, cols: l.out, ldDy: dy.ld, ldY: y.ld, ldDz: dz.ld });
    }
    const partials = at4(this.b.partials);
    this.compute.gemm(s, { a: dz.ref, b: x.ref, c: at4(this.b.grads, l.w), m: l.out, n: l.in, k: B, lda: dz.ld, ldb: x.ld, ldc: l.in, transA: true, transB: false, relu: false, partials });
    // After the GEMM on the same stream: its chunks' sums are added up, so the scratch is free again.
    this.compute.colSum(s, { x: dz.ref, out: at4(this.b.grads, l.b), rows: B, cols: l.out, ld: dz.ld, partials });
    if (dx) this.compute.gemm(s, { a: dz.ref, b: at4(this.b.params, l.w), c: dx.ref, m: B, n: l.in, k: l.out, lda: dz.ld, ldb: l.in, ldc: dx.ld, transA: false, transB: false, relu: false });
  }
}

/** f32 elements of the chunks' sums of the largest weight or bias gradient (the batch split: gemmChunks, colSumChunks). */
function partialFloats(layout: Layout): number {
  const B = layout.shape.batch;
  return Math.max(0, ...[...layout.bottom, ...layout.top].map((l) => Math.max(gemmPartialFloats(l.out, l.in, B), colSumPartialFloats(B, l.out))));
}

/** A row-major matrix in a buffer: where it starts, and its row stride in elements. */
interface Mat {
  ref: Ref;
  ld: number;
}
