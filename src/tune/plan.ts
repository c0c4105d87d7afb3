// Launch plans: how many thread blocks and threads one rank's all-to-all-v kernel uses.
// Blocks share the rank's send bytes tile by tile (see kernels/a2av.cu), so each peer gets blocks in
// proportion to its bytes: with fewer peers every peer gets more blocks, and the total stays put.
import { UsageError } from '../errors.js';

export interface LaunchPlan {
  /** Thread blocks per rank and call. */
  blocks: number;
  /** Threads per block: a multiple of 32, at most 1024. */
  threads: number;
}

export interface PlanContext {
  /** Blocks of the kernel that fit on the device at once (occupancy x SMs). */
  residentBlocks: (threads: number) => number;
  /** Ranks sharing the device: their kernels must all be resident together, since they wait on each other. */
  ranksOnDevice: number;
  /** Input bytes of the call (the host's only size hint: the splits stay on the device). */
  inputBytes: number;
}

export const DEFAULT_THREADS = 512;
/** Bytes a block moves per step: threads x 16-byte accesses x A2AV_COPY_UNROLL (kernels/config.cuh). */
export const tileBytes = (threads: number): number => threads * 16 * 4;

export function defaultPlan(ctx: PlanContext): LaunchPlan {
  const threads = DEFAULT_THREADS;
  const fair = Math.max(1, Math.floor(ctx.residentBlocks(threads) / ctx.ranksOnDevice));
  // One tile per block at least: smaller messages get fewer blocks (less barrier work), never slower ones.
  const wanted = Math.ceil(ctx.inputBytes / tileBytes(threads));
  return { blocks: Math.min(fair, Math.max(1, wanted)), threads };
}

export function validatePlan(plan: LaunchPlan, ctx: PlanContext): LaunchPlan {
  const { blocks, threads } = plan;
  if (!Number.isInteger(threads) || threads < 32 || threads > 1024 || threads % 32 !== 0)
    throw new UsageError(`plan.threads must be a multiple of 32 in [32, 1024], got ${threads}`);
  if (!Number.isInteger(blocks) || blocks < 1) throw new UsageError(`plan.blocks must be a positive integer, got ${blocks}`);
  const fair = Math.floor(ctx.residentBlocks(threads) / ctx.ranksOnDevice);
  if (blocks > fair)
    throw new UsageError(
      `plan.blocks = ${blocks} cannot be resident alongside the other ${ctx.ranksOnDevice - 1} rank(s) on this GPU ` +
        `(at most ${fair} blocks of ${threads} threads per rank); ranks wait on each other, so all must fit`,
    );
  return { blocks, threads };
}
