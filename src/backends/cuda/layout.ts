// Signal-pad layout; mirrors kernels/config.cuh.
export const PAYLOAD_HEADER = 5;
export const LANE_HEADER_BYTES = 128;
export const STATUS_BYTES = 64;

export function laneBytes(world: number): number {
  // header, payload packets of two parities (16 bytes per int64), done counts, the send plan of
  // grid mode, expected done counts
  const raw = LANE_HEADER_BYTES + 2 * world * (PAYLOAD_HEADER + world) * 16 + 8 * world + 24 * world + 8 * world;
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
