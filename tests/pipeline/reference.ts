// The pipeline's training step computed in one process with no communicator: every rank's batch,
// lookups straight from the global tables, each rank's dense forward and backward, the gradients
// summed in rank order, the update and SGD. Only the model's definition is shared with the code
// under test (synth.ts: the data, the fixed point, the checksums; shapes.ts: layer sizes and
// which rank owns which feature; compute.ts gemmChunks, colSumChunks: how the weight and bias
// gradients split the batch); the loops are written out here, plainly.
import { colSumChunks, gemmChunks } from '../../src/pipeline/compute.js';
import { Layout, slotFeature, type Shape } from '../../src/pipeline/shapes.js';
import { bagHash, bagLength, checksumWords, DENSE_LR, denseValue, EMBEDDING_LR, fillBits, FIXED_SHIFT, label, rintInt32, step, TABLE_INIT_SHIFT, Tag, weightScale } from '../../src/pipeline/synth.js';

const f = Math.fround;
/** kernels/pipeline.cu PL_LOSS_THREADS: the loss's summation order is part of the model. */
const LOSS_THREADS = 256;

export interface ReferenceResult {
  /** [rank][step] */
  loss: number[][];
  /** Per rank: checksumWords of its tables (local features in order). */
  tables: [number, number][];
  params: [number, number];
}

/** y[m][n] = relu?(sum over k ascending of x[m][k]·w[n][k], then + b[n]). */
function linear(x: Float32Array, w: Float32Array, b: Float32Array, rows: number, inW: number, outW: number, relu: boolean): Float32Array {
  const y = new Float32Array(rows * outW);
  for (let m = 0; m < rows; m++) {
    for (let n = 0; n < outW; n++) {
      let acc = 0;
      for (let k = 0; k < inW; k++) acc = f(acc + f(x[m * inW + k] * w[n * inW + k]));
      acc = f(acc + b[n]);
      y[m * outW + n] = relu && !(acc > 0) ? 0 : acc;
    }
  }
  return y;
}

