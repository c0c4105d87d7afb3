// A TokenDevice that runs kernels/moe-tokens.cu compiled for the host (emulate.cpp) on the cpu
// backend's buffers: the group's GPU path, struct packing and launch sizes included, without a GPU.
import { execFileSync, spawnSync } from 'node:child_process';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import koffi from 'koffi';
import type { DeviceBuffer } from '../../src/backends/backend.js';
import { kernelsDir } from '../../src/jit/module.js';
import type { ComputeFactory } from '../../src/moe/compute.js';
import { TOKEN_KERNELS, type TokenKernelName } from '../../src/moe/kernel-args.js';
import { KernelCompute, type TokenDevice } from '../../src/moe/kernel-compute.js';
import { hostBytes } from '../../src/backends/raw.js';

const source = fileURLToPath(new URL('../../../tests/moe/emulate.cpp', import.meta.url));

/** A host C++ compiler with C++20 (std::barrier), or undefined. */
export function hostCompiler(): string | undefined {
  return ['g++', 'clang++'].find((c) => spawnSync(c, ['--version']).status === 0);
}

/** Builds the emulator library into `dir`; returns its path. */
export function buildEmulator(compiler: string, dir: string): string {
  const lib = join(dir, 'moe-tokens-emulated.so');
  execFileSync(compiler, ['-std=c++20', '-O2', '-ffp-contract=off', '-fPIC', '-shared', '-pthread', `-I${kernelsDir()}`, source, '-o', lib]);
  return lib;
}

type Emulate = (kernel: string, params: Uint8Array, grid: number, block: number) => number;
type Fill = (address: bigint, bytes: bigint, value: number) => void;

class EmulatedTokenDevice implements TokenDevice {
  readonly multiprocessors = 4;
  readonly #params = new Map<TokenKernelName, Uint8Array>();
  readonly #emulate: Emulate;
  readonly #fill: Fill;

  constructor(library: string) {
    const lib = koffi.load(library);
    this.#emulate = lib.func('int mt_emulate(const char *kernel, const void *params, uint32_t grid, uint32_t block)') as Emulate;
    this.#fill = lib.func('void mt_fill(uint64_t address, uint64_t bytes, int value)') as Fill;
    for (const [name, spec] of Object.entries(TOKEN_KERNELS)) this.#params.set(name as TokenKernelName, new Uint8Array(8 * spec.fields.length));
  }

  params(spec: TokenKernelName): DataView {
    const p = this.#params.get(spec)!;
    return new DataView(p.buffer, p.byteOffset, p.byteLength);
  }
  launch(spec: TokenKernelName, kernel: string, grid: number, block: number): void {
    if (this.#emulate(kernel, this.#params.get(spec)!, grid, block) !== 0) throw new Error(`emulator: no kernel ${kernel}`);
  }
  address(buf: DeviceBuffer): bigint {
    return BigInt(koffi.address(hostBytes(buf, 'emulated MoE kernels')));
  }
  fill(_s: unknown, buf: DeviceBuffer, byte: number): void {
    this.#fill(this.address(buf), BigInt(buf.bytes), byte);
  }
  close(): void {}
}

/** The group's compute as the kernels compiled for the host. */
export function emulatedTokenCompute(library: string): ComputeFactory {
  return (shape, bufs) => new KernelCompute(new EmulatedTokenDevice(library), shape, bufs);
}
