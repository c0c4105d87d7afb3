// A barrier built only from a Store's add and get, so every Store implementation gets one.
import { shown, StoreError, UsageError } from '../errors.js';
import type { Store } from './store.js';

export interface StoreBarrierOptions {
  /** Names the barrier; every participant uses the same name. */
  name: string;
  /** How many callers must arrive before any is released. */
  worldSize: number;
  /** Bound on the whole wait. */
  timeoutMs: number;
}

const ONE = new Uint8Array([0x31]);

/**
 * Waits until `worldSize` callers reached barrier `name`. Reusable: each arrival increments one
 * counter, and arrivals k*W+1..(k+1)*W form generation k, released by its own key. That stays
 * correct when a fast rank re-enters before slow ones have left, since generation k's key is set
 * only after all W of its arrivals were counted. On timeout, the StoreError says how many arrived.
 */
export async function storeBarrier(store: Store, options: StoreBarrierOptions): Promise<void> {
  const { name, worldSize, timeoutMs } = options;
  if (!Number.isInteger(worldSize) || worldSize < 1) throw new UsageError(`barrier "${name}": worldSize must be a positive integer, got ${shown(worldSize)}`);
  const started = Date.now();
  const counterKey = `a2av/barrier/${name}/arrived`;
  const arrived = await store.add(counterKey, 1);
  const generation = Math.floor((arrived - 1) / worldSize);
  const releaseKey = `a2av/barrier/${name}/${generation}`;
  if (arrived % worldSize === 0) await store.set(releaseKey, ONE);
  const remaining = Math.max(0, timeoutMs - (Date.now() - started));
  try {
    await store.get(releaseKey, remaining);
  } catch (cause) {
    if (!(cause instanceof StoreError) || cause.reason !== 'timeout') throw cause;
    const count = await store.add(counterKey, 0).catch(() => undefined);
    const seen = count === undefined ? 'unknown' : String(Math.min(worldSize, count - generation * worldSize));
    throw new StoreError('barrier', releaseKey, 'timeout', `barrier "${name}": ${seen} of ${worldSize} ranks arrived within ${timeoutMs} ms`, { cause });
  }
}
