// A loaded kernel module: compile (through the cache), load, look up functions, launch.
import { readFileSync, readdirSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import koffi from 'koffi';
import { check, cu, outI32, outU64 } from '../cuda/driver.js';
import type { CudaStream } from '../cuda/device.js';
import { cacheKey, cached } from './cache.js';

const CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8;
import { compileToCubin, nvrtcVersion } from './nvrtc.js';

/** kernels/ at the package root (two levels above dist/src/jit or src/jit). */
export function kernelsDir(): string {
  let dir = dirname(fileURLToPath(import.meta.url));
  for (let i = 0; i < 5; i++) {
    try {
      if (readdirSync(join(dir, 'kernels')).some((f) => f.endsWith('.cu'))) return join(dir, 'kernels');
    } catch {
      /* keep climbing */
    }
    dir = dirname(dir);
  }
  throw new Error('kernels/ folder not found next to the package');
}

export function loadKernelSources(file: string): { source: string; headers: Record<string, string> } {
  const dir = kernelsDir();
  const headers: Record<string, string> = {};
  for (const f of readdirSync(dir)) if (f.endsWith('.cuh')) headers[f] = readFileSync(join(dir, f), 'utf8');
  return { source: readFileSync(join(dir, file), 'utf8'), headers };
}

export class KernelFunction {
  constructor(readonly name: string, readonly handle: bigint) {}
  /** Opts in to more than the default 48 KiB of dynamic shared memory. */
  allowSharedBytes(bytes: number): void {
    check('cuFuncSetAttribute', cu().cuFuncSetAttribute(this.handle, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, bytes));
  }
  maxActiveBlocksPerSm(threads: number, smem = 0): number {
    return outI32('cuOccupancyMaxActiveBlocksPerMultiprocessor', (o) =>
      cu().cuOccupancyMaxActiveBlocksPerMultiprocessor(o, this.handle, threads, BigInt(smem)),
    );
  }
}

/** A module compiled for one architecture and loaded into the current context. */
export class KernelModule {
  #handle: bigint;
  readonly #functions = new Map<string, KernelFunction>();

  constructor(file: string, arch: number, options: string[] = []) {
    const { source, headers } = loadKernelSources(file);
    const opts = ['--std=c++17', '-default-device', ...options];
    const key = cacheKey([file, source, ...Object.entries(headers).flat(), `sm_${arch}`, ...opts, nvrtcVersion()]);
    const cubin = cached(key, () => compileToCubin({ name: file, source, headers, arch, options: opts }));
    this.#handle = outU64('cuModuleLoadData', (o) => cu().cuModuleLoadData(o, cubin));
  }

  fn(name: string): KernelFunction {
    let f = this.#functions.get(name);
    if (!f) {
      f = new KernelFunction(name, outU64('cuModuleGetFunction', (o) => cu().cuModuleGetFunction(o, this.#handle, name)));
      this.#functions.set(name, f);
    }
    return f;
  }

  unload(): void {
    if (this.#handle === 0n) return;
    check('cuModuleUnload', cu().cuModuleUnload(this.#handle));
    this.#handle = 0n;
  }
}

/**
 * A kernel whose single parameter is a struct passed by value. The struct lives in pinned-address
 * native memory written through a DataView, so a launch allocates nothing.
 */
export class StructLauncher {
  readonly view: DataView;
  readonly #params: bigint;
  constructor(readonly fn: KernelFunction, structBytes: number) {
    const mem = koffi.alloc('uint8_t', structBytes + 8);
    const ab = koffi.view(mem, structBytes + 8);
    const base = koffi.address(mem);
    this.view = new DataView(ab, 8, structBytes);
    // kernelParams[0] = &struct
    new DataView(ab, 0, 8).setBigUint64(0, base + 8n, true);
    this.#params = base;
    // The native block lives as long as this object; keep a reference so it is not collected.
    this.#keep = mem;
  }
  readonly #keep: unknown;
  launch(grid: number, block: number, stream: CudaStream, smem = 0): void {
    check(
      `cuLaunchKernel(${this.fn.name})`,
      cu().cuLaunchKernel(this.fn.handle, grid, 1, 1, block, 1, 1, smem, stream.handle, this.#params, 0n),
    );
  }
}
