// The benchmark's rank program: one sweep over sizes, run on every rank through runRanks.
// Per size: write the splits, check one eager call of the op (and, on cuda, one graph replay)
// against a host reference, time both (iterations chosen so a timed loop lasts >= 20 ms, median of
// repeats, each repeat's figure the slowest rank's), then, for the MoE ops, the 1-D allToAllV of the
// same bytes (ops.ts), then the same-run reference (reference.ts).
import type { Comm, DeviceBuffer, Replay, Stream } from '../backends/backend.js';
import { CPU_MAX_BUFFER_BYTES } from '../backends/cpu/buffer.js';
import type { RankContext } from '../world/ranks.js';
import { Agreement } from '../collectives/agree.js';
import { InputPattern } from './data.js';
import { fitSweep } from './fit.js';
import { measure, slowestRank, splitsSync, type LoopOptions } from './measure.js';
import { OpBench, type BenchOp, type OpShape } from './ops.js';
import { checkSameOptions } from './same-options.js';
import { planReference, referenceWork, type ReferencePlan } from './reference.js';
import { makeSplits, type Splits, type SplitsKind } from './splits.js';
import { makeRow, type BenchRow, type CheckedForm, type RefKind, type Timing } from './table.js';
import { WrongResultError, type Check } from './verify.js';

/**
 * Calls captured in one graph for sizes up to GRAPH_BATCH_MAX_BYTES: the per-call time is then
 * device time, not the host's launch rate. Larger calls are long enough to replay one by one.
 */
const GRAPH_CALLS = 50;
const GRAPH_BATCH_MAX_BYTES = 4 << 20;

export interface SweepArg {
  /** Input bytes per rank, ascending. */
  sizes: number[];
  splits: SplitsKind;
  rowBytes: number;
  /** What is timed (default alltoallv, the 1-D call). */
  op?: BenchOp;
  /** MoE ops: experts per rank (default 1) and the dispatch's majorAlign (default 1). */
  experts?: number;
  align?: number;
  /** Every call's SM budget (the calls' maxBlocks; binds the cuda backend). */
  maxBlocks?: number;
  /** Picks the split layouts (and the sampled rows): same seed, same layouts. */
  seed: number;
  /** Picks the input bytes: fresh for every run. */
  dataKey: number;
  /** Fixed iterations per timed loop; chosen per size when absent. */
  iters?: number;
  repeats: number;
}

/** The CLI's names of SweepArg's fields, where not the field's own. */
const SWEEP_FLAGS = { sizes: 'sizes (--min, --max, --rows-per-expert)', rowBytes: '--row-bytes', maxBlocks: '--max-blocks' };

export type SweepStage = 'verify' | 'eager' | 'graph' | '1d' | 'reference';

/** The sizes the sweep will run: fewer than asked when memory is short, and `dropped` says why (fit.ts). */
export type PlanReport = { type: 'plan'; device: string; sizes: number[]; dropped?: string };
export type ProgressReport = { type: 'progress'; index: number; count: number; bytes: number; stage: SweepStage };
export type RowReport = { type: 'row'; index: number; count: number; row: BenchRow };
/** What rank 0 sends to the main thread through ctx.report(). */
export type SweepReport = PlanReport | ProgressReport | RowReport;

/** Another rank's check failed: which, where. That rank threw the WrongResultError naming the byte. */
export interface WrongElsewhere {
  rank: number;
  form: CheckedForm;
  /** The op that went wrong, as a WrongResultError names it (all-to-all-v, dispatch, combine, roundtrip). */
  op: string;
  bytesPerRank: number;
}

export interface SweepResult {
  /** Rank 0's rows (empty on other ranks); they stop before the size whose check failed. */
  rows: BenchRow[];
  /** Set on the ranks whose own check passed when another rank's failed: the sweep stopped there. */
  stoppedBy?: WrongElsewhere;
}

