// Kernels of kernels/ compiled for the host (tests/*/emulate.cpp over cuda-on-host.hpp) and loaded
// with koffi: what the emulated devices share to run the GPU path's own code without a GPU.
import { execFileSync, spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import koffi, { type LibraryHandle } from 'koffi';
import type { StructSpec } from '../../src/jit/kernel-set.js';
import { kernelsDir } from '../../src/jit/module.js';

/** A host C++ compiler with C++20 (std::barrier), or undefined. */
export function hostCompiler(): string | undefined {
  return ['g++', 'clang++'].find((c) => spawnSync(c, ['--version']).status === 0);
}

/**
 * Builds the shared library `lib` from `source`, a path under tests/ (the tests run from dist/tests/,
 * the C++ stays in tests/); returns `lib`. -ffp-contract=off keeps the f32 intrinsics unfused, as on
 * the device: the pipeline's tests compare bits.
 */
export function buildHostLibrary(compiler: string, source: string, lib: string): string {
  const path = fileURLToPath(new URL(`../../../tests/${source}`, import.meta.url));
  execFileSync(compiler, ['-std=c++20', '-O2', '-ffp-contract=off', '-fPIC', '-shared', '-pthread', `-I${kernelsDir()}`, path, '-o', lib]);
  return lib;
}

type Emulate = (kernel: string, params: Uint8Array, grid: number, block: number) => number;

/** An emulator library's kernels with one parameter block per struct, as a KernelSet holds on a GPU. */
export class HostKernels<Name extends string> {
  /** The library, for the emulator's other entry points. */
  readonly lib: LibraryHandle;
  readonly #params = new Map<Name, Uint8Array>();
  readonly #emulate: Emulate;

  /** `entry`: the library's C function that runs a kernel by name (KERNEL in cuda-on-host.hpp). */
  constructor(library: string, entry: string, specs: Readonly<Record<Name, StructSpec>>) {
    this.lib = koffi.load(library);
    this.#emulate = this.lib.func(`int ${entry}(const char *kernel, const void *params, uint32_t grid, uint32_t block)`) as Emulate;
    for (const [name, spec] of Object.entries(specs) as [Name, StructSpec][]) this.#params.set(name, new Uint8Array(8 * spec.fields.length));
  }

  params(spec: Name): DataView {
    const p = this.#params.get(spec)!;
    return new DataView(p.buffer, p.byteOffset, p.byteLength);
  }

  launch(spec: Name, kernel: string, grid: number, block: number): void {
    if (this.#emulate(kernel, this.#params.get(spec)!, grid, block) !== 0) throw new Error(`emulator: no kernel ${kernel}`);
  }
}
