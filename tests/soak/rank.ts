// The soak's rank program (run on every rank by scripts/soak.mjs through runRanks): many consecutive
// allToAllV calls as tests/soak/schedule.ts draws them, each checked against the conformance
// suite's host reference, with memory sampled after a warm-up and at the end.
import type { Comm, Handle, Replay } from '../../src/backends/backend.js';
import type { RankContext } from '../../src/world/ranks.js';
import { expectSplitsError } from '../conformance/expect.js';
import { ConformanceError, Exchange, sizesFor } from '../conformance/harness.js';
import { Rng } from '../conformance/reference.js';
import { sampleMemory, type MemorySample } from './memory.js';
import { Schedule, shuffle, SLOTS, type PlannedCall, type Step } from './schedule.js';

export interface SoakArg {
  seed: number;
  calls: number;
  /** Bytes per (sender, receiver) pair at most. */
  budget: number;
  /** Check the output of every k-th good call (refused calls are always checked). */
  checkEvery: number;
  /** Calls before the first memory sample (buffers, JIT caches and graphs settle first). */
  warmupCalls: number;
  /** Flip byte 0 of this call's output on this rank before checking it: proves the check can fail. */
  corrupt?: { call: number; rank: number };
  /** Least milliseconds between two progress reports of rank 0. */
  reportMs: number;
}

/** What rank 0 reports while it runs. */
export interface SoakProgress {
  calls: number;
}

export interface SoakResult {
  rank: number;
  calls: number;
  checked: number;
  /** Calls by how they were made; `refused` counts those refused as the schedule required. */
  direct: number;
  inBursts: number;
  bursts: number;
  replayed: number;
  replays: number;
  recaptures: number;
  refused: number;
  start: MemorySample;
  end: MemorySample;
}

export async function soak(comm: Comm, arg: SoakArg, ctx: RankContext): Promise<SoakResult> {
  const run = await SoakRun.create(comm, arg);
  let lastReport = performance.now();
  try {
    while (run.calls < arg.calls) {
      if (run.start === undefined && run.calls >= arg.warmupCalls) run.start = sampleMemory(comm, run.calls);
      await run.step();
      if (comm.rank === 0 && performance.now() - lastReport >= arg.reportMs) {
        ctx.report({ calls: run.calls } satisfies SoakProgress);
        lastReport = performance.now();
      }
    }
    run.start ??= sampleMemory(comm, run.calls);
    return run.result(sampleMemory(comm, run.calls));
  } finally {
    run.close();
  }
}

class SoakRun {
  readonly #comm: Comm;
  readonly #arg: SoakArg;
  readonly #slots: Exchange[];
  readonly #schedule: Schedule;
  readonly #graphs: Replay[];
  readonly #counts = { checked: 0, direct: 0, inBursts: 0, bursts: 0, replayed: 0, replays: 0, recaptures: 0, refused: 0 };
  calls = 0;
  start: MemorySample | undefined;

  private constructor(comm: Comm, arg: SoakArg, slots: Exchange[]) {
    this.#comm = comm;
    this.#arg = arg;
    this.#slots = slots;
    const replays = comm.backend !== 'nccl'; // NCCL needs the splits on the host: no capture
    this.#schedule = new Schedule({ seed: arg.seed, world: comm.worldSize, lanes: comm.laneCount, budget: arg.budget, replays });
    // Captured before the first sample, so the same number of graphs is open at both samples.
    this.#graphs = replays ? this.#schedule.graphs.map((_, g) => this.#capture(g)) : [];
  }

  /** Collective: allocates every slot's symmetric output. */
  static async create(comm: Comm, arg: SoakArg): Promise<SoakRun> {
    const slots: Exchange[] = [];
    for (let i = 0; i < SLOTS; i++) slots.push(await Exchange.create(comm, sizesFor(comm.worldSize, arg.budget)));
    const run = new SoakRun(comm, arg, slots);
    // Every rank has captured its graphs before any calls (README: instantiating can wait for the kernels on the GPU).
    await comm.barrier();
    return run;
  }

  async step(): Promise<void> {
    const step = this.#schedule.next(this.calls, this.#arg.calls - this.calls);
    for (const c of step.calls) this.#slots[c.slot].prepare(this.#arg.seed, c.call, c.S, c.rowBytes);
    if (step.kind === 'direct') this.#direct(step.calls[0]);
    else if (step.kind === 'burst') this.#burst(step.calls);
    else await this.#replay(step);
    for (const c of step.calls) this.#check(c, step);
    this.calls += step.calls.length;
  }

