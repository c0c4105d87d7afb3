// Signal-pad layout; mirrors kernels/config.cuh.
export const PAYLOAD_HEADER = 4;
export const LANE_HEADER_BYTES = 128;
export const STATUS_BYTES = 64;

/** Bytes a rank may send to one peer as LL packets through the pad (A2AV_INLINE_BYTES). */
export const INLINE_BYTES = 32768;
/** 16-byte LL packets per (parity, sender) slot: the header, then up to INLINE_BYTES of rows. */
export const slotPackets = (world: number): number => PAYLOAD_HEADER + world + INLINE_BYTES / 8;

export function laneBytes(world: number): number {
  const stage = Math.ceil((LANE_HEADER_BYTES + 8 * world) / 16) * 16;
  const raw = stage + 2 * world * slotPackets(world) * 16;
  return Math.ceil(raw / 256) * 256;
}

export function padBytes(world: number, lanes: number): number {
  return laneBytes(world) * lanes;
}

/** Dynamic shared memory of a2av_1d: every rank's header plus this rank's send and receive plan. */
export function kernelSharedBytes(world: number): number {
  return (world * (PAYLOAD_HEADER + world) + 4 * world) * 8;
}

/** Largest world whose payload matrix fits in an SM's shared memory (227 KiB on Hopper). */
export const MAX_WORLD = 160;
