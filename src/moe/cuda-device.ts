// kernels/moe-tokens.cu on a GPU (cuda and nccl backends), compiled with NVRTC through the kernel
// cache and launched on the caller's streams. Built in the rank's thread after its communicator,
// whose context is then current; the GPU is that context's (as src/pipeline/compute-cuda.ts finds it).
import type { DeviceBuffer, Stream } from '../backends/backend.js';
import { CudaDevice } from '../cuda/device.js';
import { cu, outI32 } from '../cuda/driver.js';
import { KernelModule, StructLauncher, type KernelFunction } from '../jit/module.js';
import { TOKEN_KERNELS, type TokenKernelName } from './kernel-args.js';
import type { TokenDevice } from './kernel-compute.js';
import { cudaStream, devicePointer } from '../backends/raw.js';

/** Names this code in the errors of src/backends/raw.ts. */
const WHO = 'MoE group';

export class CudaTokenDevice implements TokenDevice {
  readonly multiprocessors: number;
  readonly #device: CudaDevice;
  readonly #module: KernelModule;
  /** One parameter block per struct (a launch copies it), and every kernel taking it. */
  readonly #launchers = new Map<TokenKernelName, StructLauncher>();
  readonly #fns = new Map<string, KernelFunction>();

  /**
   * Loads the module: the caller keeps every rank off the GPU meanwhile (loading waits for the
   * kernels running there, and a peer's kernel waiting for this rank would never end).
   */
  constructor() {
    this.#device = new CudaDevice(outI32('cuCtxGetDevice', (o) => cu().cuCtxGetDevice(o)));
    this.#module = new KernelModule('moe-tokens.cu', this.#device.arch);
    // Looking the functions up now loads them now, not at a first launch.
    for (const [name, spec] of Object.entries(TOKEN_KERNELS) as [TokenKernelName, (typeof TOKEN_KERNELS)[TokenKernelName]][]) {
      for (const k of spec.kernels) this.#fns.set(k, this.#module.fn(k));
      this.#launchers.set(name, new StructLauncher(this.#fns.get(spec.kernels[0])!, 8 * spec.fields.length));
    }
    this.multiprocessors = this.#device.smCount;
  }

  params(spec: TokenKernelName): DataView {
    return this.#launchers.get(spec)!.view;
  }

  launch(spec: TokenKernelName, kernel: string, grid: number, block: number, stream: Stream): void {
    this.#launchers.get(spec)!.launch(grid, block, cudaStream(stream, WHO), 0, this.#fns.get(kernel)!);
  }

  address(buf: DeviceBuffer): bigint {
    return devicePointer(buf, WHO);
  }

  fill(stream: Stream, buf: DeviceBuffer, byte: number): void {
    if (buf.bytes > 0) this.#device.memsetAsync(devicePointer(buf, WHO), byte, buf.bytes, cudaStream(stream, WHO));
  }

  close(): void {
    this.#module.unload();
    this.#device.release();
  }
}
