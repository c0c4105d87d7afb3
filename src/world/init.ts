// A rank's communicator when every rank is a process of its own (a2av launch, torchrun, srun,
// mpirun): where this process sits comes from the launcher's variables, the peers are met through
// the job's TCP store, and the communicator owns that store connection.
import { ABORTED, type BackendName, type Comm } from '../backends/backend.js';
import { createComm, defaultBackend } from '../backends/create.js';
import { StoreError, TimeoutError, UsageError } from '../errors.js';
import { jobId, rankEnv, STORE_PORT_ENV, storePort, STORE_TOKEN_ENV, storeToken } from './env.js';
import { recordUncaughtErrors } from './exit-record.js';
import { LauncherWatch, removeLauncherLeftovers } from './launcher-watch.js';
import { checkRankOptions } from './options.js';
import { DEFAULT_LANES, DEFAULT_TIMEOUT_MS } from './ranks.js';
import { sameStart, StaleStore, startKey, type Start } from './same-start.js';
import { scopedStore } from './store.js';
import { startWaitMs } from './set-up-waits.js';
import { StoreServerThread } from './store-server-thread.js';
import { storeAddress, TcpStoreClient } from './tcp-store.js';

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
      `start it with a2av launch -n N -- <command>, or torchrun/srun/mpirun with MASTER_ADDR, ${STORE_PORT_ENV} (rank 0 serves the store there) and ${STORE_TOKEN_ENV} set, ` +
      'or run ranks as threads with runRanks()');
  }
  recordUncaughtErrors();
  const timeoutMs = options.timeoutMs ?? DEFAULT_TIMEOUT_MS;
  const backend = options.backend ?? (await defaultBackend());
  const lanes = options.lanes ?? DEFAULT_LANES;
  const start = { worldSize: place.worldSize, backend, lanes, timeoutMs };
  // Refused here, before the count below: a call refused on this rank alone is one it has not made.
  checkServing(place);
  // Every rank calls init() as often: the count keys this one's exchanges apart from an earlier
  // communicator's over the same store (a launcher's outlives each).
  const generation = inits++;
  const scope = initScope(generation);
  const served = await serveStore(place);
  const launched = servedByOwnLauncher();
  let store: TcpStoreClient;
  try {
    store = await meetAtStore(place.rank, scope, start, served !== undefined);
  } catch (err) {
    await servedUntilPeersFail(served, err, timeoutMs);
    // The launcher's store gone before the watch could start (init's first exchange): the launcher
    // is gone, and nothing else will remove what it would have.
    if (launched && launcherGone(err)) removeLauncherLeftovers();
    throw err;
  }
  // Watched from before the communicator is made: a launcher SIGKILLed while its ranks load a
  // driver or compile kernels leaves them as orphaned as after.
  let watch: LauncherWatch | undefined;
  let comm: Comm;
  try {
    if (launched) watch = await LauncherWatch.start(place.rank, timeoutMs, store);
    comm = await createComm({
      backend,
      rank: place.rank,
      worldSize: place.worldSize,
      localRank: place.localRank,
      localWorldSize: place.localWorldSize,
      store: scopedStore(store, `${scope}/`),
      timeoutMs,
      lanes,
    });
  } catch (err) {
    await watch?.close();
    await store.close();
    await servedUntilPeersFail(served, err, timeoutMs);
    // The launcher gone before the watch was up: nothing else will remove what it would have.
    if (launched && launcherGone(err)) removeLauncherLeftovers();
    throw err;
  }
  // The store outlives every backend's own use of it; the caller's one close() ends both.
  const atStorePort = storePort() !== undefined;
  if (atStorePort) openAtStorePort++;
  const closeComm = comm.close.bind(comm);
  let closing: Promise<void> | undefined;
  comm.close = () =>
    (closing ??= (async () => {
      try {
        // Read before close(), which replaces it: a rank a timeout named has died or hung, and will not say it left.
        const cause = comm[ABORTED]?.();
        const gone = cause instanceof TimeoutError ? cause.missingRank : -1;
        await closeComm();
        if (served !== undefined) {
          // A peer's next init() finds no store until this process serves its next one, rather than this one, closing.
          await served.stopAccepting();
          // With the set-up floor: a peer slower than timeoutMs may still be reading its last set-up exchange from this store.
          await othersLeft(store, `${scope}/left`, place.worldSize, startWaitMs(timeoutMs), gone);
        }
        // Only rank 0's own store waits for this (a2av launch's outlives every rank). Past the
        // communicator's close, a store already gone only means nobody waits for it; nor does a
        // rank 0 this rank's timeout named (hung, its store with it: the word would wait out the floor).
        else if (storePort() !== undefined && gone !== 0) await store.set(`${scope}/left/${place.rank}`, new Uint8Array(1)).catch(() => {});
      } finally {
        await watch?.close();
        await store.close();
        await served?.close();
        if (atStorePort) openAtStorePort--;
      }
    })());
  return comm;
}

