// How many ranks the cpu backend takes, checked before any thread, process or memory is started.
import { UsageError } from '../../errors.js';

/**
 * The cuda backend's limit (MAX_WORLD in ../cuda/layout.ts: its payload matrix must fit an SM's
 * shared memory), kept equal so a job that runs on cpu also runs on GPUs; tests/library-refusals.test.ts
 * holds the two in step. Defined here because layout.ts reads A2AV_PROBE_DEFINES as it loads, which
 * the cpu path has no business doing. Unbounded, the cpu backend failed late: 1000 ranks timed out
 * in set-up, 100000 ran out of memory after a minute.
 */
export const MAX_CPU_WORLD = 160;

export function checkCpuWorld(worldSize: number): void {
  if (worldSize > MAX_CPU_WORLD) throw new UsageError(`cpu backend supports at most ${MAX_CPU_WORLD} ranks, got ${worldSize}`);
}
