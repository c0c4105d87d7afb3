// CPU "device memory": shared memory (memory.ts), so peers can write a symmetric buffer directly.
// The typed-array views are made once here, so collectives allocate no views on the hot path.
import { Buffer, constants } from 'node:buffer';
import type { DeviceBuffer } from '../backend.js';
import { HostMemoryError, UsageError } from '../../errors.js';
import type { SharedRegion } from './memory.js';

/**
 * Bytes one cpu buffer may hold: its byte view is a Buffer (a Uint8Array), and Node caps typed
 * arrays at this many elements (4 GiB on Node 20; more on later Nodes), whatever memory is free.
 */
export const CPU_MAX_BUFFER_BYTES = constants.MAX_LENGTH;

/** Refuses rank `rank` a size past CPU_MAX_BUFFER_BYTES with a UsageError, before any view is made. */
export function checkCpuBufferBytes(rank: number, bytes: number): void {
  if (bytes > CPU_MAX_BUFFER_BYTES) {
    throw new UsageError(`rank ${rank}: a cpu buffer holds at most ${CPU_MAX_BUFFER_BYTES} bytes (Node's typed-array limit), asked for ${bytes}`);
  }
}

/**
 * `bytes` of memory the rank's threads can share, or a HostMemoryError naming the rank and `what`
 * asked, where V8 cannot make it (its own error is a bare RangeError).
 */
export function allocateShared(rank: number, bytes: number, what: string): SharedArrayBuffer {
  try {
    return new SharedArrayBuffer(bytes);
  } catch (err) {
    if (err instanceof RangeError) throw new HostMemoryError(rank, bytes, what, { cause: err });
    throw err;
  }
}

export class CpuBuffer implements DeviceBuffer {
  readonly bytes: number;
  readonly symmetricId: number;
  /** The communicator that allocated it (ownership checks; its rank names refusals). */
  readonly owner: { readonly rank: number };
  #freed = false;
  /** A Buffer (not a bare Uint8Array) so copies can take the memcpy path in memcpy.ts. */
  #u8: Buffer;
  #i32: Int32Array;
  /** Every rank's copy of a symmetric buffer, by rank (this rank's own included); empty for local ones. */
  #peers: Buffer[];
  /** Every rank's region of a symmetric buffer, closed on release; empty for local ones. */
  #regions: SharedRegion[];

  /** A local buffer over `memory`, or (with `regions`, by rank) symmetric allocation `symmetricId`. */
  constructor(owner: { readonly rank: number }, memory: ArrayBufferLike, symmetricId = -1, regions: SharedRegion[] = []) {
    try {
      checkCpuBufferBytes(owner.rank, memory.byteLength);
    } catch (err) {
      // Every rank asked for the same size and is refused here too: each lets go of its mappings.
      closeAll(regions);
      throw err;
    }
    this.owner = owner;
    this.bytes = memory.byteLength;
    this.symmetricId = symmetricId;
    this.#u8 = Buffer.from(memory);
    // Int32 view for splits (int64 read as two 32-bit halves: no BigInt allocation per element).
    // Not `>>> 2`: that wraps at 2^32 bytes, and a 4 GiB buffer would get an empty view.
    this.#i32 = new Int32Array(memory, 0, Math.floor(memory.byteLength / 4));
    this.#regions = regions;
    this.#peers = regions.map((region) => Buffer.from(region.buffer));
  }

  get symmetric(): boolean {
    return this.symmetricId >= 0;
  }

  get freed(): boolean {
    return this.#freed;
  }

  get u8(): Buffer {
    return this.#u8;
  }

  get i32(): Int32Array {
    return this.#i32;
  }

  /** Rank `rank`'s copy of this symmetric buffer. */
  peer(rank: number): Buffer {
    return this.#peers[rank];
  }

  /**
   * Drops this rank's views, then its regions (unmapping them, for processes); peers keep theirs,
   * so memory goes when the last rank lets go.
   */
  release(): void {
    if (this.#freed) return;
    this.#freed = true;
    this.#u8 = Buffer.alloc(0);
    this.#i32 = new Int32Array(0);
    this.#peers = [];
    const regions = this.#regions;
    this.#regions = [];
    closeAll(regions);
  }
}

/** Closes every region, then throws the first failure, if any. */
export function closeAll(regions: readonly SharedRegion[]): void {
  let first: unknown;
  for (const region of regions) {
    try {
      region.close();
    } catch (err) {
      first ??= err;
    }
  }
  if (first !== undefined) throw first;
}