export function referenceRun(shape: Shape, world: number, seed: number, steps: number): ReferenceResult {
  const lay = new Layout(shape, world, 0);
  const { features: F, dim: D, rows: R, batch: B, pooling: P, denseIn } = shape;
  const layers = [...lay.bottom, ...lay.top];
  const Db = shape.bottom[shape.bottom.length - 1];
  const tables = Array.from({ length: F }, (_, feat) => Int32Array.from({ length: R * D }, (_, i) => fillBits(seed, Tag.table, feat, i) >> TABLE_INIT_SHIFT));
  const params = new Float32Array(lay.paramCount);
  layers.forEach((l, key) => {
    for (let i = 0; i < l.out * l.in; i++) params[l.w + i] = fillBits(seed, Tag.weight, key, i) * weightScale(l.in);
  });
  const W = (l: (typeof layers)[number]) => params.subarray(l.w, l.w + l.out * l.in);
  const bias = (l: (typeof layers)[number]) => params.subarray(l.b, l.b + l.out);
  const loss = Array.from({ length: world }, () => [] as number[]);
  const stepScale = f(-EMBEDDING_LR * 2 ** FIXED_SHIFT);

  for (let t = 0; t < steps; t++) {
    const grads = new Float32Array(lay.paramCount);
    const updates: Array<{ feat: number; ids: number[]; delta: Int32Array }> = [];
    for (let r = 0; r < world; r++) {
      const key = { seed, batch: t, rank: r };
      // The over arch's input: the bottom output, then each feature's pooled embedding in send order.
      const topIn = Db + F * D;
      const bags: number[][][] = [];
      const x = new Float32Array(B * topIn);
      for (let q = 0; q < F; q++) {
        const feat = slotFeature(q, F, world);
        bags[q] = [];
        for (let b = 0; b < B; b++) {
          const h = bagHash(key, feat, b);
          const ids = Array.from({ length: bagLength(key, feat, b, P) }, (_, j) => step(h, j) % R);
          bags[q][b] = ids;
          for (let d = 0; d < D; d++) {
            let sum = 0;
            for (const id of ids) sum += tables[feat][id * D + d];
            x[b * topIn + Db + q * D + d] = f(f(sum) * 2 ** -FIXED_SHIFT);
          }
        }
      }
      const x0 = new Float32Array(B * denseIn);
      const labels = new Float32Array(B);
      for (let b = 0; b < B; b++) {
        for (let c = 0; c < denseIn; c++) x0[b * denseIn + c] = denseValue(key, b, c);
        labels[b] = label(key, b);
      }
      // Forward: inputs and outputs of every layer.
      const acts: Float32Array[] = [x0];
      for (const l of lay.bottom) acts.push(linear(acts[acts.length - 1], W(l), bias(l), B, l.in, l.out, l.relu));
      const h = acts[acts.length - 1];
      for (let b = 0; b < B; b++) for (let c = 0; c < Db; c++) x[b * topIn + c] = h[b * Db + c];
      const topActs: Float32Array[] = [x];
      for (const l of lay.top) topActs.push(linear(topActs[topActs.length - 1], W(l), bias(l), B, l.in, l.out, l.relu));
      const y = topActs[topActs.length - 1];
      // Loss: strided running sums over LOSS_THREADS, then a tree.
      const inv = f(1 / B);
      const dy0 = new Float32Array(B);
      const part = new Float32Array(LOSS_THREADS);
      for (let th = 0; th < LOSS_THREADS; th++) {
        let acc = 0;
        for (let i = th; i < B; i += LOSS_THREADS) {
          const e = f(y[i] - labels[i]);
          dy0[i] = f(e * inv);
          acc = f(acc + f(e * e));
        }
        part[th] = acc;
      }
      for (let s = LOSS_THREADS / 2; s > 0; s >>= 1) for (let th = 0; th < s; th++) part[th] = f(part[th] + part[th + s]);
      loss[r].push(f(f(part[0] * 0.5) * inv));
      // Backward through the over arch, then the bottom MLP from the first columns of dx.
      const chunk = gemmChunks(B).size;
      const rowChunk = colSumChunks(B).size;
      const backward = (stack: typeof layers, ins: Float32Array[], outs: Float32Array[], dyIn: Float32Array, rank: Float32Array): Float32Array => {
        let dy = dyIn;
        for (let i = stack.length - 1; i >= 0; i--) {
          const l = stack[i];
          const dz = dy.map((g, j) => (l.relu && !(outs[i][j] > 0) ? 0 : g));
          for (let o = 0; o < l.out; o++) {
            for (let k = 0; k < l.in; k++) {
              // The batch in chunks (compute.ts gemmChunks), each summed from zero, then the chunks in order.
              let acc = 0;
              for (let b0 = 0; b0 < B; b0 += chunk) {
                let part = 0;
                for (let b = b0; b < Math.min(B, b0 + chunk); b++) part = f(part + f(dz[b * l.out + o] * ins[i][b * l.in + k]));
                acc = b0 === 0 ? part : f(acc + part);
              }
              rank[l.w + o * l.in + k] = acc;
            }
            // Likewise the bias gradient's rows (compute.ts colSumChunks).
            let db = 0;
            for (let b0 = 0; b0 < B; b0 += rowChunk) {
              let part = 0;
              for (let b = b0; b < Math.min(B, b0 + rowChunk); b++) part = f(part + dz[b * l.out + o]);
              db = f(db + part);
            }
            rank[l.b + o] = db;
          }
          const dx = new Float32Array(B * l.in);
          for (let b = 0; b < B; b++) {
            for (let k = 0; k < l.in; k++) {
              let acc = 0;
              for (let o = 0; o < l.out; o++) acc = f(acc + f(dz[b * l.out + o] * params[l.w + o * l.in + k]));
              dx[b * l.in + k] = acc;
            }
          }
          dy = dx;
        }
        return dy;
      };
      const rankGrads = new Float32Array(lay.paramCount);
      const dx = backward(lay.top, topActs.slice(0, -1), topActs.slice(1), dy0, rankGrads);
      const dh = new Float32Array(B * Db);
      for (let b = 0; b < B; b++) for (let c = 0; c < Db; c++) dh[b * Db + c] = dx[b * topIn + c];
      backward(lay.bottom, acts.slice(0, -1), acts.slice(1), dh, rankGrads);
      for (let i = 0; i < grads.length; i++) grads[i] = r === 0 ? rankGrads[i] : f(grads[i] + rankGrads[i]);
      for (let q = 0; q < F; q++) {
        for (let b = 0; b < B; b++) {
          const delta = Int32Array.from({ length: D }, (_, d) => rintInt32(f(dx[b * topIn + Db + q * D + d] * stepScale)));
          updates.push({ feat: slotFeature(q, F, world), ids: bags[q][b], delta });
        }
      }
    }
    // Every rank's lookups read the tables before any update (the pipeline updates after the lookup).
    for (const { feat, ids, delta } of updates) for (const id of ids) for (let d = 0; d < D; d++) tables[feat][id * D + d] += delta[d];
    for (let i = 0; i < params.length; i++) params[i] = f(params[i] - f(DENSE_LR * grads[i]));
  }
  const tableSums = Array.from({ length: world }, (_, r) => {
    let sums: [number, number] = [0, 0];
    for (let k = 0, feat = r; feat < F; k++, feat += world) sums = checksumWords(new Uint32Array(tables[feat].buffer), sums, k * R * D);
    return sums;
  });
  return { loss, tables: tableSums, params: checksumWords(new Uint32Array(params.buffer)) };
}
