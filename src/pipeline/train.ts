// The training loop in TorchRec's TrainPipelineSparseDist order. Step i, as issued:
//   data stream:  batch i+1 and its ids' splits (after step i-1's embedding update freed its slot)
//   input lane:   input dist of batch i+1: all-to-all of the lengths, then of the ids, device splits
//   compute:      [waits for batch i's input dist] lookup (sum pooling over this rank's tables)
//   lane 0:       output dist: pooled embeddings back to the samples' ranks
//   compute:      bottom forward; [waits for the output dist] top forward and loss; top backward
//   lane 0:       gradient all-to-all (pooled embeddings' gradients back to the tables' ranks)
//   compute:      [waits] embedding update; bottom backward
//   lane 0:       gradient all-reduce (dense parameters, in place)
//   compute:      [waits] SGD
// The arms differ only in where the input dist runs: `one-lane` queues it on lane 0 with every
// other collective (one communicator: it waits behind step i-1's all-reduce, and step i's output
// dist waits behind it); `two-lanes` gives it lane 1, so it overlaps the other lane and the
// compute; `two-lanes-serialized` gives it lane 1 but makes every collective wait for the one
// issued before it, whichever lane (one stream's order with two lanes' machinery: the control).
// Every arm computes the same thing in the same order on each stream, so results are bit-identical.
import type { Comm, Handle, Lane, Stream } from '../backends/backend.js';
import { UsageError } from '../errors.js';
import { at4 } from './compute.js';
import type { Model } from './model.js';
import { checksumWords, digest } from './synth.js';
import { median } from '../bench/measure.js';
import { PHASES, type Phase, type Span, type Track } from './trace.js';

export const ARMS = ['one-lane', 'two-lanes', 'two-lanes-serialized'] as const;
export type Arm = (typeof ARMS)[number];

/**
 * The host waits for step i-HANDLE_LAG's collectives before it queues step i+1: each call's
 * outcome is read (a refused call fails the run) while its handle is valid, and the host runs at
 * most this many steps ahead of the device. Never a wait for work the device could still need.
 */
const HANDLE_LAG = 8;
/** Marks a timed step may make, at most (its phases on every stream, its collectives): Clock.reserve. */
const MARKS_PER_STEP = 40;
/**
 * A timed step's marks are read (and handed back to the clock) this many steps after it was
 * queued, when the host has already waited for what follows it: a run holds marks for these
 * steps, not for all of them (10,000 steps held 400,000 events, about 1 GB of host memory).
 */
const READ_LAG = HANDLE_LAG + 2;

export interface ArmOptions {
  arm: Arm;
  /** Untimed steps first (the pipeline fills, clocks and caches warm up). */
  warmup: number;
  iters: number;
  seed: number;
  /**
   * At most this many thread blocks for each input-dist all-to-all (allToAllV's maxBlocks, cuda):
   * the SM budget of the lane that overlaps the compute, so it does not starve the GEMMs.
   */
  inputDistBlocks?: number;
  /** After each step is queued (progress). */
  onStep?: (step: number) => void;
  /** Keep every timed step's spans (for a trace); without, only each phase's median is kept. */
  keepSpans?: boolean;
}

export interface ArmRun {
  arm: Arm;
  /** Per timed step: µs from its start on the compute stream to the next's. */
  stepUs: number[];
  /** Per timed step: µs the compute stream was busy (its spans). */
  computeUs: number[];
  /** µs per timed step the host spent inside collective calls (launches; the nccl backend's wait for the splits; on cpu the exchange itself). */
  hostBlockedUs: number;
  /** Host wall µs per timed step while queueing: at least the host's cost of a step, at most the device's step (the host waits HANDLE_LAG steps back). */
  hostIssueUs: number;
  /** Every step's loss on this rank (f32 values). */
  loss: number[];
  /** synth.ts checksumWords of this rank's tables and of its dense parameters after the last step. */
  tables: [number, number];
  params: [number, number];
  /** Each phase's median µs over the timed steps (PHASES' order; 0 for a phase with no span). */
  phaseUs: number[];
  /** The timed steps' spans, µs from their start: only with keepSpans, else empty. */
  spans: Span[];
}

