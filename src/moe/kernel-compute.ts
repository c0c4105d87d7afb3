// The group's compute as launches of kernels/moe-tokens.cu: each step writes its kernel's struct
// (kernel-args.ts) and sizes the grid from the group's capacities, never from a count on the
// device, so a captured graph serves any routing. Where the kernels run is a TokenDevice's
// business (a GPU, cuda-device.ts; the tests also run them compiled for the host).
import type { DeviceBuffer, Stream } from '../backends/backend.js';
import { DTYPES, type GatherCall, type LayoutCall, type ReduceCall, type RouteCall, type TokenBuffers, type TokenCompute } from './compute.js';
import { GROUP, SCAN_THREADS, THREADS, TOKEN_KERNELS, type TokenKernelName } from './kernel-args.js';
import type { TokenShape } from './shape.js';

export interface TokenDevice {
  /** Grid-stride kernels take at most a few blocks per multiprocessor. */
  readonly multiprocessors: number;
  /** Where `spec`'s struct is written before a launch (8-byte fields at 8·i). */
  params(spec: TokenKernelName): DataView;
  /** Launches `kernel` on `stream` with `spec`'s struct as it is now. */
  launch(spec: TokenKernelName, kernel: string, grid: number, block: number, stream: Stream): void;
  /** The address kernels use for a buffer. */
  address(buf: DeviceBuffer): bigint;
  /** Fills the whole buffer with `byte`, in stream order. */
  fill(stream: Stream, buf: DeviceBuffer, byte: number): void;
  close(): void;
}

/** A field's value: a buffer (its address; absent: 0), a number or a flag. */
type Value = DeviceBuffer | number | boolean | undefined;

export class KernelCompute implements TokenCompute {
  readonly #device: TokenDevice;
  readonly #shape: TokenShape;
  readonly #bufs: TokenBuffers;
  readonly #common: Record<string, Value>;

  constructor(device: TokenDevice, shape: TokenShape, bufs: TokenBuffers) {
    this.#device = device;
    this.#shape = shape;
    this.#bufs = bufs;
    const s = shape;
    this.#common = {
      ...bufs,
      topk: s.topk,
      experts: s.experts,
      expertsPerRank: s.expertsPerRank,
      compact: s.layout === 'compact',
      buckets: s.buckets,
      chunks: s.chunks,
      chunkTokens: s.chunkTokens,
      rowBytes: s.rowBytes,
      metaBytes: s.metaBytes,
      world: s.world,
      align: s.align,
    };
  }

  route(stream: Stream, c: RouteCall): void {
    // The counts start from zero, and so does the fault word (device memory starts as anything).
    this.#device.fill(stream, this.#bufs.hist, 0);
    this.#device.fill(stream, this.#bufs.fault, 0);
    this.#launch('route', 'mt_route_count', { ...c }, Math.ceil(this.#shape.chunks / THREADS), THREADS, stream);
    this.#launch('route', 'mt_route_scan', { ...c }, 1, SCAN_THREADS, stream);
  }

  gather(stream: Stream, c: GatherCall): void {
    const entries = this.#shape.tokenCap * this.#shape.topk;
    const args = { ...c, sendMeta: c.meta ? this.#bufs.sendMeta : undefined };
    this.#launch('gather', 'mt_gather', args, Math.ceil((entries * GROUP) / THREADS), THREADS, stream);
  }

  poison(stream: Stream, buf: DeviceBuffer): void {
    this.#device.fill(stream, buf, 0xff);
  }

  layout(stream: Stream, c: LayoutCall): void {
    const s = this.#shape;
    const args = { ...c, oso: this.#bufs.routeOso, recvMeta: this.#bufs.recvMeta };
    if (s.layout === 'expanded') {
      this.#launch('layout', 'mt_dispatch_layout', args, s.expertsPerRank, THREADS, stream);
      return;
    }
    this.#launch('layout', 'mt_dispatch_layout', args, 1, THREADS, stream);
    this.#launch('layout', 'mt_dispatch_unpack', args, this.#blocks(s.recvRows * s.topk), THREADS, stream);
  }

  reduce(stream: Stream, c: ReduceCall): void {
    const args = { ...c, gate: this.#bufs.combineOso, recv: this.#bufs.back, dtype: DTYPES[c.dtype].code };
    this.#launch('reduce', 'mt_combine_reduce', args, this.#blocks(this.#shape.tokenCap * c.hidden), THREADS, stream);
  }

  close(): void {
    this.#device.close();
  }

  /** A grid-stride kernel's blocks for `work` items: no more than 8 a multiprocessor. */
  #blocks(work: number): number {
    return Math.max(1, Math.min(Math.ceil(work / THREADS), 8 * this.#device.multiprocessors));
  }

  #launch(spec: TokenKernelName, kernel: string, args: Record<string, Value>, grid: number, block: number, stream: Stream): void {
    if (grid === 0) return;
    const view = this.#device.params(spec);
    const all = { ...this.#common, ...args };
    TOKEN_KERNELS[spec].fields.forEach(([name, kind], i) => {
      const v = all[name];
      if (kind === 'ptr') view.setBigUint64(8 * i, v === undefined ? 0n : this.#device.address(v as DeviceBuffer), true);
      else view.setBigInt64(8 * i, BigInt(typeof v === 'boolean' ? Number(v) : ((v as number | undefined) ?? 0)), true);
    });
    this.#device.launch(spec, kernel, grid, block, stream);
  }
}
