// The pipeline's rank program (runRanks threads, or one process of a launched job): builds the
// compute and the model once, runs every arm from the same initial model, and gathers every rank's
// timings, results and spans to rank 0, which returns the table's rows.
import { checkSameOptions } from '../bench/same-options.js';
import type { BackendName, Comm } from '../backends/backend.js';
import { Agreement } from '../collectives/agree.js';
import { median } from '../bench/measure.js';
import { formatBytes } from '../bench/units.js';
import { UsageError } from '../errors.js';
import type { RankContext } from '../world/ranks.js';
import { createCompute } from './create-compute.js';
import { checkPipelineArg, checkPipelineBackend, withPipelineDefaults, type PipelineInput } from './options.js';
import type { GemmChoice } from './compute-cuda.js';
import { Model } from './model.js';
import { Layout, shapeOf, type ShapeName } from './shapes.js';
import { checksumsOf, runArm, type Arm, type ArmRun, type Checksums } from './train.js';
import { decodeSpans, encodeSpans, PHASES, type ArmTrace, type Phase } from './trace.js';

/** Allocations must fit free memory with this much to spare. */
const MEMORY_HEADROOM = 1.1;

export interface PipelineArg {
  shape: ShapeName;
  arms: Arm[];
  warmup: number;
  iters: number;
  seed: number;
  /** Return every rank's spans (for --trace). */
  trace: boolean;
  /** SM budget of the input dist (ArmOptions.inputDistBlocks). */
  inputDistBlocks?: number;
  /** cuda and nccl: what computes the dense layers' GEMMs (compute-cuda.ts; default 'kernel'). */
  gemm?: GemmChoice;
}

/** What rank 0 sends to the main thread: the run's plan, then each step as it is queued. */
export type PipelineReport = { type: 'start'; device: string; arms: Arm[]; steps: number } | { type: 'step'; arm: Arm; step: number; steps: number };

/** µs per step over the timed steps, each step's figure the slowest rank's. */
export interface StepSpread {
  medianUs: number;
  p10Us: number;
  p90Us: number;
  minUs: number;
  maxUs: number;
}

export interface ArmResult {
  arm: Arm;
  steps: StepSpread;
  /** 1e6 / the median step. */
  itPerSec: number;
  /** Median over steps of the compute stream's busy µs, and of the rest of the step (waiting for collectives, mostly): slowest rank. */
  computeUs: number;
  exposedUs: number;
  /** µs per step the host spent inside collective calls, and queueing the step: slowest rank. */
  hostBlockedUs: number;
  hostIssueUs: number;
  /** Median µs of each phase (slowest rank). */
  phases: Record<Phase, number>;
  checksums: Checksums;
  /** Every rank ended with the same dense parameters (the all-reduce's promise). */
  paramsAgree: boolean;
  /** The last step's loss, averaged over ranks. */
  finalLoss: number;
}

export interface PipelineRankResult {
  /** The backend the ranks ran on (runPipeline's, where its caller named none). */
  backend: BackendName;
  device: string;
  /** What computed the GEMMs (Compute.gemmName). */
  gemm: string;
  arms: ArmResult[];
  traces?: ArmTrace[];
}

/**
 * The pipeline on the ranks of `comm` (collective: every rank calls it): builds the compute and the
 * model, runs every arm of `arg` from the same initial model, and returns rank 0 the rows (other
 * ranks get undefined). `ctx` receives rank 0's progress.
 */
export async function pipelineRank(comm: Comm, given: PipelineInput, ctx?: RankContext): Promise<PipelineRankResult | undefined> {
  const arg = withPipelineDefaults(given);
  // Ranks started with different options would fail later on a buffer's size: say which option.
  // A rank's own refusal goes first, and to its peers, which would otherwise wait for it.
  let refused: Error | undefined;
  try {
    checkPipelineArg(arg);
  } catch (err) {
    refused = err as Error;
  }
  await checkSameOptions(comm, { command: 'pipeline', options: arg, flags: { inputDistBlocks: 'inputDistBlocks (--input-dist-blocks)' }, refused });
  // Said before any arm runs: else every arm before the first two-lane one runs to its end first.
  const twoLane = arg.arms.find((arm) => arm !== 'one-lane');
  if (twoLane !== undefined && comm.laneCount < 2) throw new UsageError(`pipeline arm ${twoLane} needs 2 lanes; the communicator has ${comm.laneCount}`);
  checkPipelineBackend(arg, comm.backend);
  const lead = comm.rank === 0;
  const report = (m: PipelineReport) => lead && ctx?.report(m);
  const layout = new Layout(shapeOf(arg.shape), comm.worldSize, comm.rank);
  const steps = arg.warmup + arg.iters;
  const compute = await createCompute(comm, arg.gemm);
  let agree: Agreement | undefined;
  let model: Model | undefined;
  try {
    agree = await Agreement.create(comm, 4);
    const [need] = agree.max([Model.bytes(layout, steps) * comm.ranksOnDevice * MEMORY_HEADROOM]);
    const [free] = agree.min([comm.freeMemory()]);
    if (need > free) {
      throw new UsageError(`pipeline shape ${arg.shape} on ${comm.worldSize} ranks needs ${formatBytes(need)} on ${comm.deviceName} ` +
        `(${comm.ranksOnDevice} rank${comm.ranksOnDevice > 1 ? 's' : ''} there), ${formatBytes(free)} is free`);
    }
    model = await Model.create(comm, compute, layout, steps);
    report({ type: 'start', device: comm.deviceName, arms: arg.arms, steps });
    const runs: ArmRun[] = [];
    for (const arm of arg.arms) {
      runs.push(await runArm(model, { arm, warmup: arg.warmup, iters: arg.iters, seed: arg.seed, inputDistBlocks: arg.inputDistBlocks, keepSpans: arg.trace, onStep: (step) => report({ type: 'step', arm, step, steps }) }));
    }
    await comm.barrier();
    const gathered = await gatherToRoot(comm, agree, runs.flatMap((r) => encodeRun(r, arg.trace)));
    if (!gathered) return undefined;
    const perRank = gathered.map((words) => decodeRuns(words, arg));
    return {
      backend: comm.backend,
      device: comm.deviceName,
      gemm: compute.gemmName,
      arms: arg.arms.map((_, a) => armResult(perRank.map((runs) => runs[a]))),
      traces: arg.trace ? arg.arms.map((arm, a) => ({ backend: comm.backend, arm, ranks: perRank.map((runs, rank) => ({ rank, spans: runs[a].spans })) })) : undefined,
    };
  } finally {
    // Peers may still run collectives into our buffers until they pass this point too.
    await comm.barrier().catch(() => {});
    model?.free();
    agree?.close();
    compute.close();
  }
}

