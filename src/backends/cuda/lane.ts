// A cuda lane (its stream, its ring of events) and the handle a collective on it returns.
import type { Handle, Lane, Stream } from '../backend.js';
import type { CudaDevice, CudaEvent, CudaStream } from '../../cuda/device.js';
import { UsageError } from '../../errors.js';

/** What a handle needs from its communicator. */
export interface HandleOwner {
  readonly rank: number;
  hostWait(event: CudaEvent, what: string): void;
  raiseStatus(lane: CudaLane): void;
}

/** Events per lane: a handle stays valid for this many later calls on its lane. */
export const EVENT_RING = 256;

export class CudaLane implements Lane {
  calls = 0;
  readonly done: CudaEvent[] = [];
  readonly forks: CudaEvent[] = [];
  constructor(readonly index: number, readonly stream: CudaStream, readonly offset: number, device: CudaDevice) {
    for (let i = 0; i < EVENT_RING; i++) {
      this.done.push(device.createEvent());
      this.forks.push(device.createEvent());
    }
  }
  lastEvent(): CudaEvent {
    return this.done[(this.calls - 1) % EVENT_RING];
  }
}

export class CudaHandle implements Handle {
  constructor(readonly comm: HandleOwner, readonly lane: CudaLane, readonly call: number, readonly event: CudaEvent) {}
  #check(): void {
    if (this.lane.calls - this.call > EVENT_RING)
      throw new UsageError(`rank ${this.comm.rank}: handle expired (more than ${EVENT_RING} later calls on lane ${this.lane.index})`);
  }
  wait(): void {
    this.#check();
    this.comm.hostWait(this.event, `lane ${this.lane.index} call ${this.call}`);
    this.comm.raiseStatus(this.lane);
  }
  waitOn(stream: Stream): void {
    this.#check();
    (stream as CudaStream).waitEvent(this.event);
  }
}
