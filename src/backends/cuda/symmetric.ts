// Symmetric memory of the cuda backend: every rank allocates the same size and learns every
// peer's address, directly (peers in this process: peer access) or through a CUDA IPC mapping
// (peers in other processes). The addresses go into a device table the kernels index by rank.
import type { CudaDevice } from '../../cuda/device.js';
import { exportIpcHandle, openIpcHandle } from '../../cuda/ipc.js';
import { UsageError } from '../../errors.js';
import { allGatherJson } from '../../world/all-gather.js';
import { sizeDisagreement } from '../../world/disagreement.js';
import type { Store } from '../../world/store.js';
import { GpuBuffer } from '../gpu-memory.js';

/** Where a rank runs: peers in another process are reached through CUDA IPC mappings. */
export interface RankPlace {
  pid: number;
  host: string;
  ordinal: number;
}

/** The ranks of `rank`'s process on its GPU, in rank order: they share the GPU's context. */
export function contextSharers(where: readonly RankPlace[], rank: number): number[] {
  const me = where[rank]!;
  return where.flatMap((w, r) => (w.host === me.host && w.pid === me.pid && w.ordinal === me.ordinal ? [r] : []));
}

export interface SymmetricContext {
  device: CudaDevice;
  store: Store;
  rank: number;
  worldSize: number;
  timeoutMs: number;
  places: RankPlace[];
}

/** Collective: allocates `bytes` here and maps every peer's allocation number `id`. */
export async function allocSymmetric(ctx: SymmetricContext, bytes: number, id: number): Promise<GpuBuffer> {
  const { device, rank } = ctx;
  const crossProcess = ctx.places.some((p) => p.pid !== process.pid);
  const ptr = device.alloc(bytes);
  const mine = { ptr: ptr.toString(), bytes, ipc: crossProcess ? exportIpcHandle(ptr) : '' };
  let peers: (typeof mine)[];
  try {
    peers = await allGatherJson({ store: ctx.store, key: `a2av/cuda/sym/${id}`, rank, worldSize: ctx.worldSize, value: mine, timeoutMs: ctx.timeoutMs });
  } catch (err) {
    device.free(ptr);
    throw err;
  }
  const odd = sizeDisagreement(rank, `allocSymmetric #${id}`, peers.map((p) => p.bytes));
  if (odd !== undefined) {
    device.free(ptr);
    throw new UsageError(odd);
  }
  const mappings: bigint[] = [];
  const addresses = peers.map((p, r) => {
    if (ctx.places[r].pid === process.pid) return BigInt(p.ptr);
    const mapped = openIpcHandle(p.ipc);
    mappings.push(mapped);
    return mapped;
  });
  const table = device.alloc(8 * ctx.worldSize);
  device.upload(table, BigUint64Array.from(addresses));
  return new GpuBuffer(ptr, bytes, id, table, mappings);
}
