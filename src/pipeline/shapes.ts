// The model shapes of the pipeline and what follows from one for a rank of W: which features it
// owns, the dense layers and where their parameters sit, and the buffer sizes.
import { UsageError } from '../errors.js';

export const SHAPE_NAMES = ['tiny', 'dlrm', 'dlrm-128', 'many-tables'] as const;
export type ShapeName = (typeof SHAPE_NAMES)[number];

export interface Shape {
  name: ShapeName;
  /** Sparse features, one embedding table each, sharded table-wise: feature f lives on rank f % W. */
  features: number;
  /** Embedding dimension (every table). */
  dim: number;
  /** Rows per table. */
  rows: number;
  /** Samples per rank per step. */
  batch: number;
  /** Mean ids per (sample, feature): lengths are uniform in 0..2·pooling, so every batch's splits differ. */
  pooling: number;
  /** Dense input features per sample. */
  denseIn: number;
  /** Bottom MLP widths over the dense inputs (every layer ReLU). */
  bottom: number[];
  /** Over-arch widths over [bottom output | every feature's pooled embedding] (ReLU but the last, which is 1). */
  top: number[];
}

// TorchRec's DLRM defaults (dense 512-256-64, over 512-512-256-1, 13 dense features); Criteo's
// sparse features are one id per sample, here a mean of one so the splits still vary.
const DLRM = { features: 26, rows: 100_000, batch: 8192, pooling: 1, denseIn: 13, bottom: [512, 256, 64], top: [512, 512, 256, 1] };

export const SHAPES: Readonly<Record<ShapeName, Shape>> = {
  // Uneven ownership at W = 2 (3 features and 2) and 3, so the all-to-alls' splits differ by peer.
  tiny: { name: 'tiny', features: 5, dim: 8, rows: 1000, batch: 64, pooling: 3, denseIn: 13, bottom: [16, 8], top: [16, 8, 1] },
  dlrm: { name: 'dlrm', dim: 64, ...DLRM },
  'dlrm-128': { name: 'dlrm-128', dim: 128, ...DLRM },
  'many-tables': { name: 'many-tables', dim: 256, ...DLRM, features: 170, pooling: 30, batch: 32768 },
};

export function shapeOf(name: string): Shape {
  const s = SHAPES[name as ShapeName];
  if (s === undefined) throw new UsageError(`unknown shape '${name}' (choose from ${SHAPE_NAMES.join(', ')})`);
  return s;
}

/** One dense layer: y = relu?(x·Wᵀ + b), W [out][in] at params[w], b [out] at params[b]. */
export interface Layer {
  in: number;
  out: number;
  relu: boolean;
  w: number;
  b: number;
}

/** What a shape means for rank `rank` of `world`. */
export class Layout {
  readonly shape: Shape;
  readonly world: number;
  readonly rank: number;
  /** Features each rank owns (round-robin), by rank. */
  readonly owned: number[];
  /** Features this rank owns: global f = rank + k·world for local k. */
  readonly local: number;
  /** The most any rank owns: symmetric buffers are sized for it. */
  readonly maxLocal: number;
  /** Width of the over arch's input: the bottom output, then every feature's pooled embedding. */
  readonly topIn: number;
  readonly bottom: Layer[];
  readonly top: Layer[];
  readonly paramCount: number;
  /** Widest activation (gradient scratch is sized for it). */
  readonly maxWidth: number;

  constructor(shape: Shape, world: number, rank: number) {
    this.shape = shape;
    this.world = world;
    this.rank = rank;
    this.owned = Array.from({ length: world }, (_, p) => ownedBy(shape.features, world, p));
    this.local = this.owned[rank];
    this.maxLocal = this.owned[0];
    this.topIn = shape.bottom[shape.bottom.length - 1] + shape.features * shape.dim;
    let at = 0;
    const layers = (input: number, widths: number[], reluLast: boolean): Layer[] =>
      widths.map((out, i) => {
        const inW = i === 0 ? input : widths[i - 1];
        const layer = { in: inW, out, relu: reluLast || i < widths.length - 1, w: at, b: at + out * inW };
        at += out * inW + out;
        return layer;
      });
    this.bottom = layers(shape.denseIn, shape.bottom, true);
    this.top = layers(this.topIn, shape.top, false);
    this.paramCount = at;
    this.maxWidth = Math.max(...shape.bottom, ...shape.top, shape.denseIn);
  }

  slotFeature(q: number): number {
    return slotFeature(q, this.shape.features, this.world);
  }

  /** Global feature of this rank's local table k. */
  featureOf(k: number): number {
    return this.rank + k * this.world;
  }

  /** Bags (sample, feature) this rank receives per step: every rank's samples, for its own features. */
  get recvBags(): number {
    return this.world * this.local * this.shape.batch;
  }
  /** Most ids one rank sends per step (every length at its maximum, 2·pooling). */
  get maxSendIds(): number {
    return this.shape.features * this.shape.batch * 2 * this.shape.pooling;
  }
  /** Most ids one rank receives per step (symmetric: sized for the rank owning the most features). */
  get maxRecvIds(): number {
    return this.world * this.maxLocal * this.shape.batch * 2 * this.shape.pooling;
  }
}

/** Global feature of send slot q: a rank sends its features owner by owner (pl_slot_feature). */
export function slotFeature(q: number, features: number, world: number): number {
  for (let p = 0; p < world; p++) {
    const n = ownedBy(features, world, p);
    if (q < n) return p + q * world;
    q -= n;
  }
  throw new RangeError(`send slot ${q} past ${features} features`);
}

export function ownedBy(features: number, world: number, p: number): number {
  return p < features ? Math.floor((features - p + world - 1) / world) : 0;
}
