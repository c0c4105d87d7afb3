// The benchmark's rank program: one sweep over sizes, run on every rank through runRanks.
// Per size: write the splits, check one eager call and one graph replay against a host reference,
// time both (iterations chosen so a timed loop lasts >= 20 ms, median of repeats, slowest rank),
// then time the device's own copy of the same bytes as the reference.
import { hostname } from 'node:os';
import type { AllToAllVArgs, Comm, DeviceBuffer, Replay, Stream } from '../backends/backend.js';
import { UsageError } from '../errors.js';
import type { RankContext } from '../world/ranks.js';
import { Agreement } from './agree.js';
import { InputPattern } from './data.js';
import { makeSplits, type Splits, type SplitsKind } from './splits.js';
import { makeRow, type BenchRow } from './table.js';
import { formatBytes } from './units.js';
import { CANARY_BYTES, ResultCheck, WrongResultError } from './verify.js';

/** A timed loop should last at least this long, so event resolution and launch jitter vanish in it. */
const TARGET_LOOP_MS = 20;
const WARMUP_ITERS = 5;
/** Discarded full-length loops before timing, at least this long in all. */
const WARMUP_MS = 50;
const MAX_ITERS = 100_000;
/**
 * Calls captured in one graph for sizes up to GRAPH_BATCH_MAX_BYTES: the per-call time is then
 * device time, not the host's launch rate. Larger calls are long enough to replay one by one.
 */
const GRAPH_CALLS = 50;
const GRAPH_BATCH_MAX_BYTES = 4 << 20;
/** The reference copies in chunks of at most this, so its buffers stay small next to the sweep's. */
const MAX_REF_BYTES = 1 << 30;
/** Calls whose host wait for the splits is sampled (a fixed count: every rank makes the same calls). */
const SYNC_SAMPLES = 21;
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

/** Rank 0's rows (empty on other ranks, and short if another rank found a wrong result). */
export interface SweepResult {
  rows: BenchRow[];
}

