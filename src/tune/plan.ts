// Launch plans: how many thread blocks and threads one rank's all-to-all-v kernel uses.
// Blocks share the rank's send bytes tile by tile (see kernels/a2av.cu), so each peer gets blocks in
// proportion to its bytes: with fewer peers every peer gets more blocks, and the total stays put.
import { shown, UsageError } from '../errors.js';
import { laneSharesOn, type GridCopy, type PeerSplit } from '../knobs.js';

export interface LaunchPlan {
  /** Thread blocks per rank and call. */
  blocks: number;
  /** Threads per block: a multiple of 32, at most 1024. */
  threads: number;
  /**
   * Grid mode: the kernel above only exchanges splits and completion flags, and the data moves in a
   * separate grid of short-lived blocks of `grid.threads` threads, one 16-byte word each per block
   * slice. Faster for large calls on one GPU (kernels/a2av.cu says why).
   */
  grid?: { threads: number };
}

export interface PlanContext {
  /** Blocks of the kernel that fit on the device at once (occupancy x SMs), divided among `lanes`. */
  residentBlocks: (threads: number) => number;
  /** The lanes each rank's calls may be in flight on at once (laneShares; 1 where grids take the rank's whole share). */
  lanes?: number;
  /** Ranks sharing the device: their kernels must all be resident together, since they wait on each other. */
  ranksOnDevice: number;
  /** Input bytes of the call (the host's only size hint: the splits stay on the device). */
  inputBytes: number;
  /** Bytes per row of the call, when known: grid mode only pays with 16-byte aligned segments. */
  rowBytes?: number;
  /** Every rank of the job is on this GPU (peers' memory is this device's HBM, not NVLink). */
  allOnDevice: boolean;
  /** Grid mode: 'auto' (default: large calls on one GPU), 'always' or 'never' (A2AV_GRID_COPY). */
  gridCopy?: GridCopy;
  /** The measured plan for this call's shape and size, if a table (table.ts) has one. */
  measured?: (inputBytes: number) => LaunchPlan | undefined;
  /**
   * At most this many thread blocks for the call (its data grid included), so collectives leave SMs
   * to the compute beside them; the call stays correct with any count, only slower.
   */
  maxBlocks?: number;
}


/** How a copy splits its blocks (kernels/config.cuh A2AV_SPLIT_*): never, from A2AV_SPLIT_MIN_BYTES of sends on, always. */
export const PeerSplitMode = { never: 0, large: 1, always: 2 } as const;
/** Send bytes from which a copy across GPUs splits its blocks (kernels/config.cuh A2AV_SPLIT_MIN_BYTES). */
export const SPLIT_MIN_BYTES = 16 << 20;

/**
 * How a resident copy shares its blocks: each destination its own (kernels/copy.cuh, split_by_peer)
 * or all sweeping the send bytes together. Across GPUs the shared sweep writes the local share, then
 * the remote one, one link direction at a time: splitting measured 428 -> 383 µs (uniform) and
 * 314 -> 248 µs (zipf) at 256 MiB per rank on 2 H200s, but 1.2-1.6 µs slower from 0.5 to 8 MiB, so
 * the kernel splits from SPLIT_MIN_BYTES of sends on. On one GPU every destination is the same
 * HBM, and the shared sweep keeps its DRAM pages open.
 */
export function peerSplitMode(ctx: { allOnDevice: boolean; peerSplit?: PeerSplit }): number {
  const mode = ctx.peerSplit ?? 'auto';
  if (mode === 'always') return PeerSplitMode.always;
  return mode === 'auto' && !ctx.allOnDevice ? PeerSplitMode.large : PeerSplitMode.never;
}

