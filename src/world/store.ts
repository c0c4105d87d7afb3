// Rendezvous store: the key-value service ranks use to exchange addresses and meet at barriers.
// Implementations: in-process (worker threads, brokered by the main thread) and TCP (issue: launcher).

export interface Store {
  /**
   * True when the ranks sharing this store are threads of one process and a value that views a
   * SharedArrayBuffer arrives as that same memory (the thread store). The cpu backend then shares
   * SharedArrayBuffers; otherwise it maps POSIX shared memory.
   */
  readonly sharesMemory?: boolean;
  set(key: string, value: Uint8Array): Promise<void>;
  /** Waits until `key` exists (bounded by timeoutMs, else TimeoutError-like A2avError). */
  get(key: string, timeoutMs?: number): Promise<Uint8Array>;
  /** Atomically adds `delta` to an integer counter (created at 0) and returns the new value. */
  add(key: string, delta: number): Promise<number>;
  /** Removes `key` if it is there: a key no rank will read again (GatherSweep), so a long job's store does not grow. */
  delete(key: string): Promise<void>;
  close(): Promise<void>;
}

/**
 * `store` with every key under `prefix`: communicators made one after another over one store (a
 * process calling init() again, over a launcher's store that outlives each) keep apart, where the
 * second would read the first's keys (its shared-memory names, already gone). close() is the
 * owner's: the scope leaves the store open.
 */
export function scopedStore(store: Store, prefix: string): Store {
  return {
    sharesMemory: store.sharesMemory,
    set: (key, value) => store.set(prefix + key, value),
    get: (key, timeoutMs) => store.get(prefix + key, timeoutMs),
    add: (key, delta) => store.add(prefix + key, delta),
    delete: (key) => store.delete(prefix + key),
    close: async () => {},
  };
}
