// The group's compute as launches of kernels/moe-tokens.cu: each step writes its kernel's struct
// (kernel-args.ts) and sizes the grid from the call's capacity (its host token count, or what its
// buffers hold), never from a count on the device, so a captured graph serves any routing. One
// launch a step and nothing else (no memsets): at one token a step's cost is its launch. Where
// the kernels run is a TokenDevice's business (a GPU, cuda-device.ts; the tests also run them
// compiled for the host).
import type { DeviceBuffer, Stream } from '../backends/backend.js';
import { DTYPES, type GatherCall, type LayoutCall, type ReduceCall, type RouteCall, type TokenBuffers, type TokenCompute } from './compute.js';
import { GROUP, PULL_BUCKETS, SMALL_BUCKETS, SMALL_ENTRIES, THREADS, TOKEN_KERNELS, type TokenKernelName } from './kernel-args.js';
import type { TokenShape } from './shape.js';

/** Rows a one-block mt_route_gather copies at most, where rows are copied (one token's top-8 of 14 KiB rows: 112 KiB). */
const SMALL_GATHER_BYTES = 128 << 10;

export interface TokenDevice {
  /** Grid-stride kernels take at most a few blocks per multiprocessor. */
  readonly multiprocessors: number;
  /** Where `spec`'s struct is written before a launch (8-byte fields at 8·i). */
  params(spec: TokenKernelName): DataView;
  /** Launches `kernel` on `stream` with `spec`'s struct as it is now. */
  launch(spec: TokenKernelName, kernel: string, grid: number, block: number, stream: Stream): void;
  /** The address kernels use for a buffer. */
  address(buf: DeviceBuffer): bigint;
  /** A symmetric buffer's table of every rank's address of it (0 where it has none): what lets combine pull. */
  peers?(buf: DeviceBuffer): bigint;
  close(): void;
}