/**
 * A call's grid takes its lane's share of what its rank may keep resident, not the rank's whole
 * share, so large calls in flight on every lane at once still fit the GPU together. With whole
 * shares, three ranks on one H200 with large calls on both lanes timed out (a lane's kernel held
 * blocks its peer's other lane needed: tests/conformance/lane-cases.ts, lanesLarge); with lane
 * shares the case passes and single calls lost nothing measurable (docs/perf.md).
 * A2AV_LANE_SHARES=0 restores whole shares, the control arm.
 */
export function laneShares(laneCount: number, value = process.env.A2AV_LANE_SHARES): number {
  return laneSharesOn(value) ? Math.max(1, laneCount) : 1;
}

export const DEFAULT_THREADS = 512;
/** Threads of a small call's blocks on one GPU (heuristicPlan). */
export const SMALL_THREADS = 256;
/** Bytes a block moves per step: threads x 16-byte accesses x A2AV_COPY_UNROLL (kernels/config.cuh). */
export const tileBytes = (threads: number): number => threads * 16 * 4;

/**
 * From this many input bytes per rank, calls on one GPU move their data in grid mode. Measured on an
 * H200 (docs/perf.md): grid mode is slower at 4 MiB with 1-2 ranks (two more launches), even at
 * 16 MiB, and ahead from 64 MiB (0.94-0.98 of the copy engine at 256 MiB-1 GiB against 0.89-0.90).
 */
export const GRID_MIN_BYTES = 16 << 20;
export const GRID_THREADS = 256;

/**
 * The plan a call gets when it names none: a measured table's for its shape and size (when it can
 * be resident here, with A2AV_GRID_COPY not forcing a mode), else the heuristic; then the budget.
 */
export function defaultPlan(ctx: PlanContext): LaunchPlan {
  return withinBudget(measuredPlan(ctx) ?? heuristicPlan(ctx), ctx.maxBlocks);
}

function measuredPlan(ctx: PlanContext): LaunchPlan | undefined {
  if (ctx.measured === undefined || (ctx.gridCopy ?? 'auto') !== 'auto') return undefined;
  const plan = ctx.measured(ctx.inputBytes);
  if (plan === undefined) return undefined;
  // A grid plan needs 16-byte rows, as the heuristic's does.
  if (plan.grid && ctx.rowBytes !== undefined && ctx.rowBytes % 16 !== 0) return undefined;
  try {
    return validatePlan(plan, ctx);
  } catch {
    return undefined;
  }
}

/** `plan` with at most `maxBlocks` blocks (the grid mode's data grid is capped where it is launched). */
export function withinBudget(plan: LaunchPlan, maxBlocks: number | undefined): LaunchPlan {
  if (maxBlocks === undefined || plan.blocks <= maxBlocks) return plan;
  return { ...plan, blocks: Math.max(1, maxBlocks) };
}

/** Blocks of `threads` threads one call may hold: its lane's share of the GPU, split among the ranks on it. */
export function fairBlocks(ctx: Pick<PlanContext, 'residentBlocks' | 'ranksOnDevice'>, threads: number): number {
  return Math.floor(ctx.residentBlocks(threads) / ctx.ranksOnDevice);
}

/**
 * The most blocks of `threads` threads a call may have and still launch early (programmatic
 * dependent launch): the next call's blocks then sit resident beside this call's, so twice its
 * blocks must fit its share, or a rank could be starved of SMs while its peers wait on it.
 */
export function earlyLaunchBlocks(ctx: Pick<PlanContext, 'residentBlocks' | 'ranksOnDevice'>, threads: number): number {
  return Math.floor(fairBlocks(ctx, threads) / 2);
}

/** Whether a call of `plan` may launch early (earlyLaunchBlocks). */
export function launchesEarly(plan: LaunchPlan, ctx: Pick<PlanContext, 'residentBlocks' | 'ranksOnDevice'>): boolean {
  return plan.blocks <= earlyLaunchBlocks(ctx, plan.threads);
}

