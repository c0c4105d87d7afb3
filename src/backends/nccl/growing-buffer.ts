// A lane's device buffer that grows on demand without a free in the middle of a run. cuMemFree
// waits for every kernel on the device, and with two lanes the other lane's NCCL kernel may be
// waiting for a peer whose host is itself waiting for this rank's next call on this lane: both
// ranks stuck until the timeout (the hazard README's "Handles and ordering" names for comm.free).
// So an outgrown allocation is retired, and freed once every lane of the communicator is idle
// (nothing queued on the device can then be waiting for a peer), or when the lane is released.

/** How the buffer gets and returns device memory. */
export interface DeviceAllocator {
  alloc(bytes: number): bigint;
  free(ptr: bigint): void;
}

export class GrowingBuffer {
  ptr = 0n;
  bytes = 0;
  readonly #retired: bigint[] = [];

  /**
   * At least `bytes` of device memory, reallocated (the contents not kept) when more is asked for
   * than it holds; the retired allocations are freed here when `idle()` says every lane is.
   */
  reserve(mem: DeviceAllocator, bytes: number, idle: () => boolean): bigint {
    if (bytes > this.bytes) {
      const ptr = mem.alloc(bytes);
      if (this.ptr !== 0n) this.#retired.push(this.ptr);
      this.ptr = ptr;
      this.bytes = bytes;
    }
    if (this.#retired.length > 0 && idle()) this.#freeRetired(mem);
    return this.ptr;
  }

  /** Allocations outgrown and not yet freed. */
  get retired(): number {
    return this.#retired.length;
  }

  /** Frees everything: only once no work that uses the buffer can still run. */
  release(mem: DeviceAllocator): void {
    this.#freeRetired(mem);
    if (this.ptr !== 0n) mem.free(this.ptr);
    this.ptr = 0n;
    this.bytes = 0;
  }

  #freeRetired(mem: DeviceAllocator): void {
    while (this.#retired.length > 0) mem.free(this.#retired.pop()!);
  }
}