function armResult(ranks: ArmRun[]): ArmResult {
  const iters = ranks[0].stepUs.length;
  // Each step's figures come from one rank, the slowest in that step (it sets the pace): taking each
  // column's maximum over ranks apart mixed ranks, so exposed + compute could pass the step.
  const pacer = Array.from({ length: iters }, (_, i) => ranks.reduce((b, r) => (r.stepUs[i] > b.stepUs[i] ? r : b)));
  const stepUs = pacer.map((r, i) => r.stepUs[i]);
  const sorted = [...stepUs].sort((a, b) => a - b);
  const pct = (p: number) => sorted[Math.min(sorted.length - 1, Math.floor(p * sorted.length))];
  const phases = Object.fromEntries(PHASES.map((p, i) => [p, Math.max(...ranks.map((r) => r.phaseUs[i]))]));
  const { paramsAgree, ...checksums } = checksumsOf(ranks);
  const med = median(stepUs);
  return {
    arm: ranks[0].arm,
    steps: { medianUs: med, p10Us: pct(0.1), p90Us: pct(0.9), minUs: sorted[0], maxUs: sorted[sorted.length - 1] },
    itPerSec: 1e6 / med,
    computeUs: median(pacer.map((r, i) => r.computeUs[i])),
    exposedUs: median(pacer.map((r, i) => r.stepUs[i] - r.computeUs[i])),
    hostBlockedUs: Math.max(...ranks.map((r) => r.hostBlockedUs)),
    hostIssueUs: Math.max(...ranks.map((r) => r.hostIssueUs)),
    phases: phases as Record<Phase, number>,
    checksums,
    paramsAgree,
    finalLoss: ranks.reduce((s, r) => s + r.loss[r.loss.length - 1], 0) / ranks.length,
  };
}

/**
 * One rank's runs as float64 words: per arm the fixed-length fields, its phase medians, then the
 * spans' count and spans, only for a trace: at 10000 steps they were most of a run's memory.
 */
function encodeRun(r: ArmRun, trace: boolean): number[] {
  const words = trace ? encodeSpans(r.spans) : [];
  return [...r.stepUs, ...r.computeUs, r.hostBlockedUs, r.hostIssueUs, ...r.loss, ...r.tables, ...r.params, ...r.phaseUs, words.length, ...words];
}

function decodeRuns(words: number[], arg: PipelineArg): ArmRun[] {
  const steps = arg.warmup + arg.iters;
  let at = 0;
  const take = (n: number) => words.slice(at, (at += n));
  return arg.arms.map((arm) => {
    const stepUs = take(arg.iters);
    const computeUs = take(arg.iters);
    const [hostBlockedUs, hostIssueUs] = take(2);
    const loss = take(steps);
    const tables = take(2) as [number, number];
    const params = take(2) as [number, number];
    const phaseUs = take(PHASES.length);
    const spans = decodeSpans(take(take(1)[0]));
    return { arm, stepUs, computeUs, hostBlockedUs, hostIssueUs, loss, tables, params, phaseUs, spans };
  });
}

/**
 * Collective: every rank's `values` at rank 0 (undefined elsewhere), through the communicator
 * (threads or processes alike). Run between phases: it allocates.
 */
async function gatherToRoot(comm: Comm, agree: Agreement, values: number[]): Promise<number[][] | undefined> {
  const w = comm.worldSize;
  const [most] = agree.max([values.length]);
  const output = await comm.allocSymmetric(8 * Math.max(1, w * most));
  const input = comm.alloc(8 * Math.max(1, values.length));
  const inSplits = comm.alloc(8 * w);
  const outSplitsOffsets = comm.alloc(16 * w);
  try {
    comm.write(input, Float64Array.from(values));
    comm.write(inSplits, BigInt64Array.from({ length: w }, (_, p) => (p === 0 ? BigInt(values.length) : 0n)));
    comm.allToAllV({ input, output, inSplits, outSplitsOffsets, rowBytes: 8 }).wait();
    if (comm.rank !== 0) return undefined;
    const so = new BigInt64Array(comm.read(outSplitsOffsets, 0, 16 * w).buffer);
    const all = new Float64Array(comm.read(output, 0, 8 * w * most).buffer);
    return Array.from({ length: w }, (_, src) => [...all.subarray(Number(so[w + src]), Number(so[w + src]) + Number(so[src]))]);
  } finally {
    await comm.barrier();
    for (const buf of [output, input, inSplits, outSplitsOffsets]) comm.free(buf);
  }
}
