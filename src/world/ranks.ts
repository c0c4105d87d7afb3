// Contract for running W ranks as worker threads of this process (SPMD).
// Implementation lives in src/world/threads.ts.
import type { BackendName, Comm } from '../backends/backend.js';

/** Default bound on every wait inside collectives and the store, in milliseconds. */
export const DEFAULT_TIMEOUT_MS = 60_000;
/** The longest bound a wait takes: Node's timers hold 2^31 - 1 ms (about 24.8 days) and fire after 1 ms past it. */
export const MAX_TIMEOUT_MS = 2 ** 31 - 1;
/** Default lanes per communicator. */
export const DEFAULT_LANES = 2;

/** globalThis key a rank thread sets to its rank (thread-worker.ts): runRanks refuses to start ranks inside one. */
export const RANK_THREAD = Symbol.for('a2av.rankThread');

export interface RankContext {
  /** Sends a small structured-cloneable message to the main thread's `onReport` (progress, rows); throws UsageError for one that cannot be cloned. */
  report(message: unknown): void;
}

/** A rank program: a module export called once on every rank with its communicator. */
export type RankFn<A = unknown, R = unknown> = (comm: Comm, arg: A, ctx: RankContext) => Promise<R> | R;

export interface RunRanksOptions {
  /** Default: 'cuda' when a GPU is visible, else 'cpu' (as init() picks). */
  backend?: BackendName;
  ranks: number;
  /** Bound on every wait inside collectives and the store (default 60000). */
  timeoutMs?: number;
  /** Lanes per communicator (default 2). */
  lanes?: number;
  /** Called on the main thread for every ctx.report(). */
  onReport?: (rank: number, message: unknown) => void;
}
