// The pipeline's kernels on a GPU (cuda and nccl backends): kernels/pipeline.cu compiled with NVRTC
// through the kernel cache, launched on the rank's streams. Built in the rank's thread after its
// communicator, whose context is then current; the GPU is that context's.
import type { Stream } from '../backends/backend.js';
import { CudaDevice, type CudaEvent, type CudaStream, type HostMapped } from '../cuda/device.js';
import { KernelModule } from '../jit/module.js';
import { KernelSet } from '../jit/kernel-set.js';
import type { Clock, Ref } from './compute.js';
import { KERNEL_SPECS, type KernelName } from './kernel-args.js';
import { KernelCompute, type DeviceBlas, type KernelDevice } from './kernel-compute.js';
import { Cublas } from '../cuda/cublas.js';
import { LibraryNotFoundError } from '../errors.js';
import { cudaStream, devicePointer } from '../backends/raw.js';

/** Names this code in the errors of src/backends/raw.ts. */
const WHO = 'pipeline';

/**
 * The dense layers' GEMMs: 'cublas' (cuBLAS's sgemm, found like NCCL: A2AV_LIBCUBLAS, the loader,
 * the CUDA toolkit, NVIDIA's wheels), 'kernel' (pl_gemm, bit-exact against the cpu backend's loops),
 * or 'auto': cuBLAS where the library loads, else pl_gemm.
 */
export type GemmChoice = 'auto' | 'cublas' | 'kernel';

export function createCudaCompute(gemm: GemmChoice = 'kernel'): KernelCompute {
  const device = new CudaKernelDevice(gemm);
  const compute = new KernelCompute(device);
  try {
    compute.verifyBlas(device.memory);
  } catch (err) {
    compute.close();
    throw err;
  }
  return compute;
}

/** cuBLAS on the current context, or undefined under 'auto' where the library is not found. */
function openBlas(gemm: GemmChoice): DeviceBlas | undefined {
  if (gemm === 'kernel') return undefined;
  let cublas: Cublas;
  try {
    cublas = new Cublas();
  } catch (err) {
    if (gemm === 'auto' && err instanceof LibraryNotFoundError) return undefined;
    throw err;
  }
  return {
    name: `${cublas.name} sgemm`,
    sgemm: (stream, g) => cublas.sgemm(cudaStream(stream, WHO).handle, g),
    close: () => cublas.destroy(),
  };
}

class CudaKernelDevice implements KernelDevice {
  readonly blas: DeviceBlas | undefined;
  readonly compute: CudaStream;
  readonly data: CudaStream;
  readonly clock: EventClock;
  readonly multiprocessors: number;
  readonly scratch: bigint;
  /** Where readScratch lands the scratch: pinned, so the copy stays on its stream (host-copies.ts says why). */
  readonly #scratchHost: HostMapped;
  readonly #device: CudaDevice;
  readonly #kernels: KernelSet<KernelName>;

  constructor(gemm: GemmChoice) {
    this.#device = CudaDevice.current();
    this.#kernels = new KernelSet(new KernelModule('pipeline.cu', this.#device.arch), KERNEL_SPECS);
    this.compute = this.#device.createStream();
    this.data = this.#device.createStream();
    this.clock = new EventClock(this.#device);
    this.multiprocessors = this.#device.smCount;
    this.scratch = this.#device.alloc(8);
    this.#scratchHost = this.#device.hostMapped(8);
    try {
      this.blas = openBlas(gemm);
    } catch (err) {
      this.close();
      throw err;
    }
  }

  /** Plain device memory (verifyBlas). */
  get memory(): CudaDevice {
    return this.#device;
  }

  params(spec: KernelName): DataView {
    return this.#kernels.params(spec);
  }
  launch(spec: KernelName, kernel: string, grid: number, block: number, stream: Stream): void {
    this.#kernels.launch(spec, kernel, grid, block, cudaStream(stream, WHO));
  }
  address(ref: Ref): bigint {
    return devicePointer(ref.buf, WHO) + BigInt(ref.byte);
  }
  zero(stream: Stream, address: bigint, bytes: number): void {
    this.#device.memsetAsync(address, 0, bytes, cudaStream(stream, WHO));
  }
  readScratch(stream: Stream): Uint32Array {
    const s = cudaStream(stream, WHO);
    this.#device.downloadAsync(this.#scratchHost.host, this.scratch, 8, s);
    s.synchronize();
    return new Uint32Array(this.#scratchHost.view.slice(0, 8));
  }
  sync(stream: Stream): void {
    cudaStream(stream, WHO).synchronize();
  }

  close(): void {
    // Its own streams only: ranks sharing the GPU share the context, and their kernels are theirs.
    for (const s of [this.compute, this.data]) s.synchronize();
    this.blas?.close();
    this.clock.destroy();
    this.#device.free(this.scratch);
    this.#scratchHost.release();
    for (const s of [this.compute, this.data]) this.#device.destroyStream(s);
    this.#kernels.unload();
    this.#device.release();
  }
}

/** Timing events, one per mark, reused once released and after reset(). */
class EventClock implements Clock {
  readonly #events: CudaEvent[] = [];
  /** Ids of events not in use (any order: each is recorded afresh when taken). */
  #free: number[] = [];

  constructor(readonly device: CudaDevice) {}

  mark(stream: Stream): number {
    if (this.#free.length === 0) this.#grow(this.#events.length + 1);
    const id = this.#free.pop()!;
    this.#events[id].record(cudaStream(stream, WHO));
    return id;
  }
  micros(from: number, to: number): number {
    // Elapsed time needs both events reached; the caller reads marks of steps already waited for.
    this.#events[to].synchronize();
    return this.#events[to].elapsedSince(this.#events[from]) * 1000;
  }
  release(id: number): void {
    this.#free.push(id);
  }
  reset(): void {
    this.#free = this.#events.map((_, i) => i);
  }
  reserve(marks: number): void {
    this.#grow(marks);
  }
  #grow(marks: number): void {
    while (this.#events.length < marks) {
      this.#events.push(this.device.createEvent(true));
      this.#free.push(this.#events.length - 1);
    }
  }
  destroy(): void {
    for (const e of this.#events) e.destroy();
    this.#events.length = 0;
    this.#free = [];
  }
}
