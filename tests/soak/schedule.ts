// The soak's schedule: what each call is (direct, part of a burst, replayed from a graph, refused)
// and its splits, drawn from the run's seed alone, so every rank draws the same steps without
// talking (ranks must make the same collective calls in the same order).
import { maxRowsFor } from '../conformance/harness.js';
import { makeSplits, PATTERNS, ROW_SIZES, Rng, type SplitsPattern } from '../conformance/reference.js';

/** Exchanges (buffer sets) each rank holds: enough for the largest burst. */
export const SLOTS = 4;
const MAX_BURST = 4;

/** Per mille of steps, by kind; the rest are direct calls. */
const REPLAY = 100;
const BURST = 80;
const REFUSED = 10;
/** Per mille of replay steps that capture their graph again first (capture and close, soaked too). */
const RECAPTURE = 50;
/** Per mille of replays and bursts with one refused call among good ones. */
const REFUSED_IN_GROUP = 150;

/** Negative splits a refused call may carry: small, the int32 edge, the most negative safe integer. */
const NEGATIVE = [-1, -3, -(2 ** 31), Number.MIN_SAFE_INTEGER];

export interface PlannedCall {
  /** Index of the call in the run, 0-based: names it in every message. */
  call: number;
  slot: number;
  lane: number;
  rowBytes: number;
  pattern: SplitsPattern;
  /** S[p][r] = rows rank p sends rank r. */
  S: number[][];
  /** Set on a call that must be refused: the one negative entry, S[rank][peer] = needed. */
  refused?: { rank: number; peer: number; needed: number };
}

/** Where a graph's calls run; the row size is fixed at capture. */
export interface GraphShape {
  calls: { slot: number; lane: number; rowBytes: number }[];
}

export type Step =
  | { kind: 'direct'; calls: PlannedCall[] }
  | { kind: 'burst'; calls: PlannedCall[] }
  | { kind: 'replay'; graph: number; recapture: boolean; calls: PlannedCall[] };

export interface ScheduleOptions {
  seed: number;
  world: number;
  lanes: number;
  /** Bytes per (sender, receiver) pair at most. */
  budget: number;
  /** False on nccl, which cannot capture. */
  replays: boolean;
}

export class Schedule {
  readonly #o: ScheduleOptions;
  /** Graph 0 holds one call, graph 1 two (on their own lanes, so a capture may span lanes). */
  readonly graphs: GraphShape[];

  constructor(o: ScheduleOptions) {
    this.#o = o;
    const rng = new Rng(o.seed, 0x9a);
    this.graphs = [this.#shape(rng, [0]), this.#shape(rng, [1, 2])];
  }

  /** The step whose first call is `call`, with at most `left` calls. */
  next(call: number, left: number): Step {
    const rng = new Rng(this.#o.seed, 0x57e9, call);
    const roll = rng.int(1000);
    if (this.#o.replays && roll < REPLAY && left >= 2) {
      const graph = rng.int(this.graphs.length);
      const recapture = rng.int(1000) < RECAPTURE;
      if (recapture) this.graphs[graph] = this.#shape(rng, this.graphs[graph].calls.map((c) => c.slot));
      const calls = this.graphs[graph].calls.map((g, i) => this.#call(call + i, g.slot, g.lane, g.rowBytes));
      this.#maybeRefuse(rng, calls);
      return { kind: 'replay', graph, recapture, calls };
    }
    if (roll < REPLAY + BURST && left >= 2) {
      const n = Math.min(left, 2 + rng.int(MAX_BURST - 1));
      const slots = shuffle(rng, Array.from({ length: SLOTS }, (_, i) => i)).slice(0, n);
      const calls = slots.map((slot, i) => this.#call(call + i, slot, rng.int(this.#o.lanes), rng.pick(ROW_SIZES)));
      this.#maybeRefuse(rng, calls);
      return { kind: 'burst', calls };
    }
    const c = this.#call(call, rng.int(SLOTS), rng.int(this.#o.lanes), rng.pick(ROW_SIZES));
    if (roll >= 1000 - REFUSED) refuse(rng, c);
    return { kind: 'direct', calls: [c] };
  }

  #call(call: number, slot: number, lane: number, rowBytes: number): PlannedCall {
    const rng = new Rng(this.#o.seed, call);
    const pattern = rng.pick(PATTERNS);
    return { call, slot, lane, rowBytes, pattern, S: makeSplits(rng, this.#o.world, pattern, maxRowsFor(this.#o.budget, rowBytes)) };
  }

  #maybeRefuse(rng: Rng, calls: PlannedCall[]): void {
    if (rng.int(1000) < REFUSED_IN_GROUP) refuse(rng, calls[rng.int(calls.length)]);
  }

  #shape(rng: Rng, slots: number[]): GraphShape {
    return { calls: slots.map((slot) => ({ slot, lane: rng.int(this.#o.lanes), rowBytes: rng.pick(ROW_SIZES) })) };
  }
}

/** Makes one entry negative: every rank must refuse the call with that entry named. */
function refuse(rng: Rng, c: PlannedCall): void {
  const W = c.S.length;
  const [rank, peer] = [rng.int(W), rng.int(W)];
  const needed = rng.pick(NEGATIVE);
  c.S[rank][peer] = needed;
  c.refused = { rank, peer, needed };
}

export function shuffle<T>(rng: Rng, xs: T[]): T[] {
  for (let i = xs.length - 1; i > 0; i--) {
    const j = rng.int(i + 1);
    [xs[i], xs[j]] = [xs[j], xs[i]];
  }
  return xs;
}
