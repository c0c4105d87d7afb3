// One rank's GPU buffers, for the backends that keep data in CUDA device memory (cuda, nccl): the
// registry that tells its own buffers from others', range checks, and host <-> device copies (through
// cuda/host-copies.ts: bounded, and never behind other streams' work).
import type { CopyOffsets, DeviceBuffer, PeerCopyArgs, Stream } from './backend.js';
import { checkBuffer, checkCopyBytes, checkCopyOverlap, checkWriteData, type CheckContext } from '../collectives/check.js';
import type { CudaDevice, CudaStream } from '../cuda/device.js';
import { HostCopies } from '../cuda/host-copies.js';
import { closeIpcMapping } from '../cuda/ipc.js';
import { shown, UsageError } from '../errors.js';

export class GpuBuffer implements DeviceBuffer {
  freed = false;
  /** Host copy of `peerTable`, read on the first copyToPeer. */
  peerAddresses: BigUint64Array | undefined;
  constructor(
    readonly ptr: bigint,
    readonly bytes: number,
    readonly symmetricId: number,
    /** Device table of every rank's pointer to this buffer (peer-addressed symmetric buffers only). */
    readonly peerTable = 0n,
    /** Peers' allocations mapped into this process (CUDA IPC), unmapped on free. */
    readonly mappings: bigint[] = [],
  ) {}
  get symmetric(): boolean {
    return this.symmetricId >= 0;
  }
}

export class GpuMemory {
  readonly #buffers = new Set<GpuBuffer>();
  readonly #copies: HostCopies;
  /**
   * `ctx` answers checkBuffer's questions (rank, ownership) for the owning communicator; a read or
   * write that the device has not finished within `timeoutMs` is a TimeoutError.
   */
  constructor(
    readonly device: CudaDevice,
    readonly ctx: CheckContext,
    timeoutMs: number,
  ) {
    this.#copies = new HostCopies(device, ctx.rank, timeoutMs);
  }

  owns(buf: DeviceBuffer): boolean {
    return buf instanceof GpuBuffer && this.#buffers.has(buf);
  }

  checkBytes(bytes: number): void {
    if (!Number.isSafeInteger(bytes) || bytes < 0)
      throw new UsageError(`rank ${this.ctx.rank}: buffer size must be a non-negative integer (at most 2^53-1), got ${bytes}`);
  }

  checkRange(buf: DeviceBuffer, offset: number, bytes: number, what: string): void {
    checkBuffer(this.ctx, `${what} buffer`, buf);
    if (!Number.isSafeInteger(offset) || offset < 0) throw new UsageError(`rank ${this.ctx.rank}: ${what}: offset must be a non-negative integer, got ${shown(offset)}`);
    if (!Number.isSafeInteger(bytes) || bytes < 0) throw new UsageError(`rank ${this.ctx.rank}: ${what}: byte count must be a non-negative integer, got ${shown(bytes)}`);
    if (offset + bytes > buf.bytes)
      throw new UsageError(`rank ${this.ctx.rank}: ${what} of ${bytes} bytes at offset ${offset} is outside a ${buf.bytes}-byte buffer`);
  }

  /** Registers a buffer built elsewhere (symmetric allocations build their peer tables first). */
  adopt(buf: GpuBuffer): GpuBuffer {
    this.#buffers.add(buf);
    return buf;
  }

  alloc(bytes: number, symmetricId = -1): GpuBuffer {
    this.checkBytes(bytes);
    return this.adopt(new GpuBuffer(this.device.alloc(bytes), bytes, symmetricId));
  }

  free(buf: DeviceBuffer): void {
    checkBuffer(this.ctx, 'buffer to free', buf);
    const b = buf as GpuBuffer;
    b.freed = true;
    this.#buffers.delete(b);
    this.device.free(b.ptr);
    if (b.peerTable !== 0n) this.device.free(b.peerTable);
    for (const m of b.mappings) closeIpcMapping(m);
  }

  /** Frees every buffer and the copies' staging memory (once no copy can be in flight). */
  freeAll(): void {
    for (const b of [...this.#buffers]) this.free(b);
    this.#copies.close();
  }

  write(buf: DeviceBuffer, data: ArrayBufferView, offsetBytes = 0): void {
    checkBuffer(this.ctx, 'write target', buf);
    checkWriteData(this.ctx, data);
    this.checkRange(buf, offsetBytes, data.byteLength, 'write');
    this.#copies.upload((buf as GpuBuffer).ptr + BigInt(offsetBytes), new Uint8Array(data.buffer, data.byteOffset, data.byteLength));
  }

  read(buf: DeviceBuffer, offsetBytes: number, bytes: number): Uint8Array {
    this.checkRange(buf, offsetBytes, bytes, 'read');
    const out = new Uint8Array(bytes);
    if (bytes > 0) this.#copies.download(out, (buf as GpuBuffer).ptr + BigInt(offsetBytes));
    return out;
  }

  copy(dst: DeviceBuffer, src: DeviceBuffer, bytes: number, stream: Stream, at?: CopyOffsets): void {
    const { dstOffset = 0, srcOffset = 0 } = at ?? {};
    checkCopyBytes(this.ctx.rank, bytes);
    this.checkRange(dst, dstOffset, bytes, 'copy destination');
    this.checkRange(src, srcOffset, bytes, 'copy source');
    checkCopyOverlap(this.ctx.rank, dst, src, bytes, dstOffset, srcOffset);
    this.device.copyAsync((dst as GpuBuffer).ptr + BigInt(dstOffset), (src as GpuBuffer).ptr + BigInt(srcOffset), bytes, stream as CudaStream);
  }

  /** Comm.copyToPeer: through the address of `peer`'s copy of `dst` that the kernels use too. */
  copyToPeer(args: PeerCopyArgs, stream: Stream): void {
    const { dst, peer, src, bytes, dstOffset = 0, srcOffset = 0 } = args;
    const { rank, worldSize } = this.ctx;
    this.checkRange(dst, dstOffset, bytes, 'peer copy destination'); // symmetric: every copy has this size
    this.checkRange(src, srcOffset, bytes, 'peer copy source');
    if (!Number.isInteger(peer) || peer < 0 || peer >= worldSize)
      throw new UsageError(`rank ${rank}: peer ${peer} out of range (world of ${worldSize})`);
    const target = dst as GpuBuffer;
    if (target.peerTable === 0n)
      throw new UsageError(`rank ${rank}: peer copy destination is not a peer-addressed symmetric buffer (allocSymmetric on cuda)`);
    // The table was uploaded synchronously when the buffer was made; one read, then reuse.
    if (target.peerAddresses === undefined) {
      const table = new Uint8Array(8 * worldSize);
      this.#copies.download(table, target.peerTable);
      target.peerAddresses = new BigUint64Array(table.buffer);
    }
    if (bytes === 0) return;
    const to = target.peerAddresses[peer] + BigInt(dstOffset);
    this.device.copyPeerAsync(to, (src as GpuBuffer).ptr + BigInt(srcOffset), bytes, stream as CudaStream);
  }
}
