// A TokenDevice that runs kernels/moe-tokens.cu compiled for the host (emulate.cpp) on the cpu
// backend's buffers: the group's GPU path, struct packing and launch sizes included, without a GPU.
import { join } from 'node:path';
import koffi from 'koffi';
import type { DeviceBuffer } from '../../src/backends/backend.js';
import type { ComputeFactory } from '../../src/moe/compute.js';
import { TOKEN_KERNELS, type TokenKernelName } from '../../src/moe/kernel-args.js';
import { KernelCompute, type TokenDevice } from '../../src/moe/kernel-compute.js';
import { hostBytes } from '../../src/backends/raw.js';
import { buildHostLibrary, HostKernels } from '../support/host-kernels.js';

/** Builds the emulator library into `dir`; returns its path. */
export function buildEmulator(compiler: string, dir: string): string {
  return buildHostLibrary(compiler, 'moe/emulate.cpp', join(dir, 'moe-tokens-emulated.so'));
}

/** `address`: where a buffer's bytes are (default: a cpu backend's buffer). */
export class EmulatedTokenDevice implements TokenDevice {
  readonly multiprocessors = 4;
  readonly #kernels: HostKernels<TokenKernelName>;
  readonly #address: (buf: DeviceBuffer) => Uint8Array;

  constructor(library: string, address = (buf: DeviceBuffer) => hostBytes(buf, 'emulated MoE kernels')) {
    this.#kernels = new HostKernels(library, 'mt_emulate', TOKEN_KERNELS);
    this.#address = address;
  }

  params(spec: TokenKernelName): DataView {
    return this.#kernels.params(spec);
  }
  launch(spec: TokenKernelName, kernel: string, grid: number, block: number): void {
    this.#kernels.launch(spec, kernel, grid, block);
  }
  address(buf: DeviceBuffer): bigint {
    return BigInt(koffi.address(this.#address(buf)));
  }
  close(): void {}
}

/** The group's compute as the kernels compiled for the host. */
export function emulatedTokenCompute(library: string): ComputeFactory {
  return (shape, bufs) => new KernelCompute(new EmulatedTokenDevice(library), shape, bufs);
}
