// Runs W ranks as worker threads of this process (SPMD): every thread builds its communicator,
// calls the same exported rank function, and the main thread brokers their rendezvous store.
import { statSync } from 'node:fs';
import { isAbsolute } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { MessageChannel, Worker } from 'node:worker_threads';
import { defaultBackend } from '../backends/create.js';
import { useEveryHardwareQueue } from '../cuda/hardware-queues.js';
import { checkCpuWorld } from '../backends/cpu/world.js';
import { RankExitedError, shown, UsageError } from '../errors.js';
import { reviveError, unsendable } from './error-transfer.js';
import { checkRankOptions } from './options.js';
import { DEFAULT_LANES, DEFAULT_TIMEOUT_MS, RANK_THREAD, type RunRanksOptions } from './ranks.js';
import { ThreadStoreBroker } from './thread-store.js';
import { createDriverTrace, describeDriverTrace, watchDriverTrace } from '../cuda/driver-trace.js';
import { driverTraceOn } from '../knobs.js';
import type { RankThreadInit, RankThreadMessage } from './thread-worker.js';

/**
 * After one rank fails, how long the others get to finish on their own (they usually fail next,
 * with a timeout naming the failed rank) before they are terminated.
 */
const GRACE_MS = 500;

/** The error runRanks rejects with: the failed rank's own error, rebuilt, plus the rank. */
export type RankFailure = Error & { failedRank: number };

/**
 * Calls `module`'s export `exportName(comm, arg, ctx)` on `opts.ranks` worker threads (backend: as
 * given, else cuda where a GPU is visible and cpu otherwise, as init() picks) and returns
 * the results in rank order. If a rank throws, rejects with that error (same class and fields,
 * message starting "rank R failed: ", `failedRank` set) once every thread has ended. `arg`, each
 * result and each report cross threads by structured clone: one that cannot is a UsageError naming
 * it (the argument's before any thread starts), with the DataCloneError as `cause`.
 */
export async function runRanks<A, R>(opts: RunRanksOptions, module: URL | string, exportName: string, arg: A): Promise<R[]> {
  // The module given to runRanks is imported by every rank: a top-level call in it would start
  // ranks again in each, threads without end.
  const inRank = (globalThis as Record<symbol, unknown>)[RANK_THREAD];
  if (inRank !== undefined) {
    throw new UsageError(`runRanks: called in rank ${inRank}'s thread, which imports the module given to runRanks; a top-level runRanks call there starts ranks again in every rank (guard it with isMainThread from node:worker_threads, or give the ranks a module of their own)`);
  }
  checkRankOptions('runRanks', opts, ['backend', 'ranks', 'timeoutMs', 'lanes', 'onReport']);
  const ranks = opts.ranks;
  if (!Number.isInteger(ranks) || ranks < 1) throw new UsageError(`runRanks: ranks must be a positive integer, got ${shown(ranks)}`);
  checkSendable(arg, exportName);
  const moduleUrl = moduleHref(module);
  checkModuleFile(moduleUrl, module);
  // Ranks sharing a GPU each drive their own streams (hardware-queues.ts says why they need a queue
  // each). Set here, before the rank threads or the default backend's probe start the driver.
  if ((opts.backend ?? 'cuda') === 'cuda') useEveryHardwareQueue();
  const backend = opts.backend ?? (await defaultBackend(null));
  // Before any thread starts: past the cap each thread would fail (or exhaust memory) on its own.
  if (backend === 'cpu') checkCpuWorld(ranks);
  const broker = new ThreadStoreBroker();
  const driverTrace = backend === 'cuda' && driverTraceOn() ? createDriverTrace(ranks) : undefined;
  // Loaded only here: the driver's binding is not needed to run ranks on the cpu backend.
  const names = driverTrace ? (await import('../cuda/driver.js')).driverFunctionNames : [];
  const printTrace = driverTrace && (() => void process.stderr.write(`a2av: each rank's driver calls when the first rank failed (A2AV_DRIVER_TRACE):\n${describeDriverTrace(driverTrace, names)}\n`));
  const run = new RankRun<R>(ranks, opts.onReport, printTrace);
  const stopWatch = driverTrace && watchDriverTrace(driverTrace, names, (text) => void process.stderr.write(text));
  const workers: Worker[] = [];
  try {
    for (let rank = 0; rank < ranks; rank++) {
      const channel = new MessageChannel();
      broker.serve(channel.port1);
      const init: RankThreadInit = {
        backend,
        rank,
        worldSize: ranks,
        timeoutMs: opts.timeoutMs ?? DEFAULT_TIMEOUT_MS,
        lanes: opts.lanes ?? DEFAULT_LANES,
        moduleUrl,
        exportName,
        arg,
        storePort: channel.port2,
        driverTrace,
      };
      const worker = new Worker(new URL('./thread-worker.js', import.meta.url), { workerData: init, transferList: [channel.port2] });
      workers.push(worker);
      run.watch(rank, worker);
    }
    await run.decided;
  } catch (err) {
    run.fail(-1, err as Error);
  } finally {
    stopWatch?.();
    await run.finish(workers);
    broker.close();
  }
  return run.outcome();
}

