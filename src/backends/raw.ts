// Where compute beside the collectives (src/pipeline/, src/moe/) reaches past the Comm interface:
// its kernels and loops run on the communicator's own buffers and streams, and Comm gives neither
// a buffer's address nor its host memory. They are taken from the backends' buffer and stream
// classes, read only. `who` names the caller in errors.
import type { DeviceBuffer, Stream } from './backend.js';
import { CpuBuffer } from './cpu/buffer.js';
import { GpuBuffer } from './gpu-memory.js';
import { CudaStream } from '../cuda/device.js';
import { UsageError } from '../errors.js';

/** The bytes of a cpu backend's buffer, in place (shared memory: no copy). */
export function hostBytes(buf: DeviceBuffer, who: string): Uint8Array {
  if (!(buf instanceof CpuBuffer)) throw new UsageError(`${who}: a buffer of another backend was given to the cpu backend`);
  return buf.u8;
}

/** The device address of a cuda or nccl backend's buffer. */
export function devicePointer(buf: DeviceBuffer, who: string): bigint {
  if (!(buf instanceof GpuBuffer)) throw new UsageError(`${who}: a buffer of another backend was given to a GPU backend`);
  return buf.ptr;
}

/** The CUDA stream of a cuda or nccl backend's stream. */
export function cudaStream(stream: Stream, who: string): CudaStream {
  if (!(stream instanceof CudaStream)) throw new UsageError(`${who}: a stream of another backend was given to a GPU backend`);
  return stream;
}