/** A field's value: a buffer (its address; absent: 0), an address, a number or a flag. */
type Value = DeviceBuffer | bigint | number | boolean | undefined;

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
      chunkTokens: s.chunkTokens,
      rowBytes: s.rowBytes,
      metaBytes: s.metaBytes,
      world: s.world,
      rank: s.rank,
      exchangeExperts: s.exchangeExperts,
      align: s.align,
    };
    // Where combine may pull: the device names peers' buffers and a block stages every bucket.
    this.#osoPeers = shape.buckets <= PULL_BUCKETS ? (device.peers?.(bufs.routeOso) ?? 0n) : 0n;
  }

  /** Every rank's routeOso (0: combine does not pull). */
  readonly #osoPeers: bigint;

  /** mt_route: the routing in chunks, a block each, the last block scanning their counts. */
  route(stream: Stream, c: RouteCall): void {
    // One block per chunk the call's buffers can hold; those past its tokens leave at once.
    const grid = Math.min(this.#shape.chunks, Math.ceil(c.tokenCap / this.#shape.chunkTokens) || 1);
    this.#launch('route', 'mt_route', { ...c, ticket: this.#bufs.routeTicket }, grid, THREADS, stream);
  }

  gather(stream: Stream, c: GatherCall): void {
    // A thread per 16 bytes of the rows, up to a block a row (mt_gather gives a few rows more threads
    // each); a thread an entry where it only names the row (rowOf).
    const lanes = this.#bufs.rowOf ? 1 : Math.min(Math.max(GROUP, Math.ceil(this.#shape.rowBytes / 16)), THREADS);
    this.#launch('gather', 'mt_gather', this.#gatherArgs(c), this.#blocks(c.tokenCap * this.#shape.topk * lanes), THREADS, stream);
  }

  /**
   * One launch of one block (mt_route_gather: loads all at once, counts in shared memory) where the
   * call's entries and buckets fit it and the gather moves little: token numbers (rowOf), or rows up to
   * SMALL_GATHER_BYTES in all. Else route, then gather, which wait on memory many times in turn.
   */
  routeAndGather(stream: Stream, r: RouteCall, g: GatherCall): void {
    const entries = r.tokenCap * this.#shape.topk;
    const moved = this.#bufs.rowOf ? 0 : entries * this.#shape.rowBytes;
    if (entries > SMALL_ENTRIES || this.#shape.buckets > SMALL_BUCKETS || moved > SMALL_GATHER_BYTES) {
      this.route(stream, r);
      this.gather(stream, g);
      return;
    }
    this.#launch('routeGather', 'mt_route_gather', { ...r, ...this.#gatherArgs(g) }, 1, THREADS, stream);
  }

  layout(stream: Stream, c: LayoutCall): void {
    const s = this.#shape;
    const args = { ...c, oso: this.#bufs.routeOso, recvMeta: this.#bufs.recvMeta };
    if (s.layout === 'expanded') {
      this.#launch('layout', 'mt_dispatch_layout', args, s.expertsPerRank, THREADS, stream);
      return;
    }
    this.#launch('layout', 'mt_dispatch_layout', args, 1, THREADS, stream);
    // At most a block an SM: each block adds its counts once (kernels/moe-tokens.cu mt_dispatch_unpack).
    this.#launch('layout', 'mt_dispatch_unpack', args, Math.min(this.#blocks(s.recvRows * s.topk), this.#device.multiprocessors), THREADS, stream);
  }

  reduce(stream: Stream, c: ReduceCall): void {
    const dtype = DTYPES[c.dtype];
    const args = { ...c, gate: this.#bufs.combineOso, recv: this.#bufs.back, dtype: dtype.code, ticket: this.#bufs.reduceTicket };
    // A thread sums 16 bytes of a row where the rows allow (else one element: the grid strides).
    this.#launch('reduce', 'mt_combine_reduce', args, this.#blocks((c.tokenCap * c.hidden * dtype.bytes) / 16), THREADS, stream);
  }

  pullFrom(y: DeviceBuffer): ((stream: Stream, c: ReduceCall) => void) | undefined {
    const yPeers = y.symmetric && this.#osoPeers !== 0n ? (this.#device.peers?.(y) ?? 0n) : 0n;
    if (yPeers === 0n) return undefined;
    return (stream, c) => {
      const dtype = DTYPES[c.dtype];
      const args = { ...c, gate: this.#bufs.combineOso, recv: undefined, dtype: dtype.code, ticket: this.#bufs.reduceTicket, yPeers, osoPeers: this.#osoPeers };
      this.#launch('reduce', 'mt_combine_pull', args, this.#blocks((c.tokenCap * c.hidden * dtype.bytes) / 16), THREADS, stream);
    };
  }

  close(): void {
    this.#device.close();
  }

  /** mt_gather's arguments (mt_route_gather takes them too). */
  #gatherArgs(c: GatherCall): Record<string, Value> {
    return { ...c, sendMeta: this.#bufs.sendMeta, oso: this.#bufs.routeOso };
  }

  /** A grid-stride kernel's blocks for `work` threads: at most 4 a multiprocessor (a full one of 256-thread blocks at 8). */
  #blocks(work: number): number {
    return Math.max(1, Math.min(Math.ceil(work / THREADS), 4 * this.#device.multiprocessors));
  }

  #launch(spec: TokenKernelName, kernel: string, args: Record<string, Value>, grid: number, block: number, stream: Stream): void {
    const view = this.#device.params(spec);
    const common = this.#common;
    for (const [i, [name, kind]] of TOKEN_KERNELS[spec].fields.entries()) {
      const v = name in args ? args[name] : common[name];
      if (kind === 'ptr') view.setBigUint64(8 * i, v === undefined ? 0n : typeof v === 'bigint' ? v : this.#device.address(v as DeviceBuffer), true);
      else view.setBigInt64(8 * i, BigInt(typeof v === 'boolean' ? Number(v) : ((v as number | undefined) ?? 0)), true);
    }
    this.#device.launch(spec, kernel, grid, block, stream);
  }
}
