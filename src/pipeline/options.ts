// The pipeline's options as a library caller or the CLI gives them, checked on the host before any
// rank starts (run.ts) and again by each rank (rank.ts: ranks started another way get the same
// refusals). Light: no compute or device code is loaded for it.
import type { BackendName } from '../backends/backend.js';
import { shown, UsageError } from '../errors.js';
import type { GemmChoice } from './compute-cuda.js';
import type { PipelineArg } from './rank.js';
import { shapeOf, SHAPES } from './shapes.js';
import { ARMS } from './train.js';

const GEMMS: readonly GemmChoice[] = ['auto', 'cublas', 'kernel'];

/** Every key of PipelineArg (the Record makes the compiler list them all): others are refused. */
const ARG_KEYS: Record<keyof PipelineArg, true> = { shape: true, arms: true, warmup: true, iters: true, seed: true, trace: true, inputDistBlocks: true, gemm: true };

/** PipelineArg as a library caller may give it: the CLI's defaults fill what it leaves out. */
export type PipelineInput = Omit<PipelineArg, 'arms' | 'warmup' | 'seed' | 'trace'> & Partial<Pick<PipelineArg, 'arms' | 'warmup' | 'seed' | 'trace'>>;

/**
 * `arg` with the CLI's defaults where it leaves a key out (or gives undefined): every arm, 20
 * warm-up steps, seed 1, no trace. shape and iters have none here: the CLI's depend on the backend,
 * which a library call may leave to runRanks.
 */
export function withPipelineDefaults(arg: PipelineInput): PipelineArg {
  if (arg === null || typeof arg !== 'object') return arg as PipelineArg; // checkPipelineArg names it
  const { arms = [...ARMS], warmup = 20, seed = 1, trace = false } = arg;
  return { ...arg, arms, warmup, seed, trace };
}

/**
 * Steps an arm runs at most, timed and warm-up alike: each timed step's times are kept for the
 * median (two numbers a step, and a trace's spans), and 10^7 steps of the smallest shape are hours.
 * Past about 1.3e8 the arrays alone fail, after the ranks have started.
 */
export const MAX_PIPELINE_STEPS = 10_000_000;

/** The seed is a u32 in the kernels and in synth.ts: a larger one would train as seed mod 2^32. */
const MAX_SEED = 2 ** 32 - 1;

/**
 * What the CLI's flags refuse, refused for library callers too (every rank gets the same arg, so all
 * refuse alike): else an unknown arm ran as two-lanes, a string iters was concatenated into the
 * step count, and a fractional one failed as an array length.
 */
export function checkPipelineArg(arg: PipelineArg, runnerKeys: readonly string[] = []): void {
  const fail = (what: string): never => {
    throw new UsageError(`pipeline: ${what}`);
  };
  if (arg === null || typeof arg !== 'object') fail(`options must be an object { shape, iters, ... }, got ${shown(arg)}`);
  // A misspelt optional key (inputDistBlock, gemms) would otherwise run the default, unsaid.
  const unknown = Object.keys(arg).filter((k) => !Object.hasOwn(ARG_KEYS, k));
  if (unknown.length > 0) fail(`unknown option${unknown.length > 1 ? 's' : ''} ${unknown.map((k) => `'${k}'`).join(', ')} (known: ${[...runnerKeys, ...Object.keys(ARG_KEYS)].join(', ')})`);
  if (arg.shape === undefined) fail(`shape is required (${Object.keys(SHAPES).join(', ')})`);
  try {
    shapeOf(arg.shape);
  } catch (err) {
    fail((err as Error).message);
  }
  if (!Array.isArray(arg.arms)) fail(`arms must be an array of arm names, got ${shown(arg.arms)}`);
  if (arg.arms.length === 0) fail(`arms must name at least one arm (${ARMS.join(', ')})`);
  arg.arms.forEach((arm, i) => {
    if (!ARMS.includes(arm)) fail(`unknown arm ${shown(arm, 'string')} (choose from ${ARMS.join(', ')})`);
    if (arg.arms.indexOf(arm) !== i) fail(`arm ${arm} is named twice`);
  });
  for (const [name, value, least] of [['iters', arg.iters, 1], ['warmup', arg.warmup, 0], ['seed', arg.seed, 0]] as const) {
    if (!Number.isSafeInteger(value) || value < least) fail(`${name} must be an integer >= ${least}, got ${shown(value)}`);
  }
  if (arg.iters + arg.warmup > MAX_PIPELINE_STEPS) fail(`iters + warmup must be at most ${MAX_PIPELINE_STEPS} steps an arm (each timed step's times are kept for the median), got ${arg.iters} + ${arg.warmup}`);
  if (arg.seed > MAX_SEED) fail(`seed must be at most ${MAX_SEED} (the kernels draw from a 32-bit seed: ${arg.seed} would train as ${arg.seed % 2 ** 32}), got ${arg.seed}`);
  if (arg.trace !== undefined && typeof arg.trace !== 'boolean') fail(`trace must be true or false, got ${shown(arg.trace)}`);
  if (arg.inputDistBlocks !== undefined && (!Number.isSafeInteger(arg.inputDistBlocks) || arg.inputDistBlocks < 1)) {
    fail(`inputDistBlocks must be an integer >= 1, got ${shown(arg.inputDistBlocks)}`);
  }
  if (arg.gemm !== undefined && !GEMMS.includes(arg.gemm)) fail(`gemm must be 'auto', 'cublas' or 'kernel', got ${shown(arg.gemm, 'string')}`);
}

/**
 * What a backend refuses of the options, as the CLI does: cuBLAS sums in its own order (cpu's GEMMs
 * are host loops, and would run unsaid), and the budget binds cuda's kernels only (echoed in the
 * result, it would name a budget nothing kept). Checked by each rank, and before they start where
 * the backend is named.
 */
export function checkPipelineBackend(arg: Pick<PipelineArg, 'gemm' | 'inputDistBlocks'>, backend: BackendName): void {
  // 'auto' too, as the CLI's --gemm: on cpu it could only mean the host loops, which 'kernel' names.
  if (arg.gemm !== undefined && arg.gemm !== 'kernel' && backend === 'cpu') {
    throw new UsageError(`pipeline: gemm '${arg.gemm}' is for cuda and nccl (the cpu backend's GEMMs are host loops, bit-exact with the kernel): leave gemm out, or give 'kernel'`);
  }
  if (arg.inputDistBlocks !== undefined && backend !== 'cuda') throw new UsageError(`pipeline: inputDistBlocks is the cuda backend's SM budget (the input dist's maxBlocks); ${backend} has none`);
}