export async function sweep(comm: Comm, arg: SweepArg, ctx: RankContext): Promise<SweepResult> {
  const lead = comm.rank === 0;
  const report = (message: SweepReport) => lead && ctx.report(message);
  const w = comm.worldSize;
  const perDevice = comm.ranksOnDevice;
  const agree = await Agreement.create(comm);
  // Ranks check each other's rows, so they need one data key: rank 0's (processes each drew their own).
  arg = { ...arg, dataKey: agree.gather([arg.dataKey])[0][0] };
  const held: DeviceBuffer[] = [];
  const keep = (buf: DeviceBuffer) => (held.push(buf), buf);
  try {
    // The reference runs once per device, on its lowest rank. Ranks are matched by host and device
    // name: which rank lands on which device is the backend's and the launcher's business.
    const device = deviceKey(comm.deviceName);
    const refRank = agree.gather([device]).findIndex(([d]) => d === device) === comm.rank;
    const all = arg.sizes.map((bytesPerRank) =>
      makeSplits({ kind: arg.splits, worldSize: w, bytesPerRank, rowBytes: arg.rowBytes, seed: arg.seed }));
    const { plans, memory, note } = fitToMemory(comm, agree, all, arg);
    report({ type: 'plan', device: comm.deviceName, sizes: arg.sizes.slice(0, plans.length), note });

    const input = keep(comm.alloc(memory.inputBytes));
    const output = keep(await comm.allocSymmetric(memory.outputBytes));
    const inSplits = keep(comm.alloc(8 * w));
    const outSplitsOffsets = keep(comm.alloc(16 * w));
    const ref = refRank ? { src: keep(comm.alloc(memory.refBytes)), dst: keep(comm.alloc(memory.refBytes)) } : undefined;
    const patterns = Array.from({ length: w }, (_, r) => new InputPattern(arg.dataKey, r));
    patterns[comm.rank].fill(comm, input, memory.inputBytes);
    // Untouched pages can read faster than real data (the zero page on CPU): fill the copy's source too.
    if (ref) patterns[comm.rank].fill(comm, ref.src, memory.refBytes);

    const stream = comm.lane(0).stream;
    const timing = { fixedIters: arg.iters, repeats: arg.repeats };
    const rows: BenchRow[] = [];
    let replay: Replay | undefined;
    // nccl cannot capture (its calls need the splits on the host): no graph column there.
    const capturable = comm.backend !== 'nccl';
    try {
      for (const [index, splits] of plans.entries()) {
        const bytes = splits.rowsPerRank * arg.rowBytes;
        const args: AllToAllVArgs = { input, output, inSplits, outSplitsOffsets, rowBytes: arg.rowBytes, lane: comm.lane(0), sizeHintBytes: bytes };
        const call = () => void comm.allToAllV(args);
        // One graph holds GRAPH_CALLS back-to-back calls, so the per-call figure is device time,
        // not the host's launch rate (with many ranks in one process, launches contend for the driver).
        replay?.close();
        const batch = bytes <= GRAPH_BATCH_MAX_BYTES ? GRAPH_CALLS : 1;
        replay = capturable
          ? comm.capture(stream, () => {
              for (let k = 0; k < batch; k++) call();
            })
          : undefined;
        const launch = () => replay!.launch(stream);
        const progress = (stage: SweepStage) => report({ type: 'progress', index, count: plans.length, bytes, stage });
        progress('verify');
        comm.write(inSplits, BigInt64Array.from(splits.rows[comm.rank], BigInt));
        const check = new ResultCheck(comm, { output, outSplitsOffsets }, splits, arg.rowBytes, patterns, arg.seed);
        if (!(await checkedRun(comm, agree, check, 'eager', () => comm.allToAllV(args).wait()))) break;
        progress('eager');
        // The first size of a sweep ran several times slower than the same size later (the process
        // and its main thread are still starting up): time it once more and keep the second.
        if (index === 0) measure(comm, stream, call, timing, agree);
        const timeUs = measure(comm, stream, call, timing, agree);
        const syncUs = comm.splitsSyncUs === undefined ? NaN : splitsSync(comm, args);
        let graphUs = NaN;
        if (capturable) {
          // timeLoop doubles as "run and wait": a replay has no handle of its own.
          if (!(await checkedRun(comm, agree, check, 'graph', () => comm.timeLoop(stream, 1, launch)))) break;
          progress('graph');
          graphUs = measure(comm, stream, launch, timing, agree) / batch;
        }
        progress('reference');
        await comm.barrier(); // the device is quiet: the copy runs alone while its other ranks wait
        let refUs = 0;
        if (ref) {
          const total = perDevice * bytes;
          const copyAll = () => {
            for (let done = 0; done < total; done += memory.refBytes) comm.copy(ref.dst, ref.src, Math.min(memory.refBytes, total - done), stream);
          };
          refUs = measure(comm, stream, copyAll, timing);
        }
        await comm.barrier();
        const [slowest, slowestGraph, slowestRef, slowestSync] = agree.max([timeUs, graphUs, refUs, syncUs]);
        const row = makeRow(w, bytes, slowest, slowestGraph, slowestRef, Number.isNaN(slowestSync) ? undefined : slowestSync);
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
 * Runs one call whose result `check` verifies. A wrong result on any rank stops every rank: the
 * rank that saw it throws, the others return false (rather than wait for it in the next call).
 */
async function checkedRun(comm: Comm, agree: Agreement, check: ResultCheck, form: string, run: () => void): Promise<boolean> {
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
  const [anyWrong] = agree.max([wrong ? 1 : 0]);
  if (wrong) throw wrong;
  return anyWrong === 0;
}

/**
 * The leading plans whose buffers fit free memory (the same on every rank: ranks on different
 * devices may see different free memory), and a note when that drops sizes.
 */
function fitToMemory(comm: Comm, agree: Agreement, all: Splits[], arg: SweepArg) {
  const [free] = agree.min([comm.freeMemory()]);
  const perDevice = comm.ranksOnDevice;
  const need = (count: number) => memoryNeeded(all.slice(0, count), arg.rowBytes, perDevice);
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

/**
 * Median µs per call the host waits for the device splits (nccl), each call waited for before the
 * next, so the figure is the round trip alone, not the previous call's data still in flight.
 */
function splitsSync(comm: Comm, args: AllToAllVArgs): number {
  const samples: number[] = [];
  for (let i = 0; i < SYNC_SAMPLES; i++) {
    const before = comm.splitsSyncUs!;
    const done = comm.allToAllV(args);
    samples.push(comm.splitsSyncUs! - before);
    done.wait();
  }
  return median(samples);
}

/**
 * Median µs per call of `fn` over `repeats` timed loops, after a warm-up. Iterations: fixed, or
 * enough for TARGET_LOOP_MS by the warm-up's estimate; `agree` (collectives) makes every rank use
 * the slowest rank's estimate so they all make the same number of calls.
 */
function measure(comm: Comm, stream: Stream, fn: () => void, timing: { fixedIters?: number; repeats: number }, agree?: Agreement): number {
  const warmMs = comm.timeLoop(stream, WARMUP_ITERS, fn) / WARMUP_ITERS;
  let iters = timing.fixedIters;
  if (iters === undefined) {
    const [estimateMs] = agree ? agree.max([warmMs]) : [warmMs];
    iters = estimateMs > 0 ? Math.min(MAX_ITERS, Math.max(1, Math.ceil(TARGET_LOOP_MS / estimateMs))) : MAX_ITERS;
  }
  // Full-length loops, discarded, until WARMUP_MS have passed on every rank: a fresh process runs
  // slow for a while (JIT, clocks), which five calls do not cover. The count is agreed, so every
  // rank makes the same calls.
  for (let spentMs = 0; spentMs < WARMUP_MS; ) {
    const ms = comm.timeLoop(stream, iters, fn);
    spentMs += agree ? agree.max([ms])[0]! : ms;
  }
  // One lead-in call per loop: the clock starts when every rank is on the device, not when this
  // rank's thread got there (with W ranks in one process, launches queue on the driver).
  const samples: number[] = [];
  for (let r = 0; r < timing.repeats; r++) samples.push((comm.timeLoop(stream, iters, fn, 1) * 1000) / iters);
  return median(samples);
}

/** FNV-1a of host and device name: equal on ranks that share a device, distinct otherwise (but for 2^-32 odds). */
function deviceKey(deviceName: string): number {
  let h = 0x811c9dc5;
  for (const c of `${hostname()}/${deviceName}`) h = Math.imul(h ^ c.codePointAt(0)!, 0x01000193);
  return h >>> 0;
}

function median(values: number[]): number {
  const s = [...values].sort((a, b) => a - b);
  const mid = s.length >> 1;
  return s.length % 2 ? s[mid] : (s[mid - 1] + s[mid]) / 2;
}

/** Bytes one device needs for the sweep over `plans`: its ranks' inputs and outputs, and one reference pair. */
function memoryNeeded(plans: Splits[], rowBytes: number, perDevice: number) {
  const largest = plans[plans.length - 1];
  const inputBytes = largest.rowsPerRank * rowBytes;
  // Room for the canary past the fullest receiver's rows, so every rank's check has one.
  const outputBytes = Math.max(...plans.map((p) => p.maxRowsReceived)) * rowBytes + CANARY_BYTES;
  const refBytes = Math.min(perDevice * inputBytes, MAX_REF_BYTES);
  const total = MEMORY_HEADROOM * (perDevice * (inputBytes + outputBytes) + 2 * refBytes);
  return { inputBytes, outputBytes, refBytes, total };
}