interface Marked {
  track: Track;
  name: Phase;
  step: number;
  from: number;
  to: number;
}

/** Runs one arm from the initial model: `warmup` + `iters` steps. Collective. */
export async function runArm(model: Model, opts: ArmOptions): Promise<ArmRun> {
  const { comm } = model;
  if (!(opts.iters >= 1) || !(opts.warmup >= 0)) throw new UsageError(`pipeline: at least one timed step (iters ${opts.iters}, warmup ${opts.warmup})`);
  if (opts.arm !== 'one-lane' && comm.laneCount < 2) throw new UsageError(`pipeline arm ${opts.arm} needs 2 lanes; the communicator has ${comm.laneCount}`);
  await comm.barrier();
  return new ArmLoop(model, opts).run();
}

class ArmLoop {
  readonly #m: Model;
  readonly #comm: Comm;
  readonly #opts: ArmOptions;
  readonly #C: Stream;
  readonly #D: Stream;
  readonly #lane0: Lane;
  readonly #inputLane: Lane;
  /** Spans whose marks are not read yet, oldest first. */
  readonly #open: Marked[] = [];
  /** Start marks of the timed steps not read yet, oldest first; the first is step #startStep's. */
  readonly #starts: number[] = [];
  #startStep = 0;
  /** The mark the timed steps' spans are measured from (the line-up). */
  #base = -1;
  #stepUs: number[] = [];
  #computeUs: number[] = [];
  /** Each phase's durations, µs, PHASES' order. */
  readonly #phaseUs: number[][] = PHASES.map(() => []);
  readonly #spans: Span[] = [];
  /** The collectives of the steps not yet waited for, oldest first (the prologue's, then each step's). */
  readonly #pending: Handle[][] = [[]];
  #timed = false;
  #step = 0;
  #blockedMs = 0;
  /** The last collective and its lane (the serialized arm chains them). */
  #last: { handle: Handle; lane: Lane } | undefined;

  constructor(model: Model, opts: ArmOptions) {
    this.#m = model;
    this.#comm = model.comm;
    this.#opts = opts;
    this.#C = model.compute.compute;
    this.#D = model.compute.data;
    this.#lane0 = this.#comm.lane(0);
    this.#inputLane = opts.arm === 'one-lane' ? this.#lane0 : this.#comm.lane(1);
  }

