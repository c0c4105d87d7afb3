// A cuda lane: a stream lane plus its region of the signal pad and the sequence number of its
// calls on the device.
import type { CudaDevice, CudaStream } from '../../cuda/device.js';
import { StreamLane } from '../stream-lane.js';
import { LanePacer } from './pacing.js';

export class CudaLane extends StreamLane {
  /**
   * The device's sequence number (kernels read it from the pad, so graph replays count too) of the
   * last call queued on this lane; eager calls add one, a replay the calls its graph holds here.
   * Kept in step because every call on the lane completes, refused or not, until a timeout aborts
   * the communicator.
   */
  seq = 0;

  /** Keeps the lane a bounded number of calls ahead of the device (pacing.ts says why). */
  readonly pacer: LanePacer;

  constructor(index: number, stream: CudaStream, readonly offset: number, device: CudaDevice) {
    super(index, stream, device);
    this.pacer = new LanePacer(device);
  }

  override release(device: CudaDevice): void {
    this.pacer.destroy();
    super.release(device);
  }
}
