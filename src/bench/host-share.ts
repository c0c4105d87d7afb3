// cpu ranks run on the host's cores, beside each other and whatever else the host runs: a rank
// that sleeps in a wait wakes late when its core is taken, and small sizes then time 100x slower.
// Every cpu result records the cores and the load at its start; its table's note (table.ts
// hostShareNote) says when either makes its times depend on the scheduler.
import { availableParallelism, loadavg } from 'node:os';

export interface HostShare {
  /** The host's cores. */
  cores: number;
  /** The host's 1-minute load average when the run started, before its ranks ran. */
  load: number;
}

/** The host's share for a cpu run, read before its ranks start; nothing for a GPU backend. */
export function hostShare(backend: string): Partial<HostShare> {
  return backend === 'cpu' ? { cores: availableParallelism(), load: Math.round(loadavg()[0] * 100) / 100 } : {};
}
