// kernels/moe-tokens.cu on a GPU (cuda and nccl backends), compiled with NVRTC through the kernel
// cache and launched on the caller's streams. Built in the rank's thread after its communicator,
// whose context is then current; the GPU is that context's (as src/pipeline/compute-cuda.ts finds it).
import type { DeviceBuffer, Stream } from '../backends/backend.js';
import { CudaDevice } from '../cuda/device.js';
import type { GpuBuffer } from '../backends/gpu-memory.js';
import { KernelModule } from '../jit/module.js';
import { KernelSet } from '../jit/kernel-set.js';
import { TOKEN_KERNELS, type TokenKernelName } from './kernel-args.js';
import type { TokenDevice } from './kernel-compute.js';
import { cudaStream, devicePointer } from '../backends/raw.js';
import { probeDefines } from '../backends/cuda/probe-defines.js';

/** The token kernels' module, and the options every rank compiles it with. */
export const TOKEN_MODULE = 'moe-tokens.cu';
export const tokenModuleOptions = (): string[] => probeDefines();

/** Names this code in the errors of src/backends/raw.ts. */
const WHO = 'MoE group';

export class CudaTokenDevice implements TokenDevice {
  readonly multiprocessors: number;
  readonly #device: CudaDevice;
  readonly #kernels: KernelSet<TokenKernelName>;
  /** Whether close() unloads the module (not when the communicator lent it: CudaComm.kernelModule). */
  readonly #owned: boolean;
  /**
   * `module`: kernels/moe-tokens.cu from the communicator, which keeps it; else this loads its own.
   * The caller keeps every rank off the GPU meanwhile (loading waits for the kernels running there,
   * and a peer's kernel waiting for this rank would never end).
   */
  constructor(module?: KernelModule) {
    this.#device = CudaDevice.current();
    this.#owned = module === undefined;
    this.#kernels = new KernelSet(module ?? new KernelModule(TOKEN_MODULE, this.#device.arch, tokenModuleOptions()), TOKEN_KERNELS);
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

  peers(buf: DeviceBuffer): bigint {
    devicePointer(buf, WHO);
    return (buf as GpuBuffer).peerTable;
  }

  close(): void {
    if (this.#owned) this.#kernels.unload();
    this.#device.release();
  }
}
