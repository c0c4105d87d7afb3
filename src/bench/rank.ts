// The benchmark's rank program: one sweep over sizes, run on every rank through runRanks.
// Per size: write the splits, check one eager call (and, on cuda, one graph replay) against a host
// reference, time both (iterations chosen so a timed loop lasts >= 20 ms, median of repeats, each
// repeat's figure the slowest rank's), then time the same-run reference (reference.ts).
import type { AllToAllVArgs, Comm, DeviceBuffer, Replay } from '../backends/backend.js';
import { UsageError } from '../errors.js';
import type { RankContext } from '../world/ranks.js';
import { Agreement } from './agree.js';
import { InputPattern } from './data.js';
import { measure, slowestRank, splitsSync, type LoopOptions } from './measure.js';
import { copyBytes, planReference, referenceWork, type ReferencePlan } from './reference.js';
import { makeSplits, type Splits, type SplitsKind } from './splits.js';
import { makeRow, type BenchRow, type CheckedForm, type RefKind, type Timing } from './table.js';
import { formatBytes } from './units.js';
import { CANARY_BYTES, ResultCheck, WrongResultError } from './verify.js';

/**
 * Calls captured in one graph for sizes up to GRAPH_BATCH_MAX_BYTES: the per-call time is then
 * device time, not the host's launch rate. Larger calls are long enough to replay one by one.
 */
const GRAPH_CALLS = 50;
const GRAPH_BATCH_MAX_BYTES = 4 << 20;
/** Allocations must fit free memory with this much to spare. */
const MEMORY_HEADROOM = 1.1;

export interface SweepArg {
  /** Input bytes per rank, ascending. */
  sizes: number[];
  splits: SplitsKind;
  rowBytes: number;
  /** Picks the split layouts (and the sampled rows): same seed, same layouts. */
  seed: number;
  /** Picks the input bytes: fresh for every run. */
  dataKey: number;
  /** Fixed iterations per timed loop; chosen per size when absent. */
  iters?: number;
  repeats: number;
}

export type SweepStage = 'verify' | 'eager' | 'graph' | 'reference';

/** The sizes the sweep will run: fewer than asked when memory is short, and `note` says so. */
export type PlanReport = { type: 'plan'; device: string; sizes: number[]; note?: string };
export type ProgressReport = { type: 'progress'; index: number; count: number; bytes: number; stage: SweepStage };
export type RowReport = { type: 'row'; index: number; count: number; row: BenchRow };
/** What rank 0 sends to the main thread through ctx.report(). */
export type SweepReport = PlanReport | ProgressReport | RowReport;