export async function sweep(comm: Comm, arg: SweepArg, ctx: RankContext): Promise<SweepResult> {
  const lead = comm.rank === 0;
  const report = (message: SweepReport) => lead && ctx.report(message);
  const w = comm.worldSize;
  const shape: OpShape = { op: arg.op ?? 'alltoallv', experts: arg.experts ?? 1, align: arg.align ?? 1, rowBytes: arg.rowBytes, maxBlocks: arg.maxBlocks };
  // dataKey is drawn per process (rank 0's is taken below); the defaults as the sweep applies them.
  const { dataKey: _, ...options } = { ...arg, op: shape.op, experts: shape.experts, align: shape.align };
  await checkSameOptions(comm, { command: 'bench', options, flags: SWEEP_FLAGS });
  // One slot per timed loop: each loop's figure is the slowest rank's (slowestRank).
  const agree = await Agreement.create(comm, Math.max(4, arg.repeats));
  // Ranks check each other's rows, so they need one data key: rank 0's (processes each drew their own).
  arg = { ...arg, dataKey: agree.gather([arg.dataKey])[0][0] };
  const held: DeviceBuffer[] = [];
  const keep = (buf: DeviceBuffer) => (held.push(buf), buf);
  const replays: Replay[] = [];
  try {
    const reference = planReference(comm, agree);
    const all = arg.sizes.map((bytesPerRank) =>
      makeSplits({ kind: arg.splits, worldSize: w, bytesPerRank, rowBytes: arg.rowBytes, seed: arg.seed, experts: shape.experts }));
    const { plans, memory, dropped } = fitToMemory(comm, agree, all, shape, arg.sizes, reference.kind);
    // The sizes are whole rows (runBench rounds them), so each is the bytes a rank sends.
    report({ type: 'plan', device: comm.deviceName, sizes: arg.sizes.slice(0, plans.length), dropped });

    const bench = await OpBench.create(comm, shape, memory, keep);
    const copy = reference.timesCopy ? { src: keep(comm.alloc(memory.copyBytes)), dst: keep(comm.alloc(memory.copyBytes)) } : undefined;
    const patterns = Array.from({ length: w }, (_, r) => new InputPattern(arg.dataKey, r));
    patterns[comm.rank].fill(comm, bench.input, memory.inputBytes);
    // Untouched pages can read faster than real data (the zero page on CPU): fill the copy's source too.
    if (copy) patterns[comm.rank].fill(comm, copy.src, memory.copyBytes);

    const stream = comm.lane(0).stream;
    const loops: LoopOptions = { fixedIters: arg.iters, repeats: arg.repeats };
    const rows: BenchRow[] = [];
    // Only cuda has graphs: nccl cannot capture (its calls need the splits on the host), and a cpu
    // "replay" is the same closure called again.
    const capturable = comm.backend === 'cuda';
    const stopped = (stoppedBy: WrongElsewhere): SweepResult => ({ rows: lead ? rows : [], stoppedBy });
    for (const [index, splits] of plans.entries()) {
      const bytes = splits.rowsPerRank * arg.rowBytes;
      const progress = (stage: SweepStage) => report({ type: 'progress', index, count: plans.length, bytes, stage });
      const checked: CheckedForm[] = [];
      progress('verify');
      const size = bench.size(splits, patterns, arg.seed);
      let stoppedBy = size.setup && (await checkedRun(comm, agree, size.setup.check, 'eager', size.setup.run));
      stoppedBy ??= await checkedRun(comm, agree, size.check, 'eager', () => size.call().wait());
      if (stoppedBy) return stopped(stoppedBy);
      checked.push('eager');
      progress('eager');
      const call = () => void size.call();
      // The first size of a sweep ran several times slower than the same size later (the process
      // and its main thread are still starting up): time it once more and keep the second.
      if (index === 0) measure(comm, stream, call, { ...loops, agree });
      const time = slowestRank(agree, measure(comm, stream, call, { ...loops, agree }));
      const syncUs = comm.splitsSyncUs === undefined ? NaN : splitsSync(comm, size.call);
      let graph: Timing | undefined;
      if (capturable) {
        for (const r of replays.splice(0)) r.close();
        const batch = await captureBatch(comm, stream, call, bytes);
        replays.push(batch.replay);
        stoppedBy = await checkedRun(comm, agree, size.check, 'graph', () => batch.replay.launch(stream).wait());
        if (stoppedBy) return stopped(stoppedBy);
        checked.push('graph');
        progress('graph');
        graph = timeReplay(comm, agree, stream, loops, batch);
      }
      let oneD: { time: Timing; graph?: Timing } | undefined;
      if (size.oneD) {
        progress('1d');
        const oneDCall = size.oneD;
        oneD = { time: slowestRank(agree, measure(comm, stream, oneDCall, { ...loops, agree })) };
        if (capturable) {
          const batch = await captureBatch(comm, stream, oneDCall, bytes);
          replays.push(batch.replay);
          oneD.graph = timeReplay(comm, agree, stream, loops, batch);
        }
      }
      progress('reference');
      const works = size.directions.map((d) => referenceWork(comm, reference, { input: d.input, output: d.output, copy }, d.splits, arg.rowBytes, stream));
      const work = works.every((f) => f === undefined) ? undefined : () => works.forEach((f) => f?.());
      const refTime = await timeReference(comm, agree, reference, loops, work);
      const [slowestSync] = agree.max([syncUs]);
      const hostSyncUs = Number.isNaN(slowestSync) ? undefined : slowestSync;
      const row = makeRow({ ranks: w, bytes, time, graph, ref: reference.kind, refTime, checked, hostSyncUs, oneD });
      rows.push(row);
      report({ type: 'row', index, count: plans.length, row });
    }
    return { rows: lead ? rows : [] };
  } finally {
    for (const r of replays) r.close();
    for (const buf of held) comm.free(buf);
    agree.close();
  }
}

/** A graph of `calls` back-to-back calls. */
export interface CapturedBatch {
  replay: Replay;
  calls: number;
}