  run(): ArmRun {
    const { compute, b } = this.#m;
    const { warmup, iters, seed } = this.#opts;
    const steps = warmup + iters;
    const clock = compute.clock;
    clock.reset();
    // A timed step marks about 30 points (phases and collectives on every stream): room for the
    // steps whose marks are not read yet.
    clock.reserve(MARKS_PER_STEP * (Math.min(iters, READ_LAG + 2) + 1) + 1);
    this.#stepUs = new Array<number>(iters).fill(0);
    this.#computeUs = new Array<number>(iters).fill(0);
    this.#m.init(this.#C, seed);
    compute.zero(this.#C, at4(b.loss), 4 * steps);
    compute.sync(this.#C);

    this.#drawBatch(0);
    let ready = this.#inputDist(0);
    let updated: Handle | undefined;
    let hostStart = 0;
    for (let step = 0; step < steps; step++) {
      this.#step = step;
      if (step === warmup) {
        this.#base = this.#lineUp();
        this.#timed = true;
        this.#startStep = step;
        hostStart = performance.now();
      }
      if (this.#timed) this.#starts.push(clock.mark(this.#C));
      const slot = b.slots[step % 2];
      // The next batch's slot was last read by step i-1's embedding update.
      updated?.waitOn(this.#D);
      this.#drawBatch(step + 1);
      const nextReady = this.#inputDist(step + 1);

      ready.waitOn(this.#C);
      this.#span('compute', 'lookup', this.#C, () => this.#m.lookup(slot));
      const out = this.#collective('output dist', this.#lane0, this.#C, (lane) =>
        this.#comm.allToAllV({ input: b.pooledSend, output: b.pooledRecv, inSplits: b.outSplits, outSplitsOffsets: b.pooledSO, rowBytes: 4 * this.#dim, lane }));
      this.#span('compute', 'bottom forward', this.#C, () => this.#m.bottomForward(step, seed));
      out.waitOn(this.#C);
      this.#span('compute', 'top forward', this.#C, () => this.#m.topForward(step));
      this.#span('compute', 'top backward', this.#C, () => this.#m.topBackward());
      const grad = this.#collective('grad all-to-all', this.#lane0, this.#C, (lane) =>
        this.#comm.allToAllV({ input: b.dPooledSend, output: b.dPooledRecv, inSplits: b.gradSplits, outSplitsOffsets: b.gradSO, rowBytes: 4 * this.#dim, lane }));
      grad.waitOn(this.#C);
      this.#span('compute', 'embedding update', this.#C, () => this.#m.update(slot));
      updated = this.#comm.record(this.#C);
      this.#span('compute', 'bottom backward', this.#C, () => this.#m.bottomBackward());
      const reduced = this.#collective('grad all-reduce', this.#lane0, this.#C, (lane) =>
        this.#comm.allReduce({ input: b.grads, output: b.grads, count: this.#m.layout.paramCount, dtype: 'f32', op: 'sum', lane }));
      reduced.waitOn(this.#C);
      this.#span('compute', 'sgd', this.#C, () => this.#m.sgd());
      ready = nextReady;
      if (this.#pending.length > HANDLE_LAG) for (const h of this.#pending.shift()!) h.wait();
      this.#pending.push([]);
      if (this.#timed) this.#read(step - READ_LAG);
      this.#opts.onStep?.(step);
    }
    const end = clock.mark(this.#C);
    const hostIssueMs = performance.now() - hostStart;
    for (const hs of this.#pending) for (const h of hs) h.wait();
    for (const s of [this.#C, this.#D]) compute.sync(s);
    for (let i = 0; i < this.#comm.laneCount; i++) this.#comm.record(this.#comm.lane(i).stream).wait();

    this.#starts.push(end);
    this.#read(steps);
    for (const mark of [this.#starts.shift()!, this.#base]) clock.release(mark);
    const loss = [...new Float32Array(this.#comm.read(b.loss, 0, 4 * steps).buffer)];
    return {
      arm: this.#opts.arm,
      stepUs: this.#stepUs,
      computeUs: this.#computeUs,
      hostBlockedUs: (this.#blockedMs * 1000) / iters,
      hostIssueUs: (hostIssueMs * 1000) / iters,
      loss,
      tables: compute.checksum(this.#C, at4(b.tables), this.#m.layout.local * this.#m.layout.shape.rows * this.#dim),
      params: compute.checksum(this.#C, at4(b.params), this.#m.layout.paramCount),
      phaseUs: this.#phaseUs.map((us) => (us.length === 0 ? 0 : median(us))),
      spans: this.#spans,
    };
  }

  /** Reads the marks of the timed steps before `step` (their work has run) and hands them back. */
  #read(step: number): void {
    const clock = this.#m.compute.clock;
    const { warmup } = this.#opts;
    while (this.#starts.length >= 2 && this.#startStep < step) {
      const from = this.#starts.shift()!;
      this.#stepUs[this.#startStep++ - warmup] = clock.micros(from, this.#starts[0]);
      clock.release(from);
    }
    while (this.#open.length > 0 && this.#open[0].step < step) {
      const m = this.#open.shift()!;
      const startUs = clock.micros(this.#base, m.from);
      const endUs = clock.micros(this.#base, m.to);
      clock.release(m.from);
      clock.release(m.to);
      this.#phaseUs[PHASES.indexOf(m.name)].push(endUs - startUs);
      if (m.track === 'compute') this.#computeUs[m.step - warmup] += endUs - startUs;
      if (this.#opts.keepSpans) this.#spans.push({ track: m.track, name: m.name, step: m.step - warmup + 1, startUs, endUs });
    }
  }

  get #dim(): number {
    return this.#m.layout.shape.dim;
  }

  #drawBatch(batch: number): void {
    this.#span('data', 'batch', this.#D, () => this.#m.drawBatch(this.#m.b.slots[batch % 2], batch, this.#opts.seed));
  }

  /** All-to-all of the lengths, then of the ids (splits summed on the device by drawBatch): the ids' handle. */
  #inputDist(batch: number): Handle {
    const { b, layout } = this.#m;
    const { features, batch: B, pooling } = layout.shape;
    const slot = b.slots[batch % 2];
    this.#collective('input dist lengths', this.#inputLane, this.#D, (lane) =>
      this.#comm.allToAllV({ input: slot.sendLen, output: slot.recvLen, inSplits: b.lenSplits, outSplitsOffsets: slot.lenSO, rowBytes: 4, lane, maxBlocks: this.#opts.inputDistBlocks }));
    // Sized for the ids a batch has on average, not the buffer (room for every length at its maximum).
    return this.#collective('input dist ids', this.#inputLane, this.#D, (lane) =>
      this.#comm.allToAllV({ input: slot.sendIds, output: slot.recvIds, inSplits: slot.idsSplits, outSplitsOffsets: slot.idsSO, rowBytes: 4, lane, sizeHintBytes: 4 * features * B * pooling, maxBlocks: this.#opts.inputDistBlocks }));
  }

  /** A collective on `lane`, after the work queued on `caller`; its span covers it on the lane's stream. */
  #collective(name: Phase, lane: Lane, caller: Stream, call: (lane: Lane) => Handle): Handle {
    const clock = this.#m.compute.clock;
    // The lane waits for the caller here, not inside the call, so the span starts when the call can.
    this.#comm.record(caller).waitOn(lane.stream);
    if (this.#opts.arm === 'two-lanes-serialized' && this.#last !== undefined && this.#last.lane !== lane) this.#last.handle.waitOn(lane.stream);
    const from = this.#timed ? clock.mark(lane.stream) : -1;
    const started = performance.now();
    const handle = call(lane);
    if (this.#timed) {
      this.#blockedMs += performance.now() - started;
      this.#open.push({ track: `lane ${lane.index}`, name, step: this.#step, from, to: clock.mark(lane.stream) });
    }
    this.#last = { handle, lane };
    this.#pending[this.#pending.length - 1].push(handle);
    return handle;
  }

  #span(track: Track, name: Phase, stream: Stream, work: () => void): void {
    if (!this.#timed) return work();
    const clock = this.#m.compute.clock;
    const from = clock.mark(stream);
    work();
    this.#open.push({ track, name, step: this.#step, from, to: clock.mark(stream) });
  }

  /**
   * The start of the timed steps, on the compute stream, just after an all-reduce every rank leaves
   * at about the same moment: the ranks' clocks line up to within that exit's skew.
   */
  #lineUp(): number {
    const { align } = this.#m.b;
    this.#comm.allReduce({ input: align, output: align, count: 1, dtype: 'f32', op: 'sum', lane: this.#lane0, stream: this.#C }).waitOn(this.#C);
    return this.#m.compute.clock.mark(this.#C);
  }
}

/** Digests of an arm's results over every rank (rank order): what must agree between arms and backends. */
export interface Checksums {
  loss: string;
  tables: string;
  params: string;
}

export function checksumsOf(ranks: ReadonlyArray<Pick<ArmRun, 'loss' | 'tables' | 'params'>>): Checksums & { paramsAgree: boolean } {
  const lossBits = ranks.flatMap((r) => [...new Uint32Array(Float32Array.from(r.loss).buffer)]);
  return {
    loss: digest(checksumWords(Uint32Array.from(lossBits))),
    tables: digest(ranks.flatMap((r) => r.tables)),
    params: digest(ranks[0].params),
    // The all-reduce gives every rank the same sum, so the same parameters.
    paramsAgree: ranks.every((r) => r.params[0] === ranks[0].params[0] && r.params[1] === ranks[0].params[1]),
  };
}