/** Another rank's check failed: which, where. That rank threw the WrongResultError naming the byte. */
export interface WrongElsewhere {
  rank: number;
  form: CheckedForm;
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
  // One slot per timed loop: each loop's figure is the slowest rank's (slowestRank).
  const agree = await Agreement.create(comm, Math.max(4, arg.repeats));
  // Ranks check each other's rows, so they need one data key: rank 0's (processes each drew their own).
  arg = { ...arg, dataKey: agree.gather([arg.dataKey])[0][0] };
  const held: DeviceBuffer[] = [];
  const keep = (buf: DeviceBuffer) => (held.push(buf), buf);
  try {
    const reference = planReference(comm, agree);
    const all = arg.sizes.map((bytesPerRank) =>
      makeSplits({ kind: arg.splits, worldSize: w, bytesPerRank, rowBytes: arg.rowBytes, seed: arg.seed }));
    const { plans, memory, note } = fitToMemory(comm, agree, all, arg, reference.kind);
    report({ type: 'plan', device: comm.deviceName, sizes: arg.sizes.slice(0, plans.length), note });

    const input = keep(comm.alloc(memory.inputBytes));
    const output = keep(await comm.allocSymmetric(memory.outputBytes));
    const inSplits = keep(comm.alloc(8 * w));
    const outSplitsOffsets = keep(comm.alloc(16 * w));
    const copy = reference.timesCopy ? { src: keep(comm.alloc(memory.copyBytes)), dst: keep(comm.alloc(memory.copyBytes)) } : undefined;
    const patterns = Array.from({ length: w }, (_, r) => new InputPattern(arg.dataKey, r));
    patterns[comm.rank].fill(comm, input, memory.inputBytes);
    // Untouched pages can read faster than real data (the zero page on CPU): fill the copy's source too.
    if (copy) patterns[comm.rank].fill(comm, copy.src, memory.copyBytes);

    const stream = comm.lane(0).stream;
    const loops: LoopOptions = { fixedIters: arg.iters, repeats: arg.repeats };
    const rows: BenchRow[] = [];
    let replay: Replay | undefined;
    // Only cuda has graphs: nccl cannot capture (its calls need the splits on the host), and a cpu
    // "replay" is the same closure called again.
    const capturable = comm.backend === 'cuda';
    try {
      for (const [index, splits] of plans.entries()) {
        const bytes = splits.rowsPerRank * arg.rowBytes;
        const args: AllToAllVArgs = { input, output, inSplits, outSplitsOffsets, rowBytes: arg.rowBytes, lane: comm.lane(0), sizeHintBytes: bytes };
        const call = () => void comm.allToAllV(args);
        const progress = (stage: SweepStage) => report({ type: 'progress', index, count: plans.length, bytes, stage });
        const checked: CheckedForm[] = [];
        progress('verify');
        comm.write(inSplits, BigInt64Array.from(splits.rows[comm.rank], BigInt));
        const check = new ResultCheck(comm, { output, outSplitsOffsets }, splits, arg.rowBytes, patterns, arg.seed);
        let stoppedBy = await checkedRun(comm, agree, check, 'eager', () => comm.allToAllV(args).wait());
        if (stoppedBy) return { rows: lead ? rows : [], stoppedBy };
        checked.push('eager');
        progress('eager');
        // The first size of a sweep ran several times slower than the same size later (the process
        // and its main thread are still starting up): time it once more and keep the second.
        if (index === 0) measure(comm, stream, call, { ...loops, agree });
        const time = slowestRank(agree, measure(comm, stream, call, { ...loops, agree }));
        const syncUs = comm.splitsSyncUs === undefined ? NaN : splitsSync(comm, args);
        let graph: Timing | undefined;
        if (capturable) {
          // One graph holds GRAPH_CALLS back-to-back calls, so the per-call figure is device time,
          // not the host's launch rate (with many ranks in one process, launches contend for the driver).
          replay?.close();
          const batch = bytes <= GRAPH_BATCH_MAX_BYTES ? GRAPH_CALLS : 1;
          const captured = comm.capture(stream, () => {
            for (let k = 0; k < batch; k++) call();
          });
          replay = captured;
          stoppedBy = await checkedRun(comm, agree, check, 'graph', () => captured.launch(stream).wait());
          if (stoppedBy) return { rows: lead ? rows : [], stoppedBy };
          checked.push('graph');
          progress('graph');
          const launch = () => void captured.launch(stream);
          graph = slowestRank(agree, measure(comm, stream, launch, { ...loops, agree }).map((us) => us / batch));
        }
        progress('reference');
        const work = referenceWork(comm, reference, { input, output, copy }, splits, arg.rowBytes, stream);
        const refTime = await timeReference(comm, agree, reference, loops, work);
        const [slowestSync] = agree.max([syncUs]);
        const hostSyncUs = Number.isNaN(slowestSync) ? undefined : slowestSync;
        const row = makeRow({ ranks: w, bytes, time, graph, ref: reference.kind, refTime, checked, hostSyncUs });
        rows.push(row);
        report({ type: 'row', index, count: plans.length, row });
      }
    } finally {
      replay?.close();
    }
    return { rows: lead ? rows : [] };
  } finally {
    for (const buf of held) comm.free(buf);
    agree.close();
  }
}

