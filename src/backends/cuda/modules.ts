// The kernel modules of a communicator's ranks. Rank 0 compiles first (or fills the on-disk cache);
// the others then load the cached binary. Ranks of one process on one GPU share its context, and
// so run one copy of the code: the first of them loads it and lends the handles through the
// set-up store. Eight copies of x_fused (137 KB of SASS each) took turns in the SMs' instruction
// caches while eight ranks ran it at once (docs/perf.md).
import { KernelModule } from '../../jit/module.js';
import { sharedModulesOn } from '../../knobs.js';
import { allGatherJson } from '../../world/all-gather.js';
import { storeBarrier } from '../../world/barrier.js';
import { gpuSetUpMs } from '../../world/set-up-waits.js';
import type { Store } from '../../world/store.js';
import { contextSharers, type RankPlace } from './symmetric.js';

/**
 * Which rank loads the modules `rank` runs: the first rank of its process on its GPU (they share
 * the GPU's context), or itself where sharing is off; and whether `rank` lends them to others.
 */
export function moduleLender(where: readonly RankPlace[], rank: number, shared: boolean): { lender: number; lends: boolean } {
  const sharers = contextSharers(where, rank);
  const lender = shared ? sharers[0] : rank;
  return { lender, lends: lender === rank && shared && sharers.length > 1 };
}

/** Where a communicator's ranks are, and what a collective load needs. */
export interface ModuleLoad {
  store: Store;
  rank: number;
  worldSize: number;
  timeoutMs: number;
  where: readonly RankPlace[];
  arch: number;
}

/**
 * Collective: `files` compiled with `options`, loaded by each rank's lender (moduleLender), and the
 * handles lent under store keys from `key`. `lends`: this rank's modules run on other ranks too, so
 * it unloads them only after meeting them.
 */
export async function loadModules(a: ModuleLoad, key: string, files: readonly string[], options: readonly string[]): Promise<{ modules: KernelModule[]; lends: boolean }> {
  // Peers wait across rank 0's compile (set-up-waits.ts).
  const timeoutMs = gpuSetUpMs(a.timeoutMs);
  const barrier = (name: string) => storeBarrier(a.store, { name, worldSize: a.worldSize, timeoutMs });
  const { lender, lends } = moduleLender(a.where, a.rank, sharedModulesOn());
  if (a.rank !== 0) await barrier(`${key}/compiled`);
  const loaded = lender === a.rank ? files.map((file) => new KernelModule(file, a.arch, [...options])) : [];
  if (a.rank === 0) await barrier(`${key}/compiled`);
  const lent = await allGatherJson<string[]>({ store: a.store, key, rank: a.rank, worldSize: a.worldSize, value: loaded.map((m) => m.handle.toString()), timeoutMs });
  return { modules: lender === a.rank ? loaded : lent[lender]!.map((h) => new KernelModule(BigInt(h))), lends };
}
