// The one place the pipeline reaches past the Comm interface. Its compute runs on the
// communicator's own buffers and streams (the collectives' inputs and outputs are the kernels'
// too), and Comm gives neither a buffer's address nor its host memory: here they are taken from
// the backends' buffer classes, read only.
import type { DeviceBuffer, Stream } from '../backends/backend.js';
import { CpuBuffer } from '../backends/cpu/buffer.js';
import { GpuBuffer } from '../backends/gpu-memory.js';
import { CudaStream } from '../cuda/device.js';
import { UsageError } from '../errors.js';

/** The bytes of a cpu backend's buffer, in place (shared memory: no copy). */
export function hostBytes(buf: DeviceBuffer): Uint8Array {
  if (!(buf instanceof CpuBuffer)) throw new UsageError('pipeline: a cpu compute was given a buffer of another backend');
  return buf.u8;
}

/** The device address of a cuda or nccl backend's buffer. */
export function devicePointer(buf: DeviceBuffer): bigint {
  if (!(buf instanceof GpuBuffer)) throw new UsageError('pipeline: a GPU compute was given a buffer of another backend');
  return buf.ptr;
}

/** The CUDA stream of a cuda or nccl backend's stream (a lane's, or one the compute made). */
export function cudaStream(stream: Stream): CudaStream {
  if (!(stream instanceof CudaStream)) throw new UsageError('pipeline: a GPU compute was given a stream of another backend');
  return stream;
}
