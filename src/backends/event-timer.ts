// Device-event timing and host-wait bounds shared by the backends that run on CUDA streams (cuda, nccl).
import type { CudaDevice, CudaEvent, CudaStream } from '../cuda/device.js';

/** How long a host wait for `calls` calls may take before it is a timeout: generous, never unbounded. */
export function hostWaitLimitMs(timeoutMs: number, calls: number): number {
  return timeoutMs * 1.5 * Math.max(1, calls / 16) + 5000;
}

/**
 * A start and an end event, reused by every timed loop. Made with the communicator, not at the first
 * loop: by then a peer's kernel may spin on this rank, and making driver objects meanwhile is what
 * has stalled ranks before.
 */
export class EventTimer {
  #events: [CudaEvent, CudaEvent] | undefined;

  constructor(readonly device: CudaDevice) {
    this.#events = [device.createEvent(true), device.createEvent(true)];
  }

  /**
   * Comm.timeLoop's device side: `leadIn` untimed calls, then `iters` timed ones on `stream`;
   * `wait` blocks until the end event (bounded by the caller). Returns ms between the events.
   */
  time(stream: CudaStream, iters: number, fn: () => void, leadIn: number, wait: (end: CudaEvent, calls: number) => void): number {
    this.#events ??= [this.device.createEvent(true), this.device.createEvent(true)];
    const [start, end] = this.#events;
    for (let i = 0; i < leadIn; i++) fn();
    start.record(stream);
    for (let i = 0; i < iters; i++) fn();
    end.record(stream);
    wait(end, iters + leadIn);
    return end.elapsedSince(start);
  }

  destroy(): void {
    for (const e of this.#events ?? []) e.destroy();
    this.#events = undefined;
  }
}
