// CUDA IPC: lets another process on this machine map a cuMemAlloc allocation of ours.
import { check, cu, outU64 } from './driver.js';

export const IPC_HANDLE_BYTES = 64;
/** Enables peer access on open when the allocation lives on another GPU. */
const CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS = 1;

/** The allocation's handle, hex-encoded for the rendezvous store. */
export function exportIpcHandle(ptr: bigint): string {
  const handle = Buffer.alloc(IPC_HANDLE_BYTES);
  check('cuIpcGetMemHandle', cu().cuIpcGetMemHandle(handle, ptr));
  return handle.toString('hex');
}

/** Maps a peer's allocation into this process; undo with closeIpcMapping. */
export function openIpcHandle(hex: string): bigint {
  const reserved = Uint8Array.from(Buffer.from(hex, 'hex'));
  return outU64('cuIpcOpenMemHandle', (o) => cu().cuIpcOpenMemHandle(o, { reserved }, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS));
}

export function closeIpcMapping(ptr: bigint): void {
  check('cuIpcCloseMemHandle', cu().cuIpcCloseMemHandle(ptr));
}
