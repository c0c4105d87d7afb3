// Rank programs for tests/pipeline.test.ts: every arm on one model, each rank's raw results.
import type { Comm } from '../../src/backends/backend.js';
import { at4, colSumPartialFloats, gemmPartialFloats, type Clock, type Compute } from '../../src/pipeline/compute.js';
import { createCompute } from '../../src/pipeline/create-compute.js';
import type { GemmChoice } from '../../src/pipeline/compute-cuda.js';
import { Model } from '../../src/pipeline/model.js';
import { Layout, shapeOf, type ShapeName } from '../../src/pipeline/shapes.js';
import { pipelineRank } from '../../src/pipeline/rank.js';
import { runArm, type Arm } from '../../src/pipeline/train.js';
import { emulatedCompute } from './emulated-device.js';
import { Rng } from '../conformance/reference.js';

export interface ArmsArg {
  shape: ShapeName;
  arms: Arm[];
  warmup: number;
  iters: number;
  seed: number;
  /** Run kernels/pipeline.cu compiled for the host (this library: emulated-device.ts) instead of the backend's compute. */
  emulator?: string;
  /** The input dist's block budget (ArmOptions.inputDistBlocks). */
  inputDistBlocks?: number;
  /** cuda, nccl: what computes the GEMMs (compute-cuda.ts). */
  gemm?: GemmChoice;
}

export interface RankArm {
  arm: Arm;
  loss: number[];
  tables: [number, number];
  params: [number, number];
  stepUs: number[];
}

export async function arms(comm: Comm, arg: ArmsArg): Promise<RankArm[]> {
  const layout = new Layout(shapeOf(arg.shape), comm.worldSize, comm.rank);
  const compute = arg.emulator === undefined ? await createCompute(comm, arg.gemm) : emulatedCompute(arg.emulator);
  const model = await Model.create(comm, compute, layout, arg.warmup + arg.iters);
  try {
    const out: RankArm[] = [];
    for (const arm of arg.arms) {
      const r = await runArm(model, { arm, warmup: arg.warmup, iters: arg.iters, seed: arg.seed, inputDistBlocks: arg.inputDistBlocks });
      out.push({ arm, loss: r.loss, tables: r.tables, params: r.params, stepUs: r.stepUs });
    }
    return out;
  } finally {
    await comm.barrier();
    model.free();
    compute.close();
  }
}

export interface MarksHeld {
  /** The most marks the clock held at once (made, not yet handed back). */
  peak: number;
  /** Marks still held after the run. */
  left: number;
  stepUs: number[];
  computeUs: number[];
  phaseUs: number[];
  spans: number;
}

/** One arm of `iters` timed steps with the clock counted: how many marks it holds at most. */
export async function marksHeld(comm: Comm, arg: { iters: number; keepSpans: boolean }): Promise<MarksHeld> {
  const layout = new Layout(shapeOf('tiny'), comm.worldSize, comm.rank);
  const inner = await createCompute(comm);
  let held = 0;
  let peak = 0;
  const clock: Clock = {
    mark: (s) => ((peak = Math.max(peak, ++held)), inner.clock.mark(s)),
    release: (id) => (held--, inner.clock.release(id)),
    micros: (a, b) => inner.clock.micros(a, b),
    reset: () => ((held = 0), inner.clock.reset()),
    reserve: (n) => inner.clock.reserve(n),
  };
  const compute = new Proxy(inner, {
    get(target, key) {
      if (key === 'clock') return clock;
      const v = Reflect.get(target, key, target) as unknown;
      return typeof v === 'function' ? v.bind(target) : v;
    },
  });
  const model = await Model.create(comm, compute, layout, 2 + arg.iters);
  try {
    const r = await runArm(model, { arm: 'two-lanes', warmup: 2, iters: arg.iters, seed: 1, keepSpans: arg.keepSpans });
    return { peak, left: held, stepUs: r.stepUs, computeUs: r.computeUs, phaseUs: r.phaseUs, spans: r.spans.length };
  } finally {
    await comm.barrier();
    model.free();
    inner.close();
  }
}

