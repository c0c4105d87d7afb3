// Set-up exchanges of the cpu backend over the rendezvous store: shared memory every rank maps
// (pads, symmetric buffers), and host barriers.
import { SharedMemoryError, StoreError, TimeoutError, UsageError, type PeerLeft } from '../../errors.js';
import { allGather, GatherSweep } from '../../world/all-gather.js';
import { sizeDisagreement } from '../../world/disagreement.js';
import type { Store } from '../../world/store.js';
import { checkCpuBufferBytes, closeAll } from './buffer.js';
import type { SharedMemory, SharedRegion } from './memory.js';

/** Set-up exchanges over the rendezvous store; a peer that does not show up is named. */
export class Rendezvous {
  readonly memory: SharedMemory;
  #store: Store;
  /** Every gather of this communicator's set-up and host calls is one series (all-gather.ts). */
  #sweep: GatherSweep;
  #rank: number;
  #world: number;
  /** Set once the pads are up: whether a peer has closed its communicator (all-gather.ts's `gone`). */
  peerGone: ((rank: number) => PeerLeft | undefined) | undefined;

  constructor(store: Store, memory: SharedMemory, rank: number, world: number) {
    this.#store = store;
    this.#sweep = new GatherSweep(store);
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
    const own = this.memory.allocate(bytes, this.#rank, what);
    const regions: SharedRegion[] = [];
    // The peers' handles as they arrive: after a failure, the names of those that cannot unlink theirs.
    const known: Uint8Array[] = [];
    try {
      const handles = await this.#gather(name, own.handle, timeoutMs, deadline, (p, h) => (known[p] = h));
      // Read from every handle before anything is mapped, so every rank refuses with the same
      // account: a rank that mapped first and refused would drop its name under the others.
      const sizes = handles.map((h, p) => (p === this.#rank ? bytes : this.memory.sizeOf(h, p)));
      const odd = sizeDisagreement(this.#rank, what, sizes);
      if (odd !== undefined) throw new UsageError(odd);
      for (const [p, handle] of handles.entries()) regions.push(p === this.#rank ? own : this.#map(handle, p, what));
      if (this.memory.named) {
        await this.#gather(`${name}/mapped`, new Uint8Array(0), timeoutMs, deadline);
        own.unpublish();
      }
      return regions;
    } catch (err) {
      try {
        closeAll(regions.includes(own) ? regions : [own, ...regions]);
      } catch {
        // The set-up error is the one worth reporting.
      }
      try {
        // Set-up has failed for every rank, and a killed one cannot unlink its name itself: a rank
        // that published its memory but never said it had mapped the others' (gone, or stuck past
        // the deadline), or, with the store gone (it may have gone with rank 0, serving it), any.
        const missing = err instanceof TimeoutError ? err.missingRank : -1;
        const storeGone = err instanceof StoreError && err.reason === 'disconnected';
        for (const [p, handle] of known.entries()) if (handle !== undefined && (p === missing || storeGone)) this.memory.drop(handle, p);
        // One killed after making its memory but before publishing its name: found by its prefix, where
        // names have one (only a gone process's are dropped). With the store gone, any rank may be it.
        if (missing >= 0 && known[missing] === undefined) this.memory.dropUnpublished?.(missing);
        if (storeGone) for (let p = 0; p < this.#world; p++) if (p !== this.#rank && known[p] === undefined) this.memory.dropUnpublished?.(p);
      } catch {
        // The set-up error is the one worth reporting.
      }
      throw err;
    }
  }

  /**
   * Maps peer `p`'s memory. Its name gone means the peer left set-up after publishing it (exited,
   * was killed or refused): said so, naming it, rather than as a bare ENOENT.
   */
  #map(handle: Uint8Array, p: number, what: string): SharedRegion {
    try {
      return this.memory.map(handle, p);
    } catch (err) {
      if (!(err instanceof SharedMemoryError) || err.errorName !== 'ENOENT') throw err;
      throw new SharedMemoryError(err.call, err.errno, err.errorName, err.path,
        `rank ${p}'s memory for ${what} was gone before rank ${this.#rank} mapped it: rank ${p} left set-up (it exited, was killed, or failed: its own error says why)`);
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
  #gather(name: string, value: Uint8Array, timeoutMs: number, deadline?: number, onValue?: (rank: number, value: Uint8Array) => void): Promise<Uint8Array[]> {
    return allGather({ store: this.#store, key: `a2av/cpu/${name}`, rank: this.#rank, worldSize: this.#world, value, timeoutMs, deadline, onValue, what: callOf(name), sweep: this.#sweep, gone: this.peerGone });
  }
}

/** The call a set-up exchange belongs to, as a timeout names it: allocSymmetric #2, barrier() #0. */
function callOf(name: string): string {
  const [kind, n, step] = name.split('/');
  const call = kind === 'sym' ? `allocSymmetric #${n}` : kind === 'barrier' ? `barrier() #${n}` : kind === 'gather' ? `gatherOnHost() #${n}` : kind === 'pad' ? "the communicator's set-up (its pad)" : `set-up exchange ${name}`;
  return step === 'mapped' || (kind === 'pad' && n === 'mapped') ? `${call}, mapping the peers' memory` : call;
}
