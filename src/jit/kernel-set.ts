// Kernels that take one argument struct of 8-byte fields (kernels/pipeline.cu, kernels/moe-tokens.cu):
// field i sits at byte 8·i, so a spec's field list is the struct's whole layout (their tests check
// the lists against the .cu structs). A KernelSet holds one parameter block per struct, shared by
// every kernel taking it (a launch copies the block), and looks every kernel up at once: that loads
// it now, not at a first launch beside a peer's spinning kernel.
import type { CudaStream } from '../cuda/device.js';
import { KernelModule, StructLauncher, type KernelFunction } from './module.js';

export type FieldKind = 'ptr' | 'int' | 'float';

export interface StructSpec {
  /** The struct's name in the .cu file. */
  struct: string;
  /** Kernels taking it. */
  kernels: string[];
  fields: ReadonlyArray<readonly [name: string, kind: FieldKind]>;
}

export const ptrs = (...names: string[]) => names.map((n) => [n, 'ptr'] as const);
export const ints = (...names: string[]) => names.map((n) => [n, 'int'] as const);

export class KernelSet<Name extends string> {
  readonly #launchers = new Map<Name, StructLauncher>();
  readonly #fns = new Map<string, KernelFunction>();

  constructor(readonly module: KernelModule, specs: Readonly<Record<Name, StructSpec>>) {
    for (const [name, spec] of Object.entries(specs) as [Name, StructSpec][]) {
      for (const k of spec.kernels) this.#fns.set(k, module.fn(k));
      this.#launchers.set(name, new StructLauncher(this.#fns.get(spec.kernels[0]!)!, 8 * spec.fields.length));
    }
  }

  /** The parameter block of `spec`'s struct, to fill before a launch. */
  params(spec: Name): DataView {
    return this.#launchers.get(spec)!.view;
  }

  launch(spec: Name, kernel: string, grid: number, block: number, stream: CudaStream): void {
    this.#launchers.get(spec)!.launch(grid, block, stream, 0, this.#fns.get(kernel)!);
  }

  unload(): void {
    this.module.unload();
  }
}
