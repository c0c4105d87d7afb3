// Rank programs for tests/pipeline.test.ts: every arm on one model, each rank's raw results.
import type { Comm } from '../../src/backends/backend.js';
import { createCompute } from '../../src/pipeline/compute.js';
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