export interface VictimArg {
  shape: ShapeName;
  arm: Arm;
  seed: number;
  /** This rank stops taking part after queueing this many steps (as if killed: it never calls again). */
  victim: number;
  stopAfter: number;
  steps: number;
  /** The victim SIGKILLs its process instead (ranks as processes: the launcher's fault, for real). */
  sigkill?: boolean;
  /** Survivors ignore the launcher's SIGTERM, to live until their own timeout. */
  ignoreSigterm?: boolean;
}

/** What a survivor saw: the error's class, code and the rank it names. */
export interface Survivor {
  name: string;
  code?: string;
  missingRank?: number;
  message: string;
}

class Stop extends Error {}

/**
 * Rank `victim` stops mid-pipeline; every other rank must end in a TimeoutError naming it (not
 * hang, not blame another rank). The victim returns null.
 */
export async function victim(comm: Comm, arg: VictimArg): Promise<Survivor | null> {
  const layout = new Layout(shapeOf(arg.shape), comm.worldSize, comm.rank);
  const compute = await createCompute(comm);
  const model = await Model.create(comm, compute, layout, arg.steps);
  const me = comm.rank;
  if (arg.ignoreSigterm) process.on('SIGTERM', () => {});
  try {
    await runArm(model, {
      arm: arg.arm,
      warmup: 0,
      iters: arg.steps,
      seed: arg.seed,
      onStep: (step) => {
        if (me !== arg.victim || step < arg.stopAfter) return;
        if (arg.sigkill) process.kill(process.pid, 'SIGKILL');
        throw new Stop();
      },
    });
    throw new Error(`rank ${me}: finished ${arg.steps} steps though rank ${arg.victim} stopped after ${arg.stopAfter}`);
  } catch (err) {
    // It stays open past its peers' timeout, as a hung rank would: one that closed at once would be
    // found gone at once (cpu), which is another case (library-refusals' "a peer that left").
    if (err instanceof Stop) return new Promise((resolve) => setTimeout(() => resolve(null), 1.5 * comm.timeoutMs));
    const e = err as Error & { code?: string; missingRank?: number };
    return { name: e.name, code: e.code, missingRank: e.missingRank, message: e.message };
  } finally {
    // The communicator is aborted on the survivors; the victim's buffers go with the process.
    if (me === arg.victim) {
      model.free();
      compute.close();
    }
  }
}

export interface GemmArg {
  /** The emulator library (emulated-device.ts); without, only the host's GEMM runs. */
  emulator?: string;
  seed: number;
  m: number;
  n: number;
  k: number;
  transA: boolean;
  /** B stored n-major (the forward pass's weights), else k-major. */
  transB?: boolean;
  relu: boolean;
}

export interface GemmResult {
  /** C from the host's GEMM and from the kernels (when an emulator is given), split k and unsplit. */
  host: number[];
  kernels?: number[];
  unsplit: number[];
  kernelsUnsplit?: number[];
  /** The float64 sum of every output, bias and ReLU applied. */
  exact: number[];
}

/** One GEMM on random data, k split as the weight gradients' is and in one piece, bias and ReLU. */
export async function gemm(comm: Comm, arg: GemmArg): Promise<GemmResult> {
  const { m, n, k, transA, relu } = arg;
  const transB = arg.transB ?? false;
  const rng = new Rng(arg.seed, 0x6e);
  const rand = () => (rng.next() / 2 ** 32) * 2 - 1;
  const A = Float32Array.from({ length: m * k }, rand);
  const B = Float32Array.from({ length: k * n }, rand);
  const bias = Float32Array.from({ length: n }, rand);
  const buf = (a: Float32Array) => {
    const b = comm.alloc(a.byteLength);
    comm.write(b, new Uint8Array(a.buffer));
    return b;
  };
  const [a, b, bi] = [buf(A), buf(B), buf(bias)];
  const lda = transA ? m : k;
  const ldb = transB ? k : n;
  const exact = Array.from({ length: m * n }, (_, i) => {
    const [r, c] = [Math.floor(i / n), i % n];
    let v = bias[c];
    for (let q = 0; q < k; q++) v += A[transA ? q * m + r : r * k + q] * B[transB ? c * k + q : q * n + c];
    return relu && !(v > 0) ? 0 : v;
  });
  const partials = comm.alloc(4 * Math.max(1, gemmPartialFloats(m, n, k)));
  const run = (compute: Compute, split: boolean): number[] => {
    const c = comm.alloc(4 * m * n);
    compute.gemm(compute.compute, { a: at4(a), b: at4(b), c: at4(c), bias: at4(bi), m, n, k, lda, ldb, ldc: n, transA, transB, relu, partials: split ? at4(partials) : undefined });
    compute.sync(compute.compute);
    return Array.from(new Float32Array(comm.read(c, 0, 4 * m * n).slice().buffer));
  };
  const host = await createCompute(comm);
  const out: GemmResult = { host: run(host, true), unsplit: run(host, false), exact };
  if (arg.emulator !== undefined) {
    const kernels = emulatedCompute(arg.emulator);
    out.kernels = run(kernels, true);
    out.kernelsUnsplit = run(kernels, false);
  }
  return out;
}

