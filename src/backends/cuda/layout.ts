// Signal-pad layout; mirrors kernels/config.cuh (tests/kernel-layout.test.ts compares the two).
import { STATUS_BYTES } from '../../collectives/status.js';

export const PAYLOAD_HEADER = 5;
export const LANE_HEADER_BYTES = 128;
/** Refused-call records kept per lane (A2AV_STATUS_RING). */
export const STATUS_RING = 256;
/** Byte offsets in a lane's header (struct LaneHeader). */
export const LaneHeaderField = {
  /** The abort record: the lane's first timeout, a StatusRecord. */
  abort: 0,
  seq: 64,
  refused: 72,
} as const;

/** Byte offset of the status ring in a lane's region: after header, payloads, done, send plan, expect. */
export function statusRingOffset(world: number): number {
  return LANE_HEADER_BYTES + 2 * world * (PAYLOAD_HEADER + world) * 16 + 8 * world + 24 * world + 8 * world;
}

export function laneBytes(world: number): number {
  const raw = statusRingOffset(world) + STATUS_RING * STATUS_BYTES;
  return Math.ceil(raw / 256) * 256;
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
