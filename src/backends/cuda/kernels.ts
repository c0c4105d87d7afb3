// The cuda backend's kernel surface: the module's functions, the launch plan of a call, and the one
// to three launches that queue it (kernels/a2av.cu says why grid mode takes three).
import type { CudaDevice, CudaStream } from '../../cuda/device.js';
import { earlyLaunchWanted, KernelFunction, KernelModule, StructLauncher } from '../../jit/module.js';
import { gridCopyFromEnv, peerSplitFromEnv, type GridCopy } from '../../knobs.js';
import { defaultPlan, fairBlocks, heuristicPlan, laneShares, launchesEarly, peerSplitMode, validatePlan, withinBudget, type LaunchPlan, type PlanContext } from '../../tune/plan.js';
import { loadTables, lookupPlan, type PlanProbe, type PlanShape, type PlanTable } from '../../tune/table.js';
import { A2AV_PARAMS_BYTES, writeA2avParams, type A2avParams } from './kernel-params.js';
import { copySharedBytes, kernelSharedBytes } from './layout.js';

export interface KernelsInit {
  module: KernelModule;
  device: CudaDevice;
  worldSize: number;
  ranksOnDevice: number;
  /** GPUs holding the job's ranks: with the rest, the shape measured plans are looked up by. */
  gpus: number;
  /** The communicator's lanes (A2AV_LANE_SHARES: grids sized per lane). */
  laneCount: number;
}

export class A2avKernels {
  readonly #module: KernelModule;
  readonly #device: CudaDevice;
  readonly #launcher: StructLauncher;
  readonly #copyFn: KernelFunction;
  readonly #doneFn: KernelFunction;
  readonly #gridCopy: GridCopy = gridCopyFromEnv();
  readonly #residentCache = new Map<number, number>();
  readonly #smem: number;
  readonly #world: number;
  readonly #ranksOnDevice: number;
  /** Each call's grid is sized from 1 / this of the rank's resident blocks (plan.ts, laneShares). */
  readonly #shares: number;
  /** How every call's copy splits its blocks (plan.ts, peerSplitMode): fixed by where the ranks are. */
  readonly splitByPeer: number;
  /** Programmatic dependent launch (Hopper+); A2AV_EARLY_LAUNCH=0 turns it off. */
  readonly #earlyLaunch: boolean;
  readonly #shape: PlanShape;
  /** Measured plans (A2AV_PLAN's file, then plans/): read once, so a bad file fails the set-up. */
  readonly #tables: PlanTable[] = loadTables();

  constructor(init: KernelsInit) {
    this.#module = init.module;
    this.#device = init.device;
    this.#world = init.worldSize;
    this.#ranksOnDevice = init.ranksOnDevice;
    this.#shares = laneShares(init.laneCount);
    this.splitByPeer = peerSplitMode({ allOnDevice: init.ranksOnDevice === init.worldSize, peerSplit: peerSplitFromEnv() });
    this.#launcher = new StructLauncher(init.module.fn('a2av_1d'), A2AV_PARAMS_BYTES);
    this.#copyFn = init.module.fn('a2av_copy');
    this.#doneFn = init.module.fn('a2av_done');
    this.#smem = kernelSharedBytes(this.#world);
    this.#earlyLaunch = earlyLaunchWanted(init.device.arch);
    this.#shape = { gpu: init.device.name, gpus: init.gpus, world: init.worldSize, ranksPerGpu: init.ranksOnDevice, lanes: this.#shares };
    if (this.#smem > 48 * 1024) this.#launcher.fn.allowSharedBytes(this.#smem);
  }

  /** The plan a call with this much input gets by default, and the limit any override must meet. */
  planContext(inputBytes: number, rowBytes?: number, maxBlocks?: number): PlanContext {
    return {
      measured: (bytes) => lookupPlan(this.#tables, this.#shape, bytes)?.plan,
      maxBlocks,
      residentBlocks: (t) => this.#residentBlocks(t),
      lanes: this.#shares,
      ranksOnDevice: this.#ranksOnDevice,
      inputBytes,
      rowBytes,
      allOnDevice: this.#ranksOnDevice === this.#world,
      gridCopy: this.#gridCopy,
    };
  }

  /** The plan of a call: the caller's override, validated, or the default for its size (both within its budget). */
  plan(ctx: PlanContext, override: LaunchPlan | undefined): LaunchPlan {
    return override ? withinBudget(validatePlan(override, ctx), ctx.maxBlocks) : defaultPlan(ctx);
  }

  /** Queues one call on `stream` (params.gridCopy must agree with plan.grid). */
  queue(stream: CudaStream, params: A2avParams, plan: LaunchPlan, ctx: PlanContext): void {
    const launcher = this.#launcher;
    writeA2avParams(launcher.view, params);
    if (this.#earlyLaunch && launchesEarly(plan, ctx))
      launcher.launchEarly(plan.blocks, plan.threads, stream, this.#smem);
    else launcher.launch(plan.blocks, plan.threads, stream, this.#smem);
    if (plan.grid) {
      // The copy grid is sized from the hint; its blocks loop when the sends turn out larger. Early
      // launches are safe here: a2av_1d lets them be scheduled only after every rank has arrived.
      const t = plan.grid.threads;
      const blocks = Math.max(1, Math.min(2 ** 31 - 1, ctx.maxBlocks ?? Infinity, Math.ceil(ctx.inputBytes / (16 * t))));
      const go = this.#earlyLaunch ? launcher.launchEarly.bind(launcher) : launcher.launch.bind(launcher);
      go(blocks, t, stream, copySharedBytes(this.#world), this.#copyFn);
      go(1, Math.min(1024, Math.max(32, Math.ceil(this.#world / 32) * 32)), stream, 0, this.#doneFn);
    }
  }

  /** For a2av tune: this rank's shape, its fair share of blocks, and the heuristic's plans. */
  probe(): PlanProbe {
    return {
      shape: this.#shape,
      fairBlocks: (threads) => Math.max(1, fairBlocks({ residentBlocks: (t) => this.#residentBlocks(t), ranksOnDevice: this.#ranksOnDevice }, threads)),
      heuristic: (inputBytes, rowBytes) => heuristicPlan({ ...this.planContext(inputBytes, rowBytes), measured: undefined }),
    };
  }

  unload(): void {
    this.#module.unload();
  }

  #residentBlocks(threads: number): number {
    let n = this.#residentCache.get(threads);
    if (n === undefined) {
      n = Math.floor((this.#launcher.fn.maxActiveBlocksPerSm(threads, this.#smem) * this.#device.smCount) / this.#shares);
      this.#residentCache.set(threads, n);
    }
    return n;
  }
}
