// A KernelDevice that runs kernels/pipeline.cu compiled for the host (emulate.cpp) on the cpu
// backend's buffers: the pipeline's GPU compute path, struct packing included, without a GPU.
import { execFileSync, spawnSync } from 'node:child_process';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import koffi from 'koffi';
import type { Stream } from '../../src/backends/backend.js';
import { kernelsDir } from '../../src/jit/module.js';
import { HostClock } from '../../src/pipeline/compute-cpu.js';
import type { Ref } from '../../src/pipeline/compute.js';
import { KERNEL_SPECS, type KernelName } from '../../src/pipeline/kernel-args.js';
import { KernelCompute, type KernelDevice } from '../../src/pipeline/kernel-compute.js';
import { hostBytes } from '../../src/backends/raw.js';

const source = fileURLToPath(new URL('../../../tests/pipeline/emulate.cpp', import.meta.url));

/** A host C++ compiler with C++20 (std::barrier), or undefined. */
export function hostCompiler(): string | undefined {
  return ['g++', 'clang++'].find((c) => spawnSync(c, ['--version']).status === 0);
}

/** Builds the emulator library into `dir`; returns its path. */
export function buildEmulator(compiler: string, dir: string): string {
  const lib = join(dir, 'pipeline-emulated.so');
  execFileSync(compiler, ['-std=c++20', '-O2', '-ffp-contract=off', '-fPIC', '-shared', '-pthread', `-I${kernelsDir()}`, source, '-o', lib]);
  return lib;
}

type Emulate = (kernel: string, params: Uint8Array, grid: number, block: number) => number;
type Zero = (address: bigint, bytes: bigint) => void;

class EmulatedDevice implements KernelDevice {
  readonly compute: Stream = { kind: 'stream' };
  readonly data: Stream = { kind: 'stream' };
  readonly clock = new HostClock();
  readonly multiprocessors = 4;
  readonly scratch: bigint;
  readonly #scratch = new Uint32Array(2);
  readonly #params = new Map<KernelName, Uint8Array>();
  readonly #emulate: Emulate;
  readonly #zero: Zero;

  constructor(library: string) {
    const lib = koffi.load(library);
    this.#emulate = lib.func('int pl_emulate(const char *kernel, const void *params, uint32_t grid, uint32_t block)') as Emulate;
    this.#zero = lib.func('void pl_zero(uint64_t address, uint64_t bytes)') as Zero;
    for (const [name, spec] of Object.entries(KERNEL_SPECS)) this.#params.set(name as KernelName, new Uint8Array(8 * spec.fields.length));
    this.scratch = BigInt(koffi.address(this.#scratch));
  }

  params(spec: KernelName): DataView {
    const p = this.#params.get(spec)!;
    return new DataView(p.buffer, p.byteOffset, p.byteLength);
  }
  launch(spec: KernelName, kernel: string, grid: number, block: number): void {
    if (this.#emulate(kernel, this.#params.get(spec)!, grid, block) !== 0) throw new Error(`emulator: no kernel ${kernel}`);
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
