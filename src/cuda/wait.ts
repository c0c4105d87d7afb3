// Host-side bounded wait for a device event: spin briefly (short collectives finish in microseconds),
// then sleep in small steps so a long wait costs no CPU.
import type { CudaEvent } from './device.js';

const nap = new Int32Array(new SharedArrayBuffer(4));

export function waitForEvent(event: CudaEvent, limitMs: number): boolean {
  const start = performance.now();
  for (let i = 0; i < 2000; i++) if (event.query()) return true;
  while (!event.query()) {
    if (performance.now() - start > limitMs) return event.query();
    Atomics.wait(nap, 0, 0, 0.05);
  }
  return true;
}
