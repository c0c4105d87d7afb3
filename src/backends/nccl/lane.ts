// One lane of the nccl backend: its own CUDA stream and its own NCCL communicator (NCCL runs one
// communicator's operations in issue order, so independent lanes need independent communicators),
// and the device and host buffers of the split exchange.
import type { CudaDevice, CudaEvent } from '../../cuda/device.js';
import type { NcclCommunicator } from '../../nccl/communicator.js';
import { StreamLane } from '../stream-lane.js';
import { payloadWords, SplitPlan } from './plan.js';

export class NcclLane extends StreamLane {
  readonly nccl: NcclCommunicator;
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

  constructor(index: number, world: number, device: CudaDevice, nccl: NcclCommunicator) {
    super(index, device.createStream(), device);
    this.nccl = nccl;
    this.exchanged = device.createEvent();
    const words = payloadWords(world);
    this.payload = device.alloc(8 * words);
    this.gathered = device.alloc(8 * world * words);
    this.gatheredHost = new BigInt64Array(world * words);
    this.plan = new SplitPlan(world);
  }

  /** Frees what the constructor made; the communicator is the caller's to end first. */
  override release(device: CudaDevice): void {
    this.exchanged.destroy();
    device.free(this.payload);
    device.free(this.gathered);
    super.release(device);
  }
}
