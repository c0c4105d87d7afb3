// A rank's communicator when every rank is a process of its own (a2av launch, torchrun, srun,
// mpirun): where this process sits comes from the launcher's variables, the peers are met through
// the job's TCP store, and the communicator owns that store connection.
import type { BackendName, Comm } from '../backends/backend.js';
import { createComm, defaultBackend } from '../backends/create.js';
import { UsageError } from '../errors.js';
import { rankEnv, STORE_TOKEN_ENV } from './env.js';
import { recordUncaughtErrors } from './exit-record.js';
import { checkRankOptions } from './options.js';
import { DEFAULT_LANES, DEFAULT_TIMEOUT_MS } from './ranks.js';
import { TcpStoreClient } from './tcp-store.js';

export interface InitOptions {
  /** Default: 'cuda' when a GPU is visible, else 'cpu'. */
  backend?: BackendName;
  /** Bound on every wait between ranks, and on reaching the store (default 60000). */
  timeoutMs?: number;
  /** Lanes per communicator (default 2). */
  lanes?: number;
}

/**
 * Builds this process's communicator: rank, world and local rank from the launcher's variables
 * (ours and torchrun's, Slurm's or Open MPI's), the store from MASTER_ADDR, MASTER_PORT and
 * A2AV_STORE_TOKEN. Collective: every rank of the job calls it. `close()` also closes the store
 * connection. An error this process leaves uncaught is written to $TORCHELASTIC_ERROR_FILE (set by
 * a2av launch and torchrun), so the launcher can name the rank a TimeoutError waited for. Throws
 * UsageError when no launcher started this process.
 */
export async function init(options: InitOptions = {}): Promise<Comm> {
  checkRankOptions('init()', options, ['backend', 'timeoutMs', 'lanes']);
  const place = rankEnv();
  if (place === undefined) {
    throw new UsageError('init(): this process was not started as a rank (no RANK/WORLD_SIZE, Slurm or Open MPI variables); ' +
      `start it with a2av launch -n N -- <command>, or torchrun/srun/mpirun with MASTER_ADDR, MASTER_PORT and ${STORE_TOKEN_ENV} set, ` +
      'or run ranks as threads with runRanks()');
  }
  recordUncaughtErrors();
  const timeoutMs = options.timeoutMs ?? DEFAULT_TIMEOUT_MS;
  const backend = options.backend ?? (await defaultBackend());
  const store = await TcpStoreClient.connectFromEnv({ timeoutMs });
  let comm: Comm;
  try {
    comm = await createComm({
      backend,
      rank: place.rank,
      worldSize: place.worldSize,
      localRank: place.localRank,
      localWorldSize: place.localWorldSize,
      store,
      timeoutMs,
      lanes: options.lanes ?? DEFAULT_LANES,
    });
  } catch (err) {
    await store.close();
    throw err;
  }
  // The store outlives every backend's own use of it; the caller's one close() ends both.
  const closeComm = comm.close.bind(comm);
  let closing: Promise<void> | undefined;
  comm.close = () =>
    (closing ??= (async () => {
      try {
        await closeComm();
      } finally {
        await store.close();
      }
    })());
  return comm;
}
