// A rank's watch on the a2av launch that started it, from a worker thread: a launcher that is
// SIGKILLed cannot stop its ranks or clean up after them, and its ranks learn it only from the
// store it served closing. The rank's main thread may be blocked for as long as its timeout (a cpu
// collective, a host wait on the GPU) or for good (compute), so the watch has a thread and a store
// connection of its own. Run as the worker, this module watches; imported, it starts and stops it.
import { rmSync, writeSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { basename, dirname } from 'node:path';
import { isMainThread, parentPort, Worker, workerData } from 'node:worker_threads';
import { jobId, launchGraceMs } from './env.js';
import { ERROR_FILE_ENV, LAUNCH_DIR_PREFIX } from './exit-record.js';
import { startWaitMs } from './set-up-waits.js';
import { removeShmFiles } from './shm-files.js';
import { StoreError } from '../errors.js';
import { TcpStoreClient } from './tcp-store-client.js';

/** Names this module's own worker's data (the module is also imported where no watch is wanted). */
const MARK = 'a2avLauncherWatch';

/** States of the word both threads share: watching, one thread stopping the rank, done stopping it, closed. */
const ACTIVE = 0;
const STOPPING = 1;
const DONE = 2;
/** The communicator closed: its launcher may go as it likes. */
const CLOSED = 3;

type Reply = { watching: true } | { failed: string; code?: string };

/**
 * After SIGTERM, how long this rank's process group has before SIGKILL, sent from the watch if the
 * process is still there: the launcher's own grace (A2AV_LAUNCH_GRACE_MS), else its default.
 */
const ORPHAN_GRACE_MS = launchGraceMs(5000);

export class LauncherWatch {
  readonly #worker: Worker;
  readonly #once: Int32Array;

  private constructor(worker: Worker, once: Int32Array) {
    this.#worker = worker;
    this.#once = once;
  }

  /**
   * Starts watching once the watch's own connection to the launcher's store is up; a failure to
   * connect is thrown. `store` is the main thread's connection: its loss is acted on too, where the
   * main thread sees it first (a rank whose pending store call then fails may exit before the
   * worker has stopped its group).
   */
  static async start(rank: number, timeoutMs: number, store: TcpStoreClient): Promise<LauncherWatch> {
    // Whichever thread sees the launcher go first acts; the other does nothing.
    const once = new Int32Array(new SharedArrayBuffer(4)); // ACTIVE
    const worker = new Worker(new URL(import.meta.url), { workerData: { [MARK]: { rank, timeoutMs, once } } });
    const reply = await new Promise<Reply>((resolve, reject) => {
      worker.once('message', resolve);
      worker.once('error', reject);
      worker.once('exit', (code) => reject(new Error(`the launcher watch's thread exited (code ${code}) before it watched`)));
    });
    if ('failed' in reply) {
      await worker.terminate();
      // A StoreError as the main thread's own connection would fail: init() tells the launcher gone by it.
      const cause = Object.assign(new Error(reply.failed), { code: reply.code });
      throw new StoreError('connect', undefined, 'unreachable', `rank ${rank}: cannot watch the launcher's store: ${reply.failed}`, { cause });
    }
    // The watch must not keep the rank's process alive.
    worker.unref();
    store.onLost((err) => stopOrphaned(rank, err, once));
    return new LauncherWatch(worker, once);
  }

  /** Stops watching (the rank's communicator is closed: the launcher may go as it likes). */
  async close(): Promise<void> {
    // Only a watch that is still watching ends here. One already stopping this rank (the launcher
    // went, and the program closes its communicator on the way out) keeps its thread, unref'd, for
    // the SIGKILL after the grace: that timer is all that keeps the thread alive.
    if (Atomics.compareExchange(this.#once, 0, ACTIVE, CLOSED) === ACTIVE) await this.#worker.terminate();
  }
}

/** The launcher is gone: say so, clean up as it would have, and stop this rank's process group. */
function stopOrphaned(rank: number, err: Error, once: Int32Array): void {
  const was = Atomics.compareExchange(once, 0, ACTIVE, STOPPING);
  if (was === CLOSED) return;
  // The SIGKILL after the grace, from the worker, which sees the launcher go as well: a timer on the
  // main thread would not fire while it is blocked, and one the worker leaves unref'd would end
  // with the worker (nothing else keeps it) where the program outlives its SIGTERM (it handles it).
  if (!isMainThread) setTimeout(() => signalGroup('SIGKILL'), ORPHAN_GRACE_MS);
  if (was !== ACTIVE) {
    // The other thread is at it. A main thread that went on could end the process (a store call
    // failing with the connection) before the worker has stopped the group: it waits for that, briefly.
    if (isMainThread) Atomics.wait(once, 0, STOPPING, ORPHAN_GRACE_MS);
    return;
  }
  try {
    // Written straight to the file: the main thread, which forwards a worker's stderr, may be blocked.
    writeSync(2, `a2av: rank ${rank}: the launcher is gone (${err.message}), so nothing will stop this job's ranks: stopping this one\n`);
  } catch {
    // EPIPE: stderr was the launcher's pipe, gone with it.
  }
  // Nor clean up after them: each rank removes what the launcher would have (it may die of the SIGTERM).
  removeLauncherLeftovers(process.env);
  // The launcher gave each rank a process group: what the rank started goes too, as the launcher would have seen to.
  signalGroup('SIGTERM');
  Atomics.store(once, 0, DONE);
  Atomics.notify(once, 0);
}

/** What a2av launch removes after its ranks: the job's shared-memory files and its folder of exit records. */
export function removeLauncherLeftovers(env: NodeJS.ProcessEnv = process.env): void {
  const job = jobId(env);
  try {
    if (job !== undefined) removeShmFiles(job);
    const file = env[ERROR_FILE_ENV];
    const records = file === undefined ? undefined : dirname(file);
    // Only a folder as a2av launch makes them (mkdtemp in the temp folder): never one an inherited variable points elsewhere.
    if (records !== undefined && basename(records).startsWith(LAUNCH_DIR_PREFIX) && dirname(records) === tmpdir()) rmSync(records, { recursive: true, force: true });
  } catch {
    // Best effort on the way out: the rank is stopping either way.
  }
}

function signalGroup(signal: NodeJS.Signals): void {
  try {
    process.kill(0, signal);
  } catch {
    // ESRCH: the group is gone already.
  }
}

async function watch(rank: number, timeoutMs: number, once: Int32Array, port: NonNullable<typeof parentPort>): Promise<void> {
  let store: TcpStoreClient;
  try {
    // The launcher listened before it started this rank: a refusal means it has gone (not yet up, never).
    store = await TcpStoreClient.connectFromEnv({ timeoutMs: startWaitMs(timeoutMs), connectTimeoutMs: startWaitMs(timeoutMs), servedBy: 'a2av launch', listenedBefore: true });
  } catch (err) {
    const code = ((err as Error).cause as NodeJS.ErrnoException | undefined)?.code;
    port.postMessage({ failed: (err as Error).message, ...(code === undefined ? {} : { code }) } satisfies Reply);
    return;
  }
  store.onLost((err) => stopOrphaned(rank, err, once));
  port.postMessage({ watching: true } satisfies Reply);
}

const asked = isMainThread ? undefined : ((workerData as Record<string, unknown> | null)?.[MARK] as { rank: number; timeoutMs: number; once: Int32Array } | undefined);
if (asked !== undefined && parentPort !== null) void watch(asked.rank, asked.timeoutMs, asked.once, parentPort);