/** Bookkeeping of one runRanks call: results, the first failure, and when to give up on the rest. */
class RankRun<R> {
  #results: R[];
  #pending: number;
  #failure: RankFailure | undefined;
  #onReport: RunRanksOptions['onReport'];
  #allEnded!: () => void;
  #decide!: () => void;
  /** Every rank has ended. */
  readonly ended: Promise<void>;
  /** Every rank has ended, or one has failed: the outcome is known. */
  readonly decided: Promise<void>;

  readonly #onFailure: (() => void) | undefined;

  constructor(ranks: number, onReport: RunRanksOptions['onReport'], onFailure?: () => void) {
    this.#onFailure = onFailure;
    this.#results = new Array<R>(ranks);
    this.#pending = ranks;
    this.#onReport = onReport;
    this.ended = new Promise((resolve) => (this.#allEnded = resolve));
    this.decided = new Promise((resolve) => (this.#decide = resolve));
  }

  watch(rank: number, worker: Worker): void {
    let done = false;
    const end = (): void => {
      if (done) return;
      done = true;
      if (--this.#pending === 0) {
        this.#allEnded();
        this.#decide();
      }
    };
    worker.on('message', (msg: RankThreadMessage) => {
      if (msg.type === 'report') return this.#report(rank, msg.message);
      if (msg.type === 'result') this.#results[rank] = msg.value as R;
      else this.fail(rank, reviveError(msg.error));
      end();
    });
    worker.on('error', (err) => {
      this.fail(rank, err);
      end();
    });
    worker.on('exit', (code) => {
      if (!done) this.fail(rank, new RankExitedError(rank, code));
      end();
    });
  }

  fail(rank: number, err: Error): void {
    if (this.#failure !== undefined) {
      // Under A2AV_DRIVER_TRACE the later failures too: where each rank's own wait ended.
      if (this.#onFailure) process.stderr.write(`a2av: rank ${rank} failed too: ${err.message}\n`);
      return;
    }
    const failure = err as RankFailure;
    // Named once: errors of the rank's own communicator already start with "rank R: ".
    if (rank >= 0) {
      const was = failure.message;
      failure.message = `rank ${rank} failed: ${was.replace(new RegExp(`^rank ${rank}: `), '')}`;
      // The stack's first lines are the old message: an uncaught rejection prints the stack, not the message.
      const stack = failure.stack;
      if (typeof stack === 'string' && was !== '' && stack.includes(was)) failure.stack = stack.replace(was, () => failure.message);
    }
    failure.failedRank = rank;
    this.#failure = failure;
    this.#onFailure?.();
    this.#decide();
  }

  /** Gives the other ranks GRACE_MS to end after a failure, then terminates what is left. */
  async finish(workers: Worker[]): Promise<void> {
    if (this.#failure !== undefined && this.#pending > 0) {
      let timer: NodeJS.Timeout | undefined;
      await Promise.race([this.ended, new Promise((r) => (timer = setTimeout(r, GRACE_MS)))]);
      clearTimeout(timer);
    }
    await Promise.all(workers.map((w) => w.terminate()));
  }

  #reportFailed = false;

  outcome(): R[] {
    if (this.#failure !== undefined) throw this.#failure;
    return this.#results;
  }

  #report(rank: number, message: unknown): void {
    try {
      this.#onReport?.(rank, message);
    } catch (err) {
      // A broken progress callback must not take the run down with it, but is said, once.
      if (!this.#reportFailed) process.stderr.write(`a2av: runRanks' onReport threw (later reports go to it still, unsaid): ${err instanceof Error ? err.stack ?? err.message : String(err)}\n`);
      this.#reportFailed = true;
    }
  }
}

/** Cloned once here as each rank's workerData is: otherwise the first Worker throws a bare DataCloneError. */
function checkSendable(arg: unknown, exportName: string): void {
  try {
    structuredClone(arg);
  } catch (err) {
    throw unsendable(`runRanks: the argument for '${exportName}' cannot be sent to the rank threads`, err);
  }
}

/**
 * A file: module must be a file that exists; else every rank would fail alike, with an import error
 * "imported from thread-worker.js". Its exports are left to the ranks: reading them here means
 * importing it, which runs its top-level code on the main thread too (and keeps it loaded there).
 * Other URLs (data:, node:) go to the ranks as given.
 */
function checkModuleFile(href: string, module: URL | string): void {
  if (!href.startsWith('file:')) return;
  const path = fileURLToPath(href);
  const relative = typeof module === 'string' && !module.startsWith('file:') && !isAbsolute(module)
    ? ` (a relative path is resolved against the working directory; new URL('./rank.js', import.meta.url) names a file next to the calling module)` : '';
  let isFile: boolean;
  try {
    isFile = statSync(path).isFile();
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    const why = code === 'ENOENT' || code === 'ENOTDIR' ? 'not found' : `cannot be read (${code ?? (err as Error).message})`;
    throw new UsageError(`runRanks: module ${path} ${why}${relative}`, { cause: err });
  }
  if (!isFile) throw new UsageError(`runRanks: module ${path} is not a file`);
}

function moduleHref(module: URL | string): string {
  if (module instanceof URL) return module.href;
  return /^[a-z][a-z0-9+.-]*:/i.test(module) && !/^[a-z]:[\\/]/i.test(module) ? module : pathToFileURL(module).href;
}
