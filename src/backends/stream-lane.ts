// What the backends on CUDA streams (cuda, nccl) share: a lane (its stream and rings of events),
// the handles their calls return, and handles for "everything queued on a stream so far".
import type { Handle, Lane, Stream } from './backend.js';
import type { CudaDevice, CudaEvent, CudaStream } from '../cuda/device.js';
import { UsageError } from '../errors.js';
import { checkWaitOn } from '../collectives/check.js';

/**
 * Events per ring: a handle stays valid for this many later calls on its lane. The cuda kernels
 * keep as many refused-call records per lane (A2AV_STATUS_RING in kernels/config.cuh).
 */
export const EVENT_RING = 256;

/** What a handle needs from its communicator: a bounded host wait (a stall becomes a TimeoutError). */
export interface HostWaiter {
  readonly rank: number;
  hostWait(event: CudaEvent, what: string): void;
}

/** A ring of events; record n (n = 1, 2, ...) reuses the event of record n - size. */
export class EventRing {
  /** Records so far: the serial number of the latest. */
  count = 0;
  readonly #events: CudaEvent[] = [];

  constructor(device: CudaDevice, readonly size = EVENT_RING) {
    for (let i = 0; i < size; i++) this.#events.push(device.createEvent());
  }

  /** Records the next event on `stream`; returns its serial number. */
  record(stream: CudaStream): number {
    this.#events[this.count % this.size].record(stream);
    return ++this.count;
  }

  /** Records the next event on `stream` and returns a handle on it that reports `outcome`. */
  handle(host: HostWaiter, stream: CudaStream, what: string, outcome?: () => Error | undefined): EventHandle {
    return new EventHandle(host, this, this.record(stream), what, outcome);
  }

  expired(serial: number): boolean {
    return this.count - serial >= this.size;
  }

  event(serial: number): CudaEvent {
    return this.#events[(serial - 1) % this.size];
  }

  destroy(): void {
    for (const e of this.#events) e.destroy();
    this.#events.length = 0;
  }
}

/**
 * A point in stream order: an event of a ring, and what to report once it has passed. `outcome`
 * runs after the host wait, so it may read what the work left on the device.
 */
export class EventHandle implements Handle {
  constructor(
    readonly host: HostWaiter,
    readonly ring: EventRing,
    readonly serial: number,
    readonly what: string,
    readonly outcome?: () => Error | undefined,
  ) {}

  wait(): void {
    this.host.hostWait(this.#event(), this.what);
    const err = this.outcome?.();
    if (err !== undefined) throw err;
  }

  waitOn(stream: Stream): void {
    checkWaitOn(this.host.rank, stream);
    (stream as CudaStream).waitEvent(this.#event());
  }

  #event(): CudaEvent {
    if (this.ring.expired(this.serial)) {
      throw new UsageError(`rank ${this.host.rank}: the handle of ${this.what} expired (its event was reused after ${this.ring.size} later ones)`);
    }
    return this.ring.event(this.serial);
  }
}

/** A lane on a CUDA stream: calls queue there in issue order, each ending in an event of `done`. */
export class StreamLane implements Lane {
  readonly done: EventRing;
  readonly #forks: EventRing;

  constructor(readonly index: number, readonly stream: CudaStream, device: CudaDevice) {
    this.done = new EventRing(device);
    this.#forks = new EventRing(device);
  }

  /** Makes the lane's next work wait, on the device, for what is queued on `caller` so far. */
  follow(caller: CudaStream | undefined): void {
    if (caller === undefined || caller === this.stream) return;
    this.stream.waitEvent(this.#forks.event(this.#forks.record(caller)));
  }

  /** Records the end of the work just queued on the lane; the handle reports `outcome`. */
  finish(host: HostWaiter, what: string, outcome?: () => Error | undefined): EventHandle {
    return this.done.handle(host, this.stream, what, outcome);
  }

  lastEvent(): CudaEvent {
    return this.done.event(this.done.count);
  }

  release(device: CudaDevice): void {
    this.done.destroy();
    this.#forks.destroy();
    device.destroyStream(this.stream);
  }
}
