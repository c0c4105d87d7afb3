// Signal-pad layout; mirrors kernels/config.cuh (tests/kernel-layout.test.ts compares the two).
import { STATUS_BYTES } from '../../collectives/status.js';
import { probeNumber } from './probe-defines.js';

export const PAYLOAD_HEADER = 5;
export const LANE_HEADER_BYTES = 128;
/** Refused-call records kept per lane (A2AV_STATUS_RING). */
export const STATUS_RING = 256;
/** Byte offsets in a lane's header (struct LaneHeader). */
export const LaneHeaderField = {
  /** The abort record's code: the lane's first timeout (the record itself is in the status area). */
  abort: 0,
  seq: 64,
  /** The lane's status area, as the GPU addresses it. */
  status: 72,
} as const;

/** Byte offsets in a lane's status area (struct StatusArea, pinned host memory). */
export const StatusAreaField = { abort: 0, refused: 64, ring: 128 } as const;
export const STATUS_AREA_BYTES = StatusAreaField.ring + STATUS_RING * STATUS_BYTES;

/** Byte offset where the 1-D call's part of a lane's region ends: header, payloads, done, send plan, expect. */
export function oneDimEnd(world: number): number {
  return LANE_HEADER_BYTES + 2 * world * (PAYLOAD_HEADER + world) * 16 + 8 * world + 24 * world + 8 * world;
}

/** MoE exchange (kernels/config.cuh): experts per rank at most, and the two rounds' header words. */
export const MAX_EXPERTS = 256;
/** Round 1's header: six agreement words (kind, plan, rowBytes, outId, experts, align), then the sender's six-word verdict. */
export const X1_HEADER = 12;
export const X2_HEADER = 6;
/** Round-1 slot words past the counts: a fused call's output rows and completion signals (A2AV_XF_EXTRA). */
export const XF_EXTRA = 2;
/** Largest split matrix (W * W * E counts) a fused call holds (A2AV_XF_MAX_MATRIX). */
export const XF_MAX_MATRIX = 2048;
const X1_WORDS = X1_HEADER + MAX_EXPERTS + XF_EXTRA;
const X2_WORDS = X2_HEADER + MAX_EXPERTS;
const PLAN_HEADER = 16;

/** Byte offset of the MoE packets (x1, then x2) in a lane's region: 16-byte aligned. */
export function moeOffset(world: number): number {
  return Math.ceil(oneDimEnd(world) / 16) * 16;
}

/** Byte offset of allReduce's region (lane_ar_header): after the MoE packets. */
export function allReduceOffset(world: number): number {
  return moeOffset(world) + 2 * world * (X1_WORDS + X2_WORDS) * 16;
}

/** Where a lane's region ends (lane_end): allReduce's headers (two parities), ready and free flags, round counts and finished blocks. */
export function laneEnd(world: number): number {
  return allReduceOffset(world) + 2 * world * AR_HEADER * 16 + 2 * world * arSlots(world) * 8 + 24;
}

/** allReduce (kernels/config.cuh A2AV_AR_*): header words, and what sizes its staging. */
export const AR_HEADER = 4;
// Each may be set for a tuning run (A2AV_PROBE_DEFINES="A2AV_PROBE_AR_TILE_BYTES=65536 ..."), which
// the kernels then get too (probe-defines.ts).
export const AR_TILE_BYTES = probeNumber('A2AV_PROBE_AR_TILE_BYTES', 64 << 10, 256);
const AR_ONE_SHOT_MAX = probeNumber('A2AV_PROBE_AR_ONE_SHOT_MAX', 1 << 20, 128);
const AR_ONE_SHOT_TOTAL = probeNumber('A2AV_PROBE_AR_ONE_SHOT_TOTAL', 2 << 20, 128);
const AR_SLOT_BUDGET = probeNumber('A2AV_PROBE_AR_SLOT_BUDGET', 16 << 20, 256);
const AR_MAX_SLOTS = probeNumber('A2AV_PROBE_AR_MAX_SLOTS', 256, 2);

