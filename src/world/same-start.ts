// init()'s first exchange: the ranks compare how each was started (world size, backend, lanes,
// timeoutMs) before anything is sized by it, so a rank started otherwise is refused by name on
// every rank rather than failing later, and differently, on one.
import type { BackendName } from '../backends/backend.js';
import { StoreError, TimeoutError, UsageError } from '../errors.js';
import { decodeJson, encodeJson } from './all-gather.js';
import { ranksByValue } from './disagreement.js';
import { storePort } from './env.js';
import { startWaitMs } from './set-up-waits.js';
import type { TcpStoreClient } from './tcp-store.js';

/** What a rank was started with that its peers must share: the pads, the waits and the kernels are sized by it. */
export interface Start {
  worldSize: number;
  backend: BackendName;
  lanes: number;
  timeoutMs: number;
}

const START_NAMES: Record<keyof Start, string> = {
  worldSize: 'the world size (WORLD_SIZE or the launcher\'s)',
  backend: 'backend',
  lanes: 'lanes',
  timeoutMs: 'timeoutMs',
};

/** The key under `scope` that rank `rank` sets as it arrives, with how it was started. */
export function startKey(scope: string, rank: number): string {
  return `${scope}/start/${rank}`;
}

/**
 * Collective, over the store with the set-up floor, before anything is sized: ranks started with a
 * different world size, backend, lanes or timeoutMs are a UsageError on every rank, naming who has
 * what. Without it, other lanes gave one rank a pad-size message and the others a failed mapping,
 * and other timeouts blamed a healthy peer for a late one. A rank that refuses says so in the
 * store, and rank 0, where it serves the store (`serves`), keeps it up until the others have.
 * `deadline`: init()'s set-up deadline, which retries on a stale store share.
 */
export async function sameStart(store: TcpStoreClient, key: string, rank: number, mine: Start, serves: boolean, deadline: number): Promise<void> {
  const waitMs = startWaitMs(mine.timeoutMs);
  // The store lost before rank 0 took part in this init (its value not yet read): it may be rank
  // 0's last one, closing.
  const beforeRank0 = (err: unknown): unknown => (err instanceof StoreError && err.reason === 'disconnected' && rank !== 0 ? new StaleStore(err) : err);
  // Two processes started as one rank (a launcher's mistake, or RANK set by hand) would write each
  // other's keys: the second to claim the rank is refused, and the job goes on, or fails, as the first.
  const claims = await store.add(`${key}/claim/${rank}`, 1).catch((err: unknown) => {
    throw beforeRank0(err);
  });
  if (claims > 1) throw new UsageError(`rank ${rank}: init(): another process at this store was started as rank ${rank} too (RANK, or the launcher's variable for it, must differ in every process of a job; or another job uses this store)`);
  await store.set(startKey(key, rank), encodeJson(mine)).catch((err: unknown) => {
    throw beforeRank0(err);
  });
  const all: Start[] = [];
  let refusal: string | undefined;
  for (let r = 0; r < mine.worldSize && refusal === undefined; r++) {
    if (r === rank) {
      all.push(mine);
      continue;
    }
    let theirs: Start;
    try {
      theirs = decodeJson<Start>(await store.get(startKey(key, r), Math.max(1, deadline - Date.now())));
    } catch (err) {
      if (err instanceof StoreError && err.reason === 'timeout') throw new TimeoutError(rank, r, waitMs, 'init()');
      throw r === 0 ? beforeRank0(err) : err;
    }
    all.push(theirs);
    // A rank of another world reads or waits for ranks this one has no place for: said at once.
    if (theirs.worldSize !== mine.worldSize) refusal = `ranks disagree on ${START_NAMES.worldSize}: ${mine.worldSize} here, ${theirs.worldSize} on rank ${r}`;
  }
  if (refusal === undefined) {
    const field = (Object.keys(START_NAMES) as (keyof Start)[]).find((f) => all.some((s) => s[f] !== mine[f]));
    if (field === undefined) return;
    refusal = `ranks disagree on ${START_NAMES[field]}: ${ranksByValue(all.map((s) => s[field]))}`;
  }
  if (serves) {
    // Every other rank refuses too (each reads a value unlike its own, or waits for a rank that is
    // not there); until it has, it reads from this store. Bounded: of a world larger than the
    // ranks started, the missing ones never say so.
    const world = Math.max(...all.map((s) => s.worldSize));
    for (let r = 1; r < world; r++) {
      const ok = await store.get(`${key}/refused/${r}`, Math.max(1, deadline - Date.now())).then(() => true, () => false);
      if (!ok) break;
    }
  } else if (storePort() !== undefined) {
    await store.set(`${key}/refused/${rank}`, new Uint8Array(1)).catch(() => {});
  }
  throw new UsageError(`rank ${rank}: init(): ${refusal}; every rank must be started with the same`);
}

/**
 * The store went away before rank 0 took part in this init: where rank 0 serves the store
 * (A2AV_STORE_PORT) and this process calls init() again, that was rank 0's previous store, still
 * closing when this rank reached it. The caller connects again (init.ts); `cause` is the loss.
 */
export class StaleStore extends Error {
  constructor(readonly lost: StoreError) {
    super(lost.message, { cause: lost });
  }
}
