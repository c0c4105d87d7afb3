// Entry point of one rank's worker thread (started by runRanks in threads.ts): builds the
// communicator, runs the rank function, closes, and posts the result or the error back.
import { parentPort, workerData, type MessagePort } from 'node:worker_threads';
import { createComm } from '../backends/create.js';
import type { BackendName, Comm } from '../backends/backend.js';
import { UsageError } from '../errors.js';
import { isDataCloneError, serializeError, unsendable } from './error-transfer.js';
import type { RankContext, RankFn } from './ranks.js';
import { ThreadStoreClient } from './thread-store.js';
import { RANK_THREAD } from './ranks.js';
import { traceThisRank, type DriverTraceBuffer } from '../cuda/driver-trace.js';

/** workerData of a rank thread. */
export interface RankThreadInit {
  backend: BackendName;
  rank: number;
  worldSize: number;
  timeoutMs: number;
  lanes: number;
  moduleUrl: string;
  exportName: string;
  arg: unknown;
  storePort: MessagePort;
  /** A2AV_DRIVER_TRACE: where this rank notes its driver calls. */
  driverTrace?: DriverTraceBuffer;
}

/** Messages a rank thread posts to the main thread. */
export type RankThreadMessage =
  | { type: 'report'; message: unknown }
  | { type: 'result'; value: unknown }
  | { type: 'error'; error: ReturnType<typeof serializeError> };

const init = workerData as RankThreadInit;
// Seen by runRanks (threads.ts), through globalThis so that another copy of the package sees it too.
(globalThis as Record<symbol, unknown>)[RANK_THREAD] = init.rank;
const port = parentPort!;
const post = (msg: RankThreadMessage): void => port.postMessage(msg);

/** Posts `msg`; a value it carries that cannot be cloned is a UsageError saying which (`what`). */
function postValue(msg: RankThreadMessage, what: string): void {
  try {
    post(msg);
  } catch (err) {
    throw isDataCloneError(err) ? unsendable(`rank ${init.rank}: ${what}`, err) : err;
  }
}

async function main(): Promise<void> {
  const store = new ThreadStoreClient(init.storePort, init.timeoutMs);
  try {
    const mod = (await import(init.moduleUrl)) as Record<string, unknown>;
    const fn = mod[init.exportName];
    if (typeof fn !== 'function') throw new UsageError(`${init.moduleUrl} has no exported function '${init.exportName}'`);
    const { backend, rank, worldSize, timeoutMs, lanes } = init;
    if (init.driverTrace) traceThisRank(init.driverTrace, rank);
    const comm = await createComm({ backend, rank, worldSize, timeoutMs, lanes, store });
    const value = await runAndClose(comm, fn as RankFn);
    postValue({ type: 'result', value }, `the return value of '${init.exportName}' cannot be sent back to runRanks`);
  } catch (err) {
    post({ type: 'error', error: serializeError(err) });
  } finally {
    await store.close();
  }
}

async function runAndClose(comm: Comm, fn: RankFn): Promise<unknown> {
  const ctx: RankContext = { report: (message) => postValue({ type: 'report', message }, 'ctx.report(): the report cannot be sent to onReport') };
  let value: unknown;
  try {
    value = await fn(comm, init.arg, ctx);
  } catch (err) {
    // The rank's own error is the one worth reporting; a failure to close after it is noise.
    await comm.close().catch(() => {});
    throw err;
  }
  await comm.close();
  return value;
}

await main();
