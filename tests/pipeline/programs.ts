// Rank programs for tests/pipeline.test.ts: every arm on one model, each rank's raw results.
import type { Comm } from '../../src/backends/backend.js';
import { createCompute } from '../../src/pipeline/create-compute.js';
import { Model } from '../../src/pipeline/model.js';
import { Layout, shapeOf, type ShapeName } from '../../src/pipeline/shapes.js';
import { runArm, type Arm } from '../../src/pipeline/train.js';
import { emulatedCompute } from './emulated-device.js';

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
  const compute = arg.emulator === undefined ? await createCompute(comm) : emulatedCompute(arg.emulator);
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

export interface VictimArg {
  shape: ShapeName;
  arm: Arm;
  seed: number;
  /** This rank stops taking part after queueing this many steps (as if killed: it never calls again). */
  victim: number;
  stopAfter: number;
  steps: number;
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
  try {
    await runArm(model, {
      arm: arg.arm,
      warmup: 0,
      iters: arg.steps,
      seed: arg.seed,
      onStep: (step) => {
        if (me === arg.victim && step >= arg.stopAfter) throw new Stop();
      },
    });
    throw new Error(`rank ${me}: finished ${arg.steps} steps though rank ${arg.victim} stopped after ${arg.stopAfter}`);
  } catch (err) {
    if (err instanceof Stop) return null;
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