/** init() calls made in this process. */
let inits = 0;
/** Communicators of this process open on a store at A2AV_STORE_PORT (rank 0's). */
let openAtStorePort = 0;

/** The store keys of every rank's `generation`-th init() (its first is 0) begin so. */
export function initScope(generation: number): string {
  return `a2av/init/${generation}`;
}

/** The key a rank sets as it joins its `generation`-th init() (same-start.ts): a launcher reads it. */
export function joinedKey(generation: number, rank: number): string {
  return startKey(initScope(generation), rank);
}

/**
 * Connects to the job's store and compares how the ranks were started (same-start.ts), with the
 * set-up floor on both: rank 0's store (A2AV_STORE_PORT) is up only once its process has started,
 * and a launcher's answers the ranks as they all start at once. Where rank 0 serves the store and
 * this is a later init(), the store reached may be rank 0's last one, still closing: it goes away
 * before rank 0 took part, and this rank connects again, to the next.
 */
async function meetAtStore(rank: number, scope: string, start: Start, serves: boolean): Promise<TcpStoreClient> {
  const floorMs = startWaitMs(start.timeoutMs);
  const deadline = Date.now() + floorMs;
  for (;;) {
    const left = Math.max(1, deadline - Date.now());
    let store: TcpStoreClient;
    try {
      store = await TcpStoreClient.connectFromEnv({ timeoutMs: floorMs, connectTimeoutMs: left, servedBy: storeServer(rank), listenedBefore: servedByOwnLauncher() });
    } catch (err) {
      // Reset while authenticating: rank 0's last store stopped taking connections with this one queued.
      if (!(err instanceof StoreError && err.reason === 'disconnected' && storePort() !== undefined && rank !== 0 && Date.now() < deadline)) throw err;
      await new Promise((resolve) => setTimeout(resolve, 20));
      continue;
    }
    try {
      await sameStart(store, scope, rank, start, serves, deadline);
      // Rank 0's store waits for each peer's word that it left (close()); one that dies says it
      // too, through the store, which sees its connection end, rather than rank 0 waiting out the floor.
      if (storePort() !== undefined && rank !== 0) await store.setOnClose(`${scope}/left/${rank}`, new Uint8Array(1));
      return store;
    } catch (err) {
      await store.close();
      if (!(err instanceof StaleStore)) throw err;
      if (storePort() === undefined || Date.now() >= deadline) throw err.lost;
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
  }
}

/**
 * Whether this rank's store is served by the a2av launch that started it (node 0's, or a single
 * node's): that store closes only after every one of its ranks has exited, so a connection lost
 * before means the launcher itself is gone. (Ranks on other nodes reach node 0's launcher, which
 * ends with its own ranks; torchrun's and rank 0's stores say nothing about a launcher.)
 */
function servedByOwnLauncher(env: NodeJS.ProcessEnv = process.env): boolean {
  return jobId(env) !== undefined && storePort(env) === undefined && (env.GROUP_RANK ?? '0') === '0';
}

/**
 * Whether a set-up error says a2av launch's store is gone: its connection closed, or its port
 * refusing (it listens before it starts a rank). Not a client's own trouble (EMFILE and the like),
 * after which removing the job's files would break a job still running.
 */
function launcherGone(err: unknown): boolean {
  if (!(err instanceof StoreError)) return false;
  return err.reason === 'disconnected' || (err.reason === 'unreachable' && (err.cause as NodeJS.ErrnoException | undefined)?.code === 'ECONNREFUSED');
}

/** Who serves the job's store, as this rank's errors name it when the connection is lost. */
function storeServer(rank: number, env: NodeJS.ProcessEnv = process.env): string | undefined {
  if (storePort(env) !== undefined) return rank === 0 ? undefined : `rank 0 (${STORE_PORT_ENV})`;
  if (jobId(env) === undefined) return undefined;
  return (env.GROUP_RANK ?? '0') === '0' ? 'a2av launch' : 'node 0\'s a2av launch';
}

/** What reaching (and on rank 0, serving) the store needs, refused on this rank before init() counts the call. */
function checkServing(place: { rank: number; masterAddr: string | undefined }): void {
  const port = storePort();
  if (port !== undefined && place.rank === 0 && (place.masterAddr === undefined || storeToken() === undefined)) {
    throw new UsageError(`${STORE_PORT_ENV}: rank 0 serves the job's store at MASTER_ADDR with ${STORE_TOKEN_ENV}; set both`);
  }
  // Rank 0 serves one store at a time there, so no rank can make a second communicator beside its first.
  if (port !== undefined && openAtStorePort > 0) {
    throw new UsageError(`${STORE_PORT_ENV}: this process has a communicator open on the job's store at port ${port} already: close() it before init() again (rank 0 serves one store at a time there; under a2av launch, whose store outlives each, several communicators may be open)`);
  }
  storeAddress();
}

/**
 * Rank 0's store, where A2AV_STORE_PORT asks for it (no a2av launch serves one): bound on
 * MASTER_ADDR, as a2av launch binds its own, in a thread of its own (store-server-thread.ts says
 * why). The others retry their connection until it is up.
 */
async function serveStore(place: { rank: number; masterAddr: string | undefined }): Promise<StoreServerThread | undefined> {
  const port = storePort();
  if (port === undefined || place.rank !== 0) return undefined;
  return StoreServerThread.start({ token: storeToken()!, host: place.masterAddr!, port }).catch((err: unknown) => {
    // Another rank 0 of this job is as likely there as an earlier job's store.
    if (err instanceof StoreError && /EADDRINUSE/.test(err.message)) throw new StoreError(err.op, err.key, err.reason, `${err.message}; or another process of this job was started as rank 0 too`, { cause: err });
    throw err;
  });
}

/**
 * Closes rank 0's store after its set-up failed. After a timeout (a rank missing) it waits first,
 * bounded, for its peers to leave it: they wait for the same rank, often till later (they started
 * later), and a store gone before would have them blame rank 0 instead.
 */
async function servedUntilPeersFail(served: StoreServerThread | undefined, err: unknown, timeoutMs: number): Promise<void> {
  if (served === undefined) return;
  if (err instanceof TimeoutError) await served.idle(startWaitMs(timeoutMs));
  await served.close();
}

/** Rank 0 keeps its store up until every other rank has closed (bounded: a rank that died never says so; `gone`, one its timeout named, is not waited for). */
async function othersLeft(store: TcpStoreClient, key: string, worldSize: number, timeoutMs: number, gone: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (let r = 1; r < worldSize; r++) {
    if (r === gone) continue;
    try {
      await store.get(`${key}/${r}`, Math.max(1, deadline - Date.now()));
    } catch {
      return;
    }
  }
}
