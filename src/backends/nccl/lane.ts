// One lane of the nccl backend: its own CUDA stream and its own NCCL communicator (NCCL runs one
// communicator's operations in issue order, so independent lanes need independent communicators),
// the device and host buffers of the split exchange, and the lane's first unread error.
import type { Lane } from '../backend.js';
import type { CudaDevice, CudaEvent, CudaStream } from '../../cuda/device.js';
import type { NcclCommunicator } from '../../nccl/communicator.js';
import { payloadWords, SplitPlan } from './plan.js';

/** Events per lane: a handle stays valid for this many later calls on its lane. */
export const EVENT_RING = 256;

export class NcclLane implements Lane {
  readonly index: number;
  readonly stream: CudaStream;
  readonly nccl: NcclCommunicator;
  calls = 0;
  readonly done: CudaEvent[] = [];
  readonly forks: CudaEvent[] = [];
  /** Recorded after the split exchange: the host waits for it before it can queue the data. */
  readonly exchanged: CudaEvent;
  /** Device: this rank's payload (header, then its splits), and every rank's, gathered. */
  readonly payload: bigint;
  readonly gathered: bigint;
  /** Host: the header to publish, the header last uploaded (skipped when unchanged), the gathered payloads. */
  readonly header = new BigInt64Array(4);
  readonly uploadedHeader = new BigInt64Array(4).fill(-1n);
  readonly gatheredHost: BigInt64Array;
  readonly plan: SplitPlan;
  /** The first error of a call on this lane not yet read by a wait() (first error sticks). */
  pending: Error | undefined;

  constructor(index: number, world: number, device: CudaDevice, nccl: NcclCommunicator) {
    this.index = index;
    this.nccl = nccl;
    this.stream = device.createStream();
    for (let i = 0; i < EVENT_RING; i++) {
      this.done.push(device.createEvent());
      this.forks.push(device.createEvent());
    }
    this.exchanged = device.createEvent();
    const words = payloadWords(world);
    this.payload = device.alloc(8 * words);
    this.gathered = device.alloc(8 * world * words);
    this.gatheredHost = new BigInt64Array(world * words);
    this.plan = new SplitPlan(world);
  }

  /** Records `err` unless an earlier error is still unread. */
  fail(err: Error): void {
    this.pending ??= err;
  }

  /** Returns and clears the unread error. */
  take(): Error | undefined {
    const err = this.pending;
    this.pending = undefined;
    return err;
  }

  /** Frees what the constructor made; the communicator is the caller's to end first. */
  release(device: CudaDevice): void {
    for (const e of [...this.done, ...this.forks, this.exchanged]) e.destroy();
    device.free(this.payload);
    device.free(this.gathered);
    device.destroyStream(this.stream);
  }
}