export function heuristicPlan(ctx: PlanContext): LaunchPlan {
  // Across GPUs the resident sweep stays the default: grid mode is only measured on one GPU so far.
  // Rows of a size not a multiple of 16 leave every segment unaligned, and grid mode's short path
  // unused: 0.33-0.40 of the copy against 0.56-0.66 for the resident sweep (7-byte rows, W=8).
  const mode = ctx.gridCopy ?? 'auto';
  const aligned = ctx.rowBytes === undefined || ctx.rowBytes % 16 === 0;
  if (mode === 'always' || (mode === 'auto' && ctx.allOnDevice && aligned && ctx.inputBytes >= GRID_MIN_BYTES))
    return { blocks: 1, threads: 256, grid: { threads: GRID_THREADS } };
  // Small calls on one GPU: 256-thread blocks, no more than still launch early (queue's test):
  // measured on an H200 with two lanes, that beat the fair share launched plainly 1.3-3.1x from
  // 512 KiB to 4 MiB at W = 2, 4 and 8 (docs/perf.md).
  const small = ctx.allOnDevice && ctx.inputBytes < GRID_MIN_BYTES;
  const threads = small ? SMALL_THREADS : DEFAULT_THREADS;
  const most = Math.max(1, small ? earlyLaunchBlocks(ctx, threads) : fairBlocks(ctx, threads));
  // One tile per block at least: smaller messages get fewer blocks (less barrier work), never slower ones.
  const wanted = Math.ceil(ctx.inputBytes / tileBytes(threads));
  return { blocks: Math.min(most, Math.max(1, wanted)), threads };
}

const checkThreads = (name: string, threads: unknown): void => {
  if (!Number.isInteger(threads) || (threads as number) < 32 || (threads as number) > 1024 || (threads as number) % 32 !== 0)
    throw new UsageError(`${name} must be a multiple of 32 in [32, 1024], got ${shown(threads)}`);
};

/**
 * What a plan must be on any backend (cpu runs no kernel, but takes the plans a GPU run would, so
 * a plan refused there is refused here too): the residency check is validatePlan's, on the device.
 */
export function checkPlanShape(plan: LaunchPlan): void {
  if (plan === null || typeof plan !== 'object') throw new UsageError(`plan must be { blocks, threads, grid? }, got ${shown(plan)}`);
  // A misspelt field (block, thread) would otherwise be dropped and the call run on another plan.
  const unknown = Object.keys(plan).find((k) => k !== 'blocks' && k !== 'threads' && k !== 'grid');
  if (unknown !== undefined) throw new UsageError(`plan has no field '${unknown}': it takes blocks, threads and grid ({ threads })`);
  const { blocks, threads, grid } = plan;
  checkThreads('plan.threads', threads);
  if (grid !== undefined) {
    if (typeof grid !== 'object' || grid === null) throw new UsageError(`plan.grid must be { threads }, got ${String(grid)}`);
    const extra = Object.keys(grid).find((k) => k !== 'threads');
    if (extra !== undefined) throw new UsageError(`plan.grid has no field '${extra}': it takes threads`);
    checkThreads('plan.grid.threads', grid.threads);
  }
  if (!Number.isInteger(blocks) || blocks < 1) throw new UsageError(`plan.blocks must be a positive integer, got ${shown(blocks)}`);
}

export function validatePlan(plan: LaunchPlan, ctx: PlanContext): LaunchPlan {
  checkPlanShape(plan);
  const { blocks, threads, grid } = plan;
  const fair = fairBlocks(ctx, threads);
  if (blocks > fair)
    throw new UsageError(
      `plan.blocks = ${blocks} cannot be resident beside the other calls that may run on this GPU at once ` +
        `(at most ${fair} blocks of ${threads} threads a call: ${ctx.ranksOnDevice} rank(s) here, ${ctx.lanes ?? 1} lane(s) each); ` +
        'ranks wait on each other, so all must fit',
    );
  return grid ? { blocks, threads, grid: { threads: grid.threads } } : { blocks, threads };
}
