// A loaded kernel module: compile (through the cache), load, look up functions, launch.
import { readFileSync, readdirSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import koffi from 'koffi';
import { check, cu, outI32, outU64 } from '../cuda/driver.js';
import type { CudaStream } from '../cuda/device.js';
import { KernelSourcesNotFoundError } from '../errors.js';
import { earlyLaunchOn } from '../knobs.js';
import { cacheKey, cached } from './cache.js';

const CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8;
import { compileToCubin, nvrtcVersion } from './nvrtc.js';

/** kernels/ at the package root (two levels above dist/src/jit or src/jit). */
export function kernelsDir(): string {
  let dir = dirname(fileURLToPath(import.meta.url));
  const searched: string[] = [];
  for (let i = 0; i < 5; i++) {
    const kernels = join(dir, 'kernels');
    try {
      if (readdirSync(kernels).some((f) => f.endsWith('.cu'))) return kernels;
    } catch {
      /* keep climbing */
    }
    searched.push(kernels);
    dir = dirname(dir);
  }
  throw new KernelSourcesNotFoundError(searched);
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

/**
 * A module compiled for one architecture and loaded into the current context, or one borrowed from
 * another rank of the same process and context (backends/cuda/setup.ts: ranks sharing a GPU run
 * one copy of the code, not one each), which unload() leaves to its owner.
 */
export class KernelModule {
  #handle: bigint;
  readonly #owned: boolean;
  readonly #functions = new Map<string, KernelFunction>();

  constructor(file: string, arch: number, options?: string[]);
  constructor(borrowed: bigint);
  constructor(file: string | bigint, arch = 0, options: string[] = []) {
    this.#owned = typeof file === 'string';
    if (typeof file !== 'string') {
      this.#handle = file;
      return;
    }
    const { source, headers } = loadKernelSources(file);
    const opts = ['--std=c++17', '-default-device', ...options];
    const key = cacheKey([file, source, ...Object.entries(headers).flat(), `sm_${arch}`, ...opts, nvrtcVersion()]);
    const cubin = cached(key, () => compileToCubin({ name: file, source, headers, arch, options: opts }));
    this.#handle = outU64('cuModuleLoadData', (o) => cu().cuModuleLoadData(o, cubin));
  }

  /** The driver's handle: valid in this context, for every thread of the process. */
  get handle(): bigint {
    return this.#handle;
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
    if (this.#handle === 0n || !this.#owned) return;
    check('cuModuleUnload', cu().cuModuleUnload(this.#handle));
    this.#handle = 0n;
  }
}

/**
 * Whether kernels on a GPU of compute capability `arch` (major x 10 + minor) may be launched early
 * (StructLauncher.launchEarly): Hopper and later, unless A2AV_EARLY_LAUNCH=0 turns it off.
 */
export function earlyLaunchWanted(arch: number): boolean {
  return arch >= 90 && earlyLaunchOn();
}

/**
 * A kernel whose single parameter is a struct passed by value. The struct and a CUlaunchConfig live
 * in native memory written through DataViews, so a launch allocates nothing.
 */
export class StructLauncher {
  readonly view: DataView;
  readonly #params: bigint;
  readonly #config: DataView;
  readonly #configAddress: bigint;
  readonly #keep: unknown;

  constructor(readonly fn: KernelFunction, structBytes: number) {
    const total = 8 + structBytes + LAUNCH_CONFIG_BYTES + LAUNCH_ATTRIBUTE_BYTES;
    const mem = koffi.alloc('uint8_t', total);
    const ab = koffi.view(mem, total);
    const base = koffi.address(mem);
    this.view = new DataView(ab, 8, structBytes);
    // kernelParams[0] = &struct
    new DataView(ab, 0, 8).setBigUint64(0, base + 8n, true);
    this.#params = base;
    const configOffset = Math.ceil((8 + structBytes) / 8) * 8;
    this.#config = new DataView(ab, configOffset, LAUNCH_CONFIG_BYTES + LAUNCH_ATTRIBUTE_BYTES);
    this.#configAddress = base + BigInt(configOffset);
    // One attribute, programmatic stream serialisation, pointed to from the config.
    this.#config.setBigUint64(40, this.#configAddress + BigInt(LAUNCH_CONFIG_BYTES), true);
    this.#config.setUint32(LAUNCH_CONFIG_BYTES, CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION, true);
    this.#config.setInt32(LAUNCH_CONFIG_BYTES + 8, 1, true);
    this.#keep = mem; // the native block must live as long as this object
  }

  /**
   * `fn`: another kernel of the module taking the same struct (the parameters are copied at launch).
   * `holdsOpen`: the kernel lets the next one in (griddepcontrol.launch_dependents) before its own
   * waits on peers end (CudaStream.heldOpen).
   */
  launch(grid: number, block: number, stream: CudaStream, smem = 0, fn: KernelFunction = this.fn, holdsOpen = false): void {
    check(`cuLaunchKernel(${fn.name})`, cu().cuLaunchKernel(fn.handle, grid, 1, 1, block, 1, 1, smem, stream.handle, this.#params, 0n));
    stream.heldOpen = holdsOpen;
  }

  /**
   * Launches so that the kernel may start while the previous kernel on `stream` is still finishing
   * (programmatic dependent launch); the kernel must wait for it itself (griddepcontrol.wait).
   * Behind a kernel that holds the stream open (it waits on peers after letting us in), a grid of
   * more than one block is launched plainly: its waiting blocks could take the slots a peer's
   * kernel needs to finish that wait (seen as a hang under compute-sanitizer, whose kernels fit
   * fewer blocks an SM than the occupancy the grids were sized by).
   */
  launchEarly(grid: number, block: number, stream: CudaStream, smem = 0, fn: KernelFunction = this.fn, holdsOpen = false): void {
    if (stream.heldOpen && grid > 1) return this.launch(grid, block, stream, smem, fn, holdsOpen);
    const c = this.#config;
    c.setUint32(0, grid, true);
    c.setUint32(4, 1, true);
    c.setUint32(8, 1, true);
    c.setUint32(12, block, true);
    c.setUint32(16, 1, true);
    c.setUint32(20, 1, true);
    c.setUint32(24, smem, true);
    c.setBigUint64(32, stream.handle, true);
    c.setUint32(48, 1, true);
    check(`cuLaunchKernelEx(${fn.name})`, cu().cuLaunchKernelEx(this.#configAddress, fn.handle, this.#params, 0n));
    stream.heldOpen = holdsOpen;
  }
}

// CUlaunchConfig: 7 x uint32 (grid, block, shared bytes), pad, stream, attrs*, numAttrs, pad.
const LAUNCH_CONFIG_BYTES = 56;
// CUlaunchAttribute: uint32 id, pad to 8, 64-byte value union.
const LAUNCH_ATTRIBUTE_BYTES = 72;
const CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION = 6;
