// Host-side argument checks shared by every backend: misuse throws UsageError before anything is
// queued, so a bad call on one rank never leaves its peers waiting on a collective half-issued.
// Runs on every call, so it only compares; it allocates nothing unless it throws.
import type { AllToAllVArgs, DeviceBuffer, Lane } from '../backends/backend.js';
import { UsageError } from '../errors.js';

/** What the checks need to know about the calling communicator. */
export interface CheckContext {
  readonly rank: number;
  readonly worldSize: number;
  readonly laneCount: number;
  /** True when `buf` was allocated by this communicator (not a peer's, not another job's). */
  owns(buf: DeviceBuffer): boolean;
  /** True when `lane` came from this communicator's lane(). */
  ownsLane(lane: Lane): boolean;
}

/** Checks one buffer argument: present, ours, not freed, at least `minBytes` long. */
export function checkBuffer(ctx: CheckContext, what: string, buf: DeviceBuffer | undefined, minBytes = 0): void {
  if (buf === undefined || buf === null || typeof buf !== 'object') {
    throw new UsageError(`rank ${ctx.rank}: ${what} is missing`);
  }
  if (!ctx.owns(buf)) throw new UsageError(`rank ${ctx.rank}: ${what} was not allocated by this communicator`);
  if (buf.freed) throw new UsageError(`rank ${ctx.rank}: ${what} was freed`);
  if (buf.bytes < minBytes) {
    throw new UsageError(`rank ${ctx.rank}: ${what} holds ${buf.bytes} bytes, needs at least ${minBytes} (W = ${ctx.worldSize})`);
  }
}

/** Resolves the lane argument (default lane 0) and checks it belongs to this communicator. */
export function checkLane(ctx: CheckContext, lane: Lane | undefined): number {
  if (lane === undefined) return 0;
  const index = lane.index;
  if (!Number.isInteger(index) || index < 0 || index >= ctx.laneCount) {
    throw new UsageError(`rank ${ctx.rank}: lane ${index} out of range (this communicator has ${ctx.laneCount})`);
  }
  if (!ctx.ownsLane(lane)) throw new UsageError(`rank ${ctx.rank}: lane ${index} belongs to another communicator`);
  return index;
}

/** Checks an allToAllV call; returns the lane index to run it on. */
export function checkAllToAllV(ctx: CheckContext, args: AllToAllVArgs): number {
  const { rowBytes } = args;
  if (!Number.isSafeInteger(rowBytes) || rowBytes < 1) {
    throw new UsageError(`rank ${ctx.rank}: rowBytes must be a positive integer, got ${rowBytes}`);
  }
  const w = ctx.worldSize;
  checkBuffer(ctx, 'input', args.input);
  checkBuffer(ctx, 'output', args.output);
  // Constant labels: this runs on every call and must not build strings unless it throws.
  checkBuffer(ctx, 'inSplits (int64[W])', args.inSplits, 8 * w);
  checkBuffer(ctx, 'outSplitsOffsets (int64[2][W])', args.outSplitsOffsets, 16 * w);
  if (!args.output.symmetric) {
    throw new UsageError(`rank ${ctx.rank}: output must be a symmetric buffer (allocSymmetric) so peers can write it`);
  }
  if (args.output === args.input) throw new UsageError(`rank ${ctx.rank}: output and input are the same buffer`);
  if (args.outSplitsOffsets === args.output || args.inSplits === args.output) {
    throw new UsageError(`rank ${ctx.rank}: output must not also hold splits`);
  }
  return checkLane(ctx, args.lane);
}
