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
  close(): Promise<void>;
}