/** Calls of at most this many bytes a rank are one-shot (ar_one_shot_bytes). */
export function arOneShotBytes(world: number): number {
  return Math.min(Math.floor(AR_ONE_SHOT_TOTAL / world), AR_ONE_SHOT_MAX) & ~127;
}

/** Staging slots per source (ar_slots). */
export function arSlots(world: number): number {
  return Math.min(Math.max(Math.floor(AR_SLOT_BUDGET / (world * AR_TILE_BYTES)), 2), AR_MAX_SLOTS);
}

/** Bytes of one lane's allReduce staging on each rank (ar_stage_bytes). */
export function arStageBytes(world: number): number {
  return 4 * world * arOneShotBytes(world) + arSlots(world) * world * AR_TILE_BYTES;
}

/** Rounds of a call of `count` elements of `elementBytes` (ar_round_count). */
export function arRounds(world: number, count: number, elementBytes: number): number {
  const tileElements = AR_TILE_BYTES / elementBytes;
  return Math.ceil(Math.ceil(count / tileElements) / world);
}

/** Dynamic shared memory of ar_reduce: every rank's header, output and staging addresses. */
export function arSharedBytes(world: number): number {
  return 8 * world * (AR_HEADER + 2);
}

export function laneBytes(world: number): number {
  return Math.ceil(laneEnd(world) / 256) * 256;
}

/** Whether a dispatch or combine of W ranks with E experts each runs as one kernel (x_fused_fits). */
export function fusedFits(world: number, experts: number): boolean {
  return world * experts <= MAX_EXPERTS && world * world * experts <= XF_MAX_MATRIX;
}

/** Dynamic shared memory of x_fused (its layout: kernels/exchange-fused.cuh). */
export function fusedSharedBytes(world: number, experts: number, dispatch: boolean): number {
  const n = world * experts;
  const groups = dispatch ? experts : world;
  return 8 * (world * (X1_HEADER + XF_EXTRA) + world * n + world * groups + 8 * n + 4 * world);
}

/** Bytes of an exchange plan (plan_words). */
export function planBytes(world: number): number {
  return 8 * (PLAN_HEADER + 4 * world * MAX_EXPERTS);
}

/** Bytes of a lane's MoE scratch (scratch_words); the plan of the current call is its tail. */
export function scratchBytes(world: number): number {
  return 8 * (8 + world * X1_WORDS + world * MAX_EXPERTS + world * X2_WORDS) + planBytes(world);
}

/** x_copy_slices' index (kernels/exchange.cuh XS_INDEX_ENTRIES): entries of 16 bytes after two words. */
export const SLICE_INDEX_ENTRIES = 65536;
export const SLICE_INDEX_BYTES = 16 + 16 * SLICE_INDEX_ENTRIES;
/** Where the index starts in a lane's scratch (xs_index_word): past the scratch words, 16-byte aligned. */
export const sliceIndexOffset = (world: number): number => Math.ceil(scratchBytes(world) / 16) * 16;

/** Byte offset of the current call's plan in a lane's scratch. */
export function scratchPlanOffset(world: number): number {
  return scratchBytes(world) - planBytes(world);
}

export function padBytes(world: number, lanes: number): number {
  return laneBytes(world) * lanes;
}

/** Dynamic shared memory of a2av_1d: every rank's payload, this rank's send plan, splits and peer lanes. */
export function kernelSharedBytes(world: number): number {
  return (world * (PAYLOAD_HEADER + world) + 5 * world) * 8;
}

/** Dynamic shared memory of a2av_copy: the send plan. */
export function copySharedBytes(world: number): number {
  return 24 * world;
}

/** Largest world whose payload matrix fits in an SM's shared memory (227 KiB on Hopper). */
export const MAX_WORLD = 160;
