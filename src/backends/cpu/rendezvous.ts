// Set-up exchanges of the cpu backend over the rendezvous store: shared memory every rank maps
// (pads, symmetric buffers), and host barriers.
import { TimeoutError, UsageError } from '../../errors.js';
import { allGather } from '../../world/all-gather.js';
import { sizeDisagreement } from '../../world/disagreement.js';
import type { Store } from '../../world/store.js';
import { checkCpuBufferBytes, closeAll } from './buffer.js';
import type { SharedMemory, SharedRegion } from './memory.js';

/** Set-up exchanges over the rendezvous store; a peer that does not show up is named. */
export class Rendezvous {
  readonly memory: SharedMemory;
  #store: Store;
  #rank: number;
  #world: number;

  constructor(store: Store, memory: SharedMemory, rank: number, world: number) {
    this.#store = store;
    this.memory = memory;
    this.#rank = rank;
    this.#world = world;
  }

  /**
   * Allocates `bytes` of shareable memory, publishes it under `name`, and maps every rank's, in rank
   * order (this rank's own region included). Named memory is unpublished once every peer has
   * mapped it. On failure nothing stays allocated or mapped here.
   */
  async share(name: string, bytes: number, timeoutMs: number, what = name): Promise<SharedRegion[]> {
    // Refused before the memory is made (by either kind of memory), rather than when the buffer's views are.
    checkCpuBufferBytes(this.#rank, bytes);
    // One deadline for both rounds: a peer that dies between them must not cost a second timeout.
    const deadline = Date.now() + timeoutMs;
    const own = this.memory.allocate(bytes);
    const regions: SharedRegion[] = [];
    let handles: Uint8Array[] = [];
    try {
      handles = await this.#gather(name, own.handle, timeoutMs, deadline);
      // Read from every handle before anything is mapped, so every rank refuses with the same
      // account: a rank that mapped first and refused would drop its name under the others.
      const sizes = handles.map((h, p) => (p === this.#rank ? bytes : this.memory.sizeOf(h, p)));
      const odd = sizeDisagreement(this.#rank, what, sizes);
      if (odd !== undefined) throw new UsageError(odd);
      for (const [p, handle] of handles.entries()) regions.push(p === this.#rank ? own : this.memory.map(handle, p));
      if (this.memory.named) {
        await this.#gather(`${name}/mapped`, new Uint8Array(0), timeoutMs, deadline);
        own.unpublish();
      }
      return regions;
    } catch (err) {
      try {
        closeAll(regions.includes(own) ? regions : [own, ...regions]);
        // A rank that published its memory but never said it had mapped the others' is gone or
        // stuck past the deadline: set-up has failed for every rank, and a killed one cannot
        // unlink its name itself.
        const missing = err instanceof TimeoutError ? err.missingRank : -1;
        if (missing !== this.#rank && handles[missing] !== undefined) this.memory.drop(handles[missing], missing);
      } catch {
        // The set-up error is the one worth reporting.
      }
      throw err;
    }
  }

  /** Every rank's `value` published under `name`, in rank order. */
  gather(name: string, value: Uint8Array, timeoutMs: number): Promise<Uint8Array[]> {
    return this.#gather(name, value, timeoutMs);
  }

  /** Every rank reaches `name` (a host barrier). */
  async meet(name: string, timeoutMs: number): Promise<void> {
    await this.#gather(name, new Uint8Array(0), timeoutMs);
  }

  /** Publishes `value` under `name`, then collects every rank's, in rank order. */
  #gather(name: string, value: Uint8Array, timeoutMs: number, deadline?: number): Promise<Uint8Array[]> {
    return allGather({ store: this.#store, key: `a2av/cpu/${name}`, rank: this.#rank, worldSize: this.#world, value, timeoutMs, deadline });
  }
}