/**
 * Collective: the reference's timing, between barriers (the device is quiet, and peer copies land
 * in outputs nobody is using). `copy`: the rank that has `work` times it alone; `peer-copy`: every
 * rank at once, meeting before each timed loop so the copies of all ranks overlap as an exchange's would.
 */
async function timeReference(comm: Comm, agree: Agreement, plan: ReferencePlan, loops: LoopOptions, work: (() => void) | undefined): Promise<Timing | undefined> {
  if (plan.kind === 'none') return undefined;
  await comm.barrier();
  let samples: number[];
  if (plan.kind === 'peer-copy') samples = measure(comm, comm.lane(0).stream, work!, { ...loops, agree, meetEachLoop: true });
  else samples = work ? measure(comm, comm.lane(0).stream, work, loops) : new Array<number>(loops.repeats).fill(0);
  await comm.barrier();
  return slowestRank(agree, samples);
}

/**
 * Runs one call whose result `check` verifies. A wrong result on any rank stops every rank: the
 * rank that saw it throws (its error names the first wrong byte); the others return which rank
 * saw it, rather than wait for it in the next call.
 */
async function checkedRun(comm: Comm, agree: Agreement, check: ResultCheck, form: CheckedForm, run: () => void): Promise<WrongElsewhere | undefined> {
  await comm.barrier(); // every peer has finished writing into our output...
  check.arm();
  await comm.barrier(); // ...and nobody writes into an output before its owner armed it
  run();
  let wrong: WrongResultError | undefined;
  try {
    check.verify(form);
  } catch (e) {
    if (!(e instanceof WrongResultError)) throw e;
    wrong = e;
  }
  const finder = agree.gather([wrong ? 1 : 0]).findIndex(([bad]) => bad === 1);
  if (wrong) throw wrong;
  return finder < 0 ? undefined : { rank: finder, form, bytesPerRank: check.bytesPerRank };
}

/**
 * The leading plans whose buffers fit free memory (the same on every rank: ranks on different
 * devices may see different free memory), and a note when that drops sizes.
 */
function fitToMemory(comm: Comm, agree: Agreement, all: Splits[], arg: SweepArg, ref: RefKind) {
  const [free] = agree.min([comm.freeMemory()]);
  const perDevice = comm.ranksOnDevice;
  const need = (count: number) => memoryNeeded(all.slice(0, count), arg.rowBytes, perDevice, ref);
  let count = all.length;
  while (count > 0 && need(count).total > free) count--;
  if (count === 0) {
    throw new UsageError(`${formatBytes(arg.sizes[0])} per rank needs ${formatBytes(need(1).total)} on ${comm.deviceName}, ` +
      `${formatBytes(free)} is free`);
  }
  const note = count < all.length
    ? `lowered --max from ${formatBytes(arg.sizes[all.length - 1])} to ${formatBytes(arg.sizes[count - 1])}: ` +
      `${formatBytes(need(all.length).total)} would not fit the ${formatBytes(free)} free on ${comm.deviceName} ` +
      `(${perDevice} rank${perDevice > 1 ? 's' : ''} share it)`
    : undefined;
  return { plans: all.slice(0, count), memory: need(count), note };
}

/** Bytes one device needs for the sweep over `plans`: its ranks' inputs and outputs, and the copy reference's pair. */
function memoryNeeded(plans: Splits[], rowBytes: number, perDevice: number, ref: RefKind) {
  const largest = plans[plans.length - 1];
  const inputBytes = largest.rowsPerRank * rowBytes;
  // Room for the canary past the fullest receiver's rows, so every rank's check has one.
  const outputBytes = Math.max(...plans.map((p) => p.maxRowsReceived)) * rowBytes + CANARY_BYTES;
  const refBytes = copyBytes(ref, inputBytes, perDevice);
  const total = MEMORY_HEADROOM * (perDevice * (inputBytes + outputBytes) + 2 * refBytes);
  return { inputBytes, outputBytes, copyBytes: refBytes, total };
}