export interface ColSumArg {
  /** The emulator library (emulated-device.ts); without, only the host's column sum runs. */
  emulator?: string;
  seed: number;
  rows: number;
  cols: number;
  /** x's row stride, at least cols. */
  ld: number;
}

export interface ColSumResult {
  /** The rows x ld input, as f32 values. */
  x: number[];
  /** out from the cpu Compute and from the kernels (when an emulator is given). */
  host: number[];
  kernels?: number[];
  /** The words past out, after each run: a canary, which no Compute may touch. */
  hostCanary: number[];
  kernelsCanary?: number[];
}

/** Words written past `out` before each column sum (its canary). */
export const COL_SUM_CANARY = [0x7fc01234, 0xdeadbeef, 0x3f800000, 0x80000000];

/** One column sum (a bias gradient) on fresh random data, by the cpu Compute and by the kernels. */
export async function colSum(comm: Comm, arg: ColSumArg): Promise<ColSumResult> {
  const { rows, cols, ld } = arg;
  const rng = new Rng(arg.seed, 0xc5);
  // Mixed magnitudes, so that the order of the adds shows in the bits.
  const X = Float32Array.from({ length: rows * ld }, () => ((rng.next() / 2 ** 32) * 2 - 1) * 2 ** ((rng.next() % 16) - 8));
  const x = comm.alloc(Math.max(4, X.byteLength));
  comm.write(x, new Uint8Array(X.buffer));
  const partials = comm.alloc(4 * Math.max(1, colSumPartialFloats(rows, cols)));
  const words = cols + COL_SUM_CANARY.length;
  const run = (compute: Compute): [number[], number[]] => {
    const out = comm.alloc(4 * words);
    comm.write(out, new Uint8Array(Uint32Array.from({ length: words }, (_, i) => (i < cols ? 0xffffffff : COL_SUM_CANARY[i - cols])).buffer));
    compute.colSum(compute.compute, { x: at4(x), out: at4(out), rows, cols, ld, partials: at4(partials) });
    compute.sync(compute.compute);
    const bytes = comm.read(out, 0, 4 * words).slice().buffer;
    return [Array.from(new Float32Array(bytes, 0, cols)), Array.from(new Uint32Array(bytes, 4 * cols))];
  };
  const [host, hostCanary] = run(await createCompute(comm));
  const out: ColSumResult = { x: Array.from(X), host, hostCanary };
  if (arg.emulator !== undefined) [out.kernels, out.kernelsCanary] = run(emulatedCompute(arg.emulator));
  return out;
}

/**
 * pipelineRank with options of this rank's own: `refuse` (a rank) gives that rank `iters: 0` and
 * a BigInt seed, which JSON cannot carry; the others the good options. Returns each rank's error.
 */
export async function oneRankRefuses(comm: Comm, arg: { refuse: number }): Promise<string> {
  const good = { shape: 'tiny' as const, arms: ['one-lane' as Arm], warmup: 0, iters: 1, seed: 1, trace: false };
  const mine = comm.rank === arg.refuse ? { ...good, iters: 0, seed: 1n as never } : good;
  try {
    await pipelineRank(comm, mine);
    return 'no error';
  } catch (err) {
    return `${(err as Error).name}: ${(err as Error).message}`;
  }
}