  result(end: MemorySample): SoakResult {
    return { rank: this.#comm.rank, calls: this.calls, ...this.#counts, start: this.start!, end };
  }

  close(): void {
    for (const g of this.#graphs) g.close();
  }

  #direct(c: PlannedCall): void {
    this.#counts.direct++;
    this.#outcome(this.#slots[c.slot].call(c.rowBytes, this.#comm.lane(c.lane)), [c], 'direct');
  }

  /**
   * Several calls in flight at once on distinct slots (and lanes), then their handles waited in an
   * order of this rank's own, some not at all: each handle must report its own call, and a refused
   * call nobody waits for must not surface anywhere else.
   */
  #burst(calls: PlannedCall[]): void {
    this.#counts.bursts++;
    this.#counts.inBursts += calls.length;
    const handles = calls.map((c) => this.#slots[c.slot].call(c.rowBytes, this.#comm.lane(c.lane)));
    const rng = new Rng(this.#arg.seed, 0xb0, calls[0].call, this.#comm.rank);
    const unwaited = new Set<number>();
    for (const i of shuffle(rng, calls.map((_, i) => i))) {
      if (rng.int(4) === 0) unwaited.add(i);
      else this.#outcome(handles[i], [calls[i]], `burst of ${calls.length}`);
    }
    // The host must still know the unwaited calls have run before it reads their outputs.
    for (const lane of new Set([...unwaited].map((i) => calls[i].lane))) this.#comm.record(this.#comm.lane(lane).stream).wait();
  }

  async #replay(step: Extract<Step, { kind: 'replay' }>): Promise<void> {
    this.#counts.replays++;
    this.#counts.replayed += step.calls.length;
    if (step.recapture) {
      this.#counts.recaptures++;
      this.#graphs[step.graph].close();
      this.#graphs[step.graph] = this.#capture(step.graph);
      // Every rank recaptures at this step (one schedule): all of them before any replays it.
      await this.#comm.barrier();
    }
    this.#outcome(this.#graphs[step.graph].launch(), step.calls, `replay of graph ${step.graph}`);
  }

  /**
   * Every call is made from the capture stream, so a call on another lane is forked from it and
   * joined back: the graph spans lanes. (From its own lane's stream, which is not capturing, the
   * call would run at once instead of being recorded.)
   */
  #capture(graph: number): Replay {
    const { calls } = this.#schedule.graphs[graph];
    const stream = this.#comm.lane(calls[0].lane).stream;
    return this.#comm.capture(stream, () => {
      for (const c of calls) {
        const { input, output, inSplits, outSplitsOffsets } = this.#slots[c.slot];
        this.#comm.allToAllV({ input, output, inSplits, outSplitsOffsets, rowBytes: c.rowBytes, lane: this.#comm.lane(c.lane), stream });
      }
    });
  }

  /** `handle` covers `calls` (made `how`): it must throw the refused one's SplitsError, or nothing. */
  #outcome(handle: Handle, calls: PlannedCall[], how: string): void {
    const refused = calls.find((c) => c.refused !== undefined);
    const me = this.#comm.rank;
    if (refused !== undefined) {
      const { rank, peer, needed } = refused.refused!;
      expectSplitsError(handle, { problem: 'negative', rank, peer, needed, available: 0 }, me, `${label(refused, how)}, rank ${me}`);
      return;
    }
    try {
      handle.wait();
    } catch (err) {
      const which = calls.map((c) => label(c, how)).join(' and ');
      throw new ConformanceError(`${which}: rank ${me}: a good call's handle threw ${(err as Error).name}: ${(err as Error).message}`, { cause: err });
    }
  }

  /** After the call has completed on this rank: its output against the reference, or untouched. */
  #check(c: PlannedCall, step: Step): void {
    const ex = this.#slots[c.slot];
    const where = label(c, step.kind);
    const corrupt = this.#arg.corrupt;
    if (corrupt?.call === c.call && corrupt.rank === this.#comm.rank) {
      const [b] = this.#comm.read(ex.output, 0, 1);
      this.#comm.write(ex.output, Uint8Array.of(b ^ 0xff));
    }
    if (c.refused !== undefined) {
      this.#counts.refused++;
      this.#counts.checked++;
      ex.verifyUntouched(`${where}, refused`);
    } else if (c.call % this.#arg.checkEvery === 0 || corrupt?.call === c.call) {
      this.#counts.checked++;
      ex.verify(this.#arg.seed, c.call, c.S, c.rowBytes, where);
    }
  }
}

function label(c: PlannedCall, how: string): string {
  return `call ${c.call} (${how}, ${c.pattern} splits, rowBytes ${c.rowBytes}, lane ${c.lane}, slot ${c.slot})`;
}