/**
 * Collective: one graph of back-to-back calls, captured on every rank before any rank replays it.
 * GRAPH_CALLS of them up to GRAPH_BATCH_MAX_BYTES, so the per-call time is device time, not the
 * host's launch rate (with many ranks in one process, launches contend for the driver); larger
 * calls are long enough to replay one by one.
 *
 * The ranks meet on the host after capturing: instantiating a graph can wait for the kernels
 * running in the context, which ranks sharing a GPU as threads share, and a replayed call spins
 * on the GPU until its peers' calls arrive. A rank that replayed first held its slower peers
 * inside cuGraphInstantiate until its calls timed out (8 ranks on one H200, docs/perf.md).
 */
export async function captureBatch(comm: Comm, stream: Stream, call: () => void, bytes: number, most = GRAPH_CALLS): Promise<CapturedBatch> {
  const calls = bytes <= GRAPH_BATCH_MAX_BYTES ? most : 1;
  const replay = comm.capture(stream, () => {
    for (let k = 0; k < calls; k++) call();
  });
  try {
    await comm.barrier();
  } catch (e) {
    replay.close();
    throw e;
  }
  return { replay, calls };
}

/**
 * Collective: `use(batch)`, then the replay closed and the ranks met (a graph's destruction is a
 * driver call beside peers' calls too); closed without the meeting when `use` throws.
 */
export async function usingBatch<T>(comm: Comm, batch: CapturedBatch, use: (batch: CapturedBatch) => T): Promise<T> {
  let result: T;
  try {
    result = use(batch);
  } catch (e) {
    batch.replay.close();
    throw e;
  }
  batch.replay.close();
  await comm.barrier();
  return result;
}

/** Collective: µs per captured call, replaying the graph back to back. */
export function timeReplay(comm: Comm, agree: Agreement, stream: Stream, loops: LoopOptions, { replay, calls }: CapturedBatch): Timing {
  const launch = () => void replay.launch(stream);
  return slowestRank(agree, measure(comm, stream, launch, { ...loops, agree }).map((us) => us / calls));
}

/**
 * Collective: the reference's timing, between barriers (the device is quiet, and peer copies land
 * in outputs nobody is using). `copy`: the rank that has `work` times it alone; `peer-copy` and
 * `rank-copy`: every rank at once, meeting before each timed loop so the copies of all ranks overlap
 * as an exchange's would.
 */
async function timeReference(comm: Comm, agree: Agreement, plan: ReferencePlan, loops: LoopOptions, work: (() => void) | undefined): Promise<Timing | undefined> {
  if (plan.kind === 'none') return undefined;
  await comm.barrier();
  let samples: number[];
  if (plan.kind === 'peer-copy' || plan.kind === 'rank-copy') samples = measure(comm, comm.lane(0).stream, work!, { ...loops, agree, meetEachLoop: true, leadIn: plan.leadIn });
  else samples = work ? measure(comm, comm.lane(0).stream, work, loops) : new Array<number>(loops.repeats).fill(0);
  await comm.barrier();
  return slowestRank(agree, samples);
}

/**
 * Runs one call whose result `check` verifies. A wrong result on any rank stops every rank: the
 * rank that saw it throws (its error names the first wrong byte); the others return which rank
 * saw it, rather than wait for it in the next call.
 */
async function checkedRun(comm: Comm, agree: Agreement, check: Check, form: CheckedForm, run: () => void): Promise<WrongElsewhere | undefined> {
  await comm.barrier(); // every peer has finished writing into our output...
  check.arm();
  await comm.barrier(); // ...and nobody writes into an output before its owner armed it
  run();
  return agreedCheck(agree, { form, op: check.op, bytesPerRank: check.bytesPerRank }, () => check.verify(form));
}

/**
 * Collective: runs `verify` on every rank and shares its outcome. The rank that found a wrong
 * result throws (its error names the first wrong byte); the others return where it was found,
 * rather than wait for that rank in the next call.
 */
export function agreedCheck(agree: Agreement, what: Omit<WrongElsewhere, 'rank'>, verify: () => void): WrongElsewhere | undefined {
  let wrong: WrongResultError | undefined;
  try {
    verify();
  } catch (e) {
    if (!(e instanceof WrongResultError)) throw e;
    wrong = e;
  }
  const finder = agree.gather([wrong ? 1 : 0]).findIndex(([bad]) => bad === 1);
  if (wrong) throw wrong;
  return finder < 0 ? undefined : { rank: finder, ...what };
}

/**
 * The leading plans whose buffers fit free memory and the backend's largest buffer (the same on
 * every rank: ranks on different devices may see different free memory), and why, when that drops sizes.
 */
function fitToMemory(comm: Comm, agree: Agreement, all: Splits[], shape: OpShape, sizes: readonly number[], ref: RefKind) {
  const [free] = agree.min([comm.freeMemory()]);
  const maxBuffer = comm.backend === 'cpu' ? CPU_MAX_BUFFER_BYTES : Infinity;
  return fitSweep(all, sizes, shape, ref, { free, maxBuffer, perDevice: comm.ranksOnDevice, deviceName: comm.deviceName, backend: comm.backend });
}
