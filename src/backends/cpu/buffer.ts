// CPU "device memory": a SharedArrayBuffer, so peer threads can write a symmetric buffer directly.
// The typed-array views are made once here, so collectives allocate no views on the hot path.
import { Buffer } from 'node:buffer';
import type { DeviceBuffer } from '../backend.js';

export class CpuBuffer implements DeviceBuffer {
  readonly bytes: number;
  readonly symmetricId: number;
  /** The communicator that allocated it (ownership checks). */
  readonly owner: object;
  #freed = false;
  /** A Buffer (not a bare Uint8Array) so copies can take the memcpy path in memcpy.ts. */
  #u8: Buffer;
  #i32: Int32Array;
  /** Every rank's copy of a symmetric buffer, by rank (this rank's own included); empty for local ones. */
  #peers: Buffer[];

  constructor(owner: object, memory: SharedArrayBuffer, symmetricId = -1, peers: Uint8Array[] = []) {
    this.owner = owner;
    this.bytes = memory.byteLength;
    this.symmetricId = symmetricId;
    this.#u8 = Buffer.from(memory);
    // Int32 view for splits (int64 read as two 32-bit halves: no BigInt allocation per element).
    this.#i32 = new Int32Array(memory, 0, memory.byteLength >>> 2);
    this.#peers = peers.map((view) => Buffer.from(view.buffer, view.byteOffset, view.byteLength));
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

  /** Drops this rank's references; peers keep theirs, so memory goes when the last rank lets go. */
  release(): void {
    this.#freed = true;
    this.#u8 = Buffer.alloc(0);
    this.#i32 = new Int32Array(0);
    this.#peers = [];
  }
}
