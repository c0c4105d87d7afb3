// A rank program run the way the process was started: under a launcher (a2av launch, torchrun,
// srun, mpirun) this process is one rank, whose communicator init() builds; otherwise the ranks are
// threads of this process (runRanks). The benchmark commands share this.
import type { BackendName } from '../backends/backend.js';
import { UsageError } from '../errors.js';
import { rankEnv } from './env.js';
import { init } from './init.js';
import type { RankFn } from './ranks.js';
import { runRanks } from './threads.js';

export interface JobOptions {
  /** Default: as runRanks and init() pick. */
  backend?: BackendName;
  ranks: number;
  timeoutMs?: number;
  /** Lanes of each rank's communicator (default: init()'s). */
  lanes?: number;
  /** Rank 0's reports (RankContext.report), in this process either way. */
  onReport?: (rank: number, message: unknown) => void;
}

/**
 * Runs export `name` of module `program` on every rank. Returns this process's rank and its
 * result: rank 0's with threads; under a launcher, this rank's (its own, whichever rank it is).
 */
export async function runJob<A, R>(opts: JobOptions, program: URL, name: string, arg: A): Promise<{ rank: number; result: R }> {
  const env = rankEnv();
  if (env === undefined) {
    const [result] = await runRanks<A, R>({ backend: opts.backend, ranks: opts.ranks, timeoutMs: opts.timeoutMs, lanes: opts.lanes, onReport: opts.onReport }, program, name, arg);
    return { rank: 0, result: result! };
  }
  if (opts.ranks !== env.worldSize) throw new UsageError(`${opts.ranks} ranks asked for, but the launcher started ${env.worldSize}`);
  const fn = ((await import(program.href)) as Record<string, RankFn<A, R>>)[name];
  if (typeof fn !== 'function') throw new UsageError(`${program.href} has no export '${name}'`);
  const comm = await init({ backend: opts.backend, timeoutMs: opts.timeoutMs, lanes: opts.lanes });
  try {
    return { rank: comm.rank, result: await fn(comm, arg, { report: (m) => opts.onReport?.(comm.rank, m) }) };
  } finally {
    await comm.close();
  }
}
