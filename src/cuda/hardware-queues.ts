// The hardware queues of a CUDA context (CUDA_DEVICE_MAX_CONNECTIONS): how many a2av asks the
// driver for, and when the lanes of ranks sharing a context outnumber them. No driver here: runRanks
// uses it on the cpu backend's path too.
import { isMainThread } from 'node:worker_threads';
import { rankEnv } from '../world/env.js';

const MAX_QUEUES = 32;
const DEFAULT_QUEUES = 8;

/**
 * Ranks as threads of one process share one context, and a kernel of one rank spins until its peers'
 * kernels run. With the driver's default of 8 hardware queues, their streams share queues: a kernel
 * that waits for its stream's previous one holds the queue's head, and a peer's kernel queued behind
 * it never starts (a timeout after 30 s). The driver reads CUDA_DEVICE_MAX_CONNECTIONS once, at
 * cuInit, and only from the process's environment, which a worker thread cannot change: so cu()
 * calls this before its first cuInit, and it acts in the main thread only. A launched rank (a2av launch, torchrun, srun, mpirun)
 * keeps the default: under MPS, 32 queues per process made context creation fail.
 */
export function shareHardwareQueues(env: NodeJS.ProcessEnv = process.env, mainThread = isMainThread): void {
  if (mainThread && !launchedRank(env)) useEveryHardwareQueue(env);
}

/** The most queues the driver gives a context, unless the program chose a number itself. */
export function useEveryHardwareQueue(env: NodeJS.ProcessEnv = process.env): void {
  env.CUDA_DEVICE_MAX_CONNECTIONS ??= String(MAX_QUEUES);
}

/**
 * Why `streams` streams of ranks sharing one context (each lane of each rank; their kernels wait on
 * each other) may hold each other back: more of them than hardware queues. Undefined when they fit.
 */
export function queueShortfall(streams: number, env: NodeJS.ProcessEnv = process.env): string | undefined {
  const set = Number(env.CUDA_DEVICE_MAX_CONNECTIONS);
  const queues = Number.isInteger(set) && set > 0 ? Math.min(set, MAX_QUEUES) : DEFAULT_QUEUES;
  if (streams <= queues) return undefined;
  return (
    `${streams} lanes of ranks sharing this GPU's context over ${queues} hardware queues (CUDA_DEVICE_MAX_CONNECTIONS, at most 32): ` +
    'lanes that share a queue can hold back each other\'s kernels, and a call waiting for a peer held back that way ends in a timeout. ' +
    'Use fewer lanes or fewer ranks a GPU, or processes (a2av launch) under MPS'
  );
}

/** A rank process of a launcher (a2av launch, torchrun, srun, mpirun): one rank, maybe under MPS. */
function launchedRank(env: NodeJS.ProcessEnv): boolean {
  try {
    return rankEnv(env) !== undefined;
  } catch {
    return true; // inconsistent variables: init() names them; here, leave the driver's default
  }
}
