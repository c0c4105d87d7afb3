// Small collectives over the rendezvous store, for setup (never on the data path).
import { leftAfterFailure, peerLeftNote, StoreError, TimeoutError, type PeerLeft } from '../errors.js';
import type { Store } from './store.js';

export interface AllGatherArgs {
  store: Store;
  /** Prefix of the keys: rank r publishes under `${key}/${r}`. */
  key: string;
  rank: number;
  worldSize: number;
  value: Uint8Array;
  /** One deadline for the whole exchange. */
  timeoutMs: number;
  /** Where the exchange is one step of a longer wait: that wait's deadline (Date.now() time), which timeoutMs was the length of. */
  deadline?: number;
  /** Told each peer's value as it arrives: what was read before a failure. */
  onValue?: (rank: number, value: Uint8Array) => void;
  /** The call a timeout names (default: "set-up exchange <key>"). */
  what?: string;
  /** The series of gathers this one belongs to: its keys are removed once no rank can read them. */
  sweep?: GatherSweep;
  /**
   * Whether rank r has left for good (cpu: closed its communicator), and whether after a failure
   * of its own: a wait for its value then ends once it is seen not to be there, not at the deadline.
   */
  gone?: (rank: number) => PeerLeft | undefined;
}

/** How often a wait that can tell a peer has gone (AllGatherArgs.gone) looks. */
const GONE_POLL_MS = 50;

/**
 * A communicator's gathers over the job's store (its barriers, gatherOnHost, allocSymmetric), each
 * a key per rank that would otherwise stay for the job's life: a barrier a step held 0.9 KB a
 * barrier in the store's process, 1 GB after a million steps. Every rank makes the series' gathers
 * in one order, and publishes its key of gather n+1 only after reading every key of gather n, so
 * once gather n+1 is complete here no rank will read gather n again: this rank then removes its
 * own key of it (each rank its own: no rank waits on another for this).
 */
export class GatherSweep {
  readonly #store: Store;
  #last: string | undefined;

  constructor(store: Store) {
    this.#store = store;
  }

  /** This rank's key of a gather that just completed; removes its key of the one before. */
  completed(key: string): void {
    const old = this.#last;
    this.#last = key;
    // Not waited for: a barrier costs no more round trips, and a store already closed loses nothing.
    if (old !== undefined) this.#store.delete(old).catch(() => {});
  }
}

/**
 * Every rank contributes `value`; returns all ranks' values in rank order. A rank that does not
 * publish in time ends the wait in a TimeoutError naming it.
 */
export async function allGather(a: AllGatherArgs): Promise<Uint8Array[]> {
  await a.store.set(`${a.key}/${a.rank}`, a.value);
  const deadline = a.deadline ?? Date.now() + a.timeoutMs;
  const out: Uint8Array[] = [];
  for (let r = 0; r < a.worldSize; r++) {
    // Its own value is known: a read of it past the deadline would blame this rank for its peers.
    if (r === a.rank) {
      out.push(a.value);
      continue;
    }
    const value = await valueOf(a, r, deadline);
    a.onValue?.(r, value);
    out.push(value);
  }
  a.sweep?.completed(`${a.key}/${a.rank}`);
  return out;
}

/** Rank r's value, waited for until `deadline`, or until r is seen to have gone without it. */
async function valueOf(a: AllGatherArgs, r: number, deadline: number): Promise<Uint8Array> {
  const key = `${a.key}/${r}`;
  const what = a.what ?? `set-up exchange ${a.key}`;
  const started = Date.now();
  for (;;) {
    const left = deadline - Date.now();
    try {
      return await a.store.get(key, Math.max(1, a.gone ? Math.min(left, GONE_POLL_MS) : left));
    } catch (err) {
      if (!(err instanceof StoreError && err.reason === 'timeout')) throw err;
      if (Date.now() >= deadline) throw new TimeoutError(a.rank, r, a.timeoutMs, what);
      const how = a.gone?.(r);
      if (how === undefined) continue;
      // It may have published just before it closed: one more look before saying it never will.
      const late = await a.store.get(key, 1).catch(() => undefined);
      if (late !== undefined) return late;
      throw new TimeoutError(a.rank, r, a.timeoutMs, `${what}; ${peerLeftNote(how)}`, { waitedMs: Date.now() - started, peerFailed: leftAfterFailure(how) });
    }
  }
}

/**
 * Every rank reaches `key` (a host barrier). Unlike storeBarrier's shared counter, each rank has
 * its own key, so a timeout names the first rank that did not come.
 */
export async function meet(a: Omit<AllGatherArgs, 'value'>): Promise<void> {
  await allGather({ ...a, value: new Uint8Array(0) });
}

/**
 * A communicator's set-up wait (barrier, allocSymmetric) whose TimeoutError ends it (`end`), as a
 * lane's timeout does, then rethrown: ranks pair these calls by their order, so a retry would pair
 * with the late rank's first attempt and every later one would be off by one.
 */
export async function endingOnTimeout<T>(wait: Promise<T>, end: (err: TimeoutError) => void): Promise<T> {
  try {
    return await wait;
  } catch (err) {
    if (err instanceof TimeoutError) end(err);
    throw err;
  }
}

/** allGather of JSON values. */
export async function allGatherJson<T>(a: Omit<AllGatherArgs, 'value'> & { value: T }): Promise<T[]> {
  return (await allGather({ ...a, value: encodeJson(a.value) })).map((b) => decodeJson<T>(b));
}

export function encodeJson(v: unknown): Uint8Array {
  return new TextEncoder().encode(JSON.stringify(v));
}
export function decodeJson<T>(b: Uint8Array): T {
  return JSON.parse(new TextDecoder().decode(b)) as T;
}
