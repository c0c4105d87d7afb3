// A KernelDevice that runs kernels/pipeline.cu compiled for the host (emulate.cpp) on the cpu
// backend's buffers: the pipeline's GPU compute path, struct packing included, without a GPU.
import { cpuStream } from '../../src/backends/cpu/lane.js';
import { join } from 'node:path';
import koffi from 'koffi';
import type { Stream } from '../../src/backends/backend.js';
import { HostClock } from '../../src/pipeline/compute-cpu.js';
import type { Ref } from '../../src/pipeline/compute.js';
import { KERNEL_SPECS, type KernelName } from '../../src/pipeline/kernel-args.js';
import { KernelCompute, type KernelDevice } from '../../src/pipeline/kernel-compute.js';
import { hostBytes } from '../../src/backends/raw.js';
import { buildHostLibrary, HostKernels } from '../support/host-kernels.js';

/** Builds the emulator library into `dir`; returns its path. */
export function buildEmulator(compiler: string, dir: string): string {
  return buildHostLibrary(compiler, 'pipeline/emulate.cpp', join(dir, 'pipeline-emulated.so'));
}

type Zero = (address: bigint, bytes: bigint) => void;

class EmulatedDevice implements KernelDevice {
  // The cpu backend's own streams: the communicator refuses others (cuda's would be CudaStreams).
  readonly compute: Stream = cpuStream();
  readonly data: Stream = cpuStream();
  readonly clock = new HostClock();
  readonly multiprocessors = 4;
  readonly scratch: bigint;
  readonly #scratch = new Uint32Array(2);
  readonly #kernels: HostKernels<KernelName>;
  readonly #zero: Zero;

  constructor(library: string) {
    this.#kernels = new HostKernels(library, 'pl_emulate', KERNEL_SPECS);
    this.#zero = this.#kernels.lib.func('void pl_zero(uint64_t address, uint64_t bytes)') as Zero;
    this.scratch = BigInt(koffi.address(this.#scratch));
  }

  params(spec: KernelName): DataView {
    return this.#kernels.params(spec);
  }
  launch(spec: KernelName, kernel: string, grid: number, block: number): void {
    this.#kernels.launch(spec, kernel, grid, block);
  }
  address(ref: Ref): bigint {
    return BigInt(koffi.address(hostBytes(ref.buf, 'emulated pipeline kernels'))) + BigInt(ref.byte);
  }
  zero(_s: Stream, address: bigint, bytes: number): void {
    this.#zero(address, BigInt(bytes));
  }
  readScratch(): Uint32Array {
    return Uint32Array.from(this.#scratch);
  }
  sync(): void {}
  close(): void {}
}

export function emulatedCompute(library: string): KernelCompute {
  return new KernelCompute(new EmulatedDevice(library));
}
