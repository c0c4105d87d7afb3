// What a soak samples at its start and end to show that nothing grows with the number of calls:
// the process's RSS, this rank thread's JS memory after a full collection, the communicator's free
// memory (the device's on cuda) and the thread's open handles (libuv resources).
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import type { Comm } from '../../src/backends/backend.js';

// Rank threads start without --expose-gc; a context created after the flag is set gets `gc`, and
// it collects the whole isolate. Without a collection first, heap figures are mostly garbage.
setFlagsFromString('--expose-gc');
const gc = runInNewContext('gc') as () => void;

export interface MemorySample {
  /** Calls made before the sample. */
  calls: number;
  /** Resident set of the whole process (every rank thread), bytes. */
  rss: number;
  /** This thread's JS heap plus memory held outside it by JS objects (ArrayBuffers), bytes. */
  js: number;
  /** comm.freeMemory(): the device's free memory on cuda and nccl, the machine's on cpu. */
  free: number;
  /** This thread's active resources by type (process.getActiveResourcesInfo). */
  resources: string[];
}

export function sampleMemory(comm: Comm, calls: number): MemorySample {
  gc();
  gc();
  const m = process.memoryUsage();
  return { calls, rss: m.rss, js: m.heapUsed + m.external, free: comm.freeMemory(), resources: process.getActiveResourcesInfo().sort() };
}
