// Signal-pad layout; mirrors kernels/config.cuh.
export const PAYLOAD_HEADER = 4;
export const LANE_HEADER_BYTES = 128;
export const STATUS_BYTES = 64;

export function laneBytes(world: number): number {
  const raw = LANE_HEADER_BYTES + 16 * world + 2 * world * (PAYLOAD_HEADER + world) * 8;
  return Math.ceil(raw / 256) * 256;
}

export function padBytes(world: number, lanes: number): number {
  return laneBytes(world) * lanes;
}
