// Where a CPU rank's shareable memory comes from: the one seam between ranks that are threads of
// one process (SharedArrayBuffer, handed over by the thread store) and ranks that are processes
// (POSIX shared memory, see process-memory.ts). Buffers, pads and lanes only see SharedRegion.
import { freemem } from 'node:os';
import { UsageError } from '../../errors.js';
import { allocateShared } from './buffer.js';

/** One rank's shareable memory, as this rank sees it (its own, or its mapping of a peer's). */
export interface SharedRegion {
  /** The memory: a SharedArrayBuffer (threads) or an ArrayBuffer over a mapping (processes). */
  readonly buffer: ArrayBufferLike;
  readonly bytes: number;
  /** What a peer needs to reach this memory; published through the rendezvous store. */
  readonly handle: Uint8Array;
  /**
   * Sleeps while int32 word `index` holds `value`, at most `timeoutMs`; wake(index) by any rank
   * ends it early. Returns at once when the word already differs.
   */
  wait(index: number, value: number, timeoutMs: number): void;
  wake(index: number): void;
  /** Forgets the name peers found this memory by (once every peer has it); the memory stays. */
  unpublish(): void;
  /** Lets go of the memory (unmaps it). Every view of `buffer` must be dropped first. */
  close(): void;
}

export interface SharedMemory {
  /** For deviceName: 'thread' or 'process'. */
  readonly where: string;
  /**
   * True when allocated memory stays reachable by name until unpublish(): set-up then waits for
   * every peer to map it and unpublishes it, so a crash later leaves nothing behind.
   */
  readonly named: boolean;
  /** `bytes` for rank `rank`; `what` (the call that asked) names a failure. */
  allocate(bytes: number, rank: number, what: string): SharedRegion;
  /** Maps the memory a peer published as `handle`. */
  map(handle: Uint8Array, peer: number): SharedRegion;
  /** The size of the memory a peer published as `handle`, read without mapping it. */
  sizeOf(handle: Uint8Array, peer: number): number;
  /** Forgets the name of a peer's memory (a peer that failed set-up, maybe killed, before it could). */
  drop(handle: Uint8Array, peer: number): void;
  /**
   * Forgets every name a peer made that it never published (killed between making its memory and
   * saying its name), where names can be found by the peer alone; else does nothing.
   */
  dropUnpublished?(peer: number): void;
  /** Bytes this memory can still grow by. */
  freeBytes(): number;
}

/** Ranks that are threads of one process: the thread store passes a SharedArrayBuffer as itself. */
export const threadMemory: SharedMemory = {
  where: 'thread',
  named: false,
  allocate(bytes, rank, what) {
    return new ThreadRegion(allocateShared(rank, bytes, what));
  },
  map(handle, peer) {
    if (!(handle.buffer instanceof SharedArrayBuffer)) {
      throw new UsageError(`the cpu backend's threads need a store that passes shared memory (runRanks threads); rank ${peer}'s memory arrived as a copy`);
    }
    return new ThreadRegion(handle.buffer);
  },
  sizeOf: (handle) => handle.byteLength,
  drop: () => {},
  freeBytes: () => freemem(),
};

class ThreadRegion implements SharedRegion {
  readonly buffer: SharedArrayBuffer;
  readonly handle: Uint8Array;
  #i32: Int32Array | undefined;

  constructor(buffer: SharedArrayBuffer) {
    this.buffer = buffer;
    this.handle = new Uint8Array(buffer);
  }

  get bytes(): number {
    return this.buffer.byteLength;
  }

  wait(index: number, value: number, timeoutMs: number): void {
    Atomics.wait(this.#words(), index, value, timeoutMs);
  }

  wake(index: number): void {
    Atomics.notify(this.#words(), index);
  }

  unpublish(): void {}

  /** Garbage collection frees it once no rank holds it. */
  close(): void {}

  #words(): Int32Array {
    return (this.#i32 ??= new Int32Array(this.buffer, 0, Math.floor(this.buffer.byteLength / 4)));
  }
}
