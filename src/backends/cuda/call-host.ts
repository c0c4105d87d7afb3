// What the cuda backend's collectives beside allToAllV (moe.ts, all-reduce.ts) need from their
// communicator: one object, so each call queues, numbers and reports itself as allToAllV's do.
import type { Handle, Stream } from '../backend.js';
import type { CudaDevice } from '../../cuda/device.js';
import type { GpuBuffer } from '../gpu-memory.js';
import type { CudaLane } from './lane.js';

export interface CallHost {
  readonly rank: number;
  readonly worldSize: number;
  readonly laneCount: number;
  /** Ranks sharing this GPU: their kernels wait on each other, so all must be resident at once. */
  readonly ranksOnDevice: number;
  readonly timeoutMs: number;
  readonly device: CudaDevice;
  /** The signal pad (symmetric: its peer table). */
  pad(): GpuBuffer;
  /** Makes room on the lane (pacing.ts), then orders it after `stream` (or the capture's), as allToAllV does. */
  follow(lane: CudaLane, stream: Stream | undefined): void;
  /** Ends the call just queued on the lane: its handle. */
  finish(lane: CudaLane, what: string): Handle;
  /** Throws CommAbortedError after a timeout. */
  usable(): void;
  /** Whether a capture() is running its closure. */
  capturing(): boolean;
}
