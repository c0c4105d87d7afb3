// kernels/moe-tokens.cu on a GPU (cuda and nccl backends), compiled with NVRTC through the kernel
// cache and launched on the caller's streams. Built in the rank's thread after its communicator,
// whose context is then current; the GPU is that context's (as src/pipeline/compute-cuda.ts finds it).
import type { DeviceBuffer, Stream } from '../backends/backend.js';
import { CudaDevice } from '../cuda/device.js';
import { KernelModule } from '../jit/module.js';
import { KernelSet } from '../jit/kernel-set.js';
import { TOKEN_KERNELS, type TokenKernelName } from './kernel-args.js';
import type { TokenDevice } from './kernel-compute.js';
import { cudaStream, devicePointer } from '../backends/raw.js';
import { probeDefines } from '../backends/cuda/probe-defines.js';

/** Names this code in the errors of src/backends/raw.ts. */
const WHO = 'MoE group';

export class CudaTokenDevice implements TokenDevice {
  readonly multiprocessors: number;
  readonly #device: CudaDevice;
  readonly #kernels: KernelSet<TokenKernelName>;
  /**
   * Loads the module: the caller keeps every rank off the GPU meanwhile (loading waits for the
   * kernels running there, and a peer's kernel waiting for this rank would never end).
   */
  constructor() {
    this.#device = CudaDevice.current();
    this.#kernels = new KernelSet(new KernelModule('moe-tokens.cu', this.#device.arch, probeDefines()), TOKEN_KERNELS);
    this.multiprocessors = this.#device.smCount;
  }

  params(spec: TokenKernelName): DataView {
    return this.#kernels.params(spec);
  }

  launch(spec: TokenKernelName, kernel: string, grid: number, block: number, stream: Stream): void {
    this.#kernels.launch(spec, kernel, grid, block, cudaStream(stream, WHO));
  }

  address(buf: DeviceBuffer): bigint {
    return devicePointer(buf, WHO);
  }

  close(): void {
    this.#kernels.unload();
    this.#device.release();
  }
}
