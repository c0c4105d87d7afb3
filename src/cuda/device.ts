// One GPU as seen from one thread: its primary context, streams, events, memory and graphs.
import koffi from 'koffi';
import {
  attr,
  check,
  cu,
  CU_EVENT_DISABLE_TIMING,
  CU_MEMHOSTREGISTER_DEVICEMAP,
  CU_STREAM_CAPTURE_MODE_THREAD_LOCAL,
  CU_STREAM_NON_BLOCKING,
  CUDA_ERROR_NOT_READY,
  CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED,
  outI32,
  outU64,
} from './driver.js';
import { PeerAccessError, UnsupportedDeviceError } from '../errors.js';

/** Pinned host memory mapped for the GPU: `view` on the host, `device` the GPU's address of it. */
export interface HostMapped {
  readonly view: ArrayBuffer;
  /** Its address on the host (pinned: the copy engines reach it directly). */
  readonly host: bigint;
  readonly device: bigint;
  release(): void;
}

export class CudaStream {
  readonly kind = 'stream' as const;
  /**
   * Whether the last kernel queued here lets the next one in early while it still waits on its
   * peers (jit/module.ts launchEarly: only a single block may then wait beside it).
   */
  heldOpen = false;
  constructor(readonly handle: bigint) {}
  synchronize(): void {
    check('cuStreamSynchronize', cu().cuStreamSynchronize(this.handle));
  }
  /** true when everything queued here has finished. */
  query(): boolean {
    const s = cu().cuStreamQuery(this.handle);
    if (s === CUDA_ERROR_NOT_READY) return false;
    check('cuStreamQuery', s);
    return true;
  }
  waitEvent(event: CudaEvent): void {
    check('cuStreamWaitEvent', cu().cuStreamWaitEvent(this.handle, event.handle, 0));
  }
}

export class CudaEvent {
  constructor(readonly handle: bigint) {}
  record(stream: CudaStream): void {
    check('cuEventRecord', cu().cuEventRecord(this.handle, stream.handle));
  }
  /** true when the work before the record has finished. */
  query(): boolean {
    const s = cu().cuEventQuery(this.handle);
    if (s === CUDA_ERROR_NOT_READY) return false;
    check('cuEventQuery', s);
    return true;
  }
  synchronize(): void {
    check('cuEventSynchronize', cu().cuEventSynchronize(this.handle));
  }
  /** Milliseconds between two recorded timing events. */
  elapsedSince(start: CudaEvent): number {
    const ms = new Float32Array(1);
    check('cuEventElapsedTime', cu().cuEventElapsedTime(ms, start.handle, this.handle));
    return ms[0];
  }
  destroy(): void {
    check('cuEventDestroy', cu().cuEventDestroy(this.handle));
  }
}

/** An instantiated CUDA graph. */
export class CudaGraph {
  #exec: bigint;
  #graph: bigint;
  constructor(graph: bigint, exec: bigint) {
    this.#graph = graph;
    this.#exec = exec;
  }
  launch(stream: CudaStream): void {
    check('cuGraphLaunch', cu().cuGraphLaunch(this.#exec, stream.handle));
  }
  destroy(): void {
    if (this.#exec === 0n) return;
    check('cuGraphExecDestroy', cu().cuGraphExecDestroy(this.#exec));
    check('cuGraphDestroy', cu().cuGraphDestroy(this.#graph));
    this.#exec = 0n;
  }
}

export class CudaDevice {
  readonly ordinal: number;
  readonly context: bigint;
  readonly name: string;
  readonly smCount: number;
  /** e.g. 90 for sm_90. */
  readonly arch: number;
  #released = false;

  /**
   * The GPU of the context current on this thread: code beside a communicator (its compute, built
   * in the rank's thread after the communicator made its context current) runs where it runs.
   */
  static current(): CudaDevice {
    return new CudaDevice(outI32('cuCtxGetDevice', (o) => cu().cuCtxGetDevice(o)));
  }

  constructor(ordinal: number) {
    const d = cu();
    this.ordinal = ordinal;
    const dev = outI32('cuDeviceGet', (o) => d.cuDeviceGet(o, ordinal));
    this.context = outU64('cuDevicePrimaryCtxRetain', (o) => d.cuDevicePrimaryCtxRetain(o, dev));
    this.makeCurrent();
    const nameBuf = Buffer.alloc(256);
    check('cuDeviceGetName', d.cuDeviceGetName(nameBuf, 256, dev));
    this.name = nameBuf.toString('utf8', 0, nameBuf.indexOf(0));
    const get = (a: number) => outI32('cuDeviceGetAttribute', (o) => d.cuDeviceGetAttribute(o, a, dev));
    this.smCount = get(attr.multiprocessorCount);
    this.arch = get(attr.computeCapabilityMajor) * 10 + get(attr.computeCapabilityMinor);
    if (get(attr.unifiedAddressing) !== 1) throw new UnsupportedDeviceError(ordinal, 'unified addressing');
  }

  static count(): number {
    return outI32('cuDeviceGetCount', (o) => cu().cuDeviceGetCount(o));
  }

  makeCurrent(): void {
    check('cuCtxSetCurrent', cu().cuCtxSetCurrent(this.context));
  }

  /** Lets kernels on this device address memory of `peer` (no-op for the same device). */
  enablePeerAccess(peer: CudaDevice): void {
    if (peer.ordinal === this.ordinal) return;
    const can = outI32('cuDeviceCanAccessPeer', (o) => cu().cuDeviceCanAccessPeer(o, this.ordinal, peer.ordinal));
    if (!can) throw new PeerAccessError(this.ordinal, peer.ordinal);
    // Enables access from the current context: make it ours (constructing `peer` made its own current).
    this.makeCurrent();
    const s = cu().cuCtxEnablePeerAccess(peer.context, 0);
    if (s !== CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED) check('cuCtxEnablePeerAccess', s);
  }

  createStream(): CudaStream {
    return new CudaStream(outU64('cuStreamCreate', (o) => cu().cuStreamCreate(o, CU_STREAM_NON_BLOCKING)));
  }
  destroyStream(s: CudaStream): void {
    check('cuStreamDestroy', cu().cuStreamDestroy(s.handle));
  }

  createEvent(timing = false): CudaEvent {
    const flags = timing ? 0 : CU_EVENT_DISABLE_TIMING;
    return new CudaEvent(outU64('cuEventCreate', (o) => cu().cuEventCreate(o, flags)));
  }

  alloc(bytes: number): bigint {
    return outU64('cuMemAlloc', (o) => cu().cuMemAlloc(o, BigInt(Math.max(bytes, 1))));
  }
  /**
   * Host memory the GPU writes directly (pinned and mapped): what kernels leave there, the host reads
   * as plain memory, with no driver call that could queue behind other streams' work.
   */
  hostMapped(bytes: number): HostMapped {
    const mem = koffi.alloc('uint8_t', bytes);
    const host = BigInt(koffi.address(mem));
    const view = koffi.view(mem, bytes);
    new Uint8Array(view).fill(0);
    check('cuMemHostRegister', cu().cuMemHostRegister(host, BigInt(bytes), CU_MEMHOSTREGISTER_DEVICEMAP));
    const device = outU64('cuMemHostGetDevicePointer', (o) => cu().cuMemHostGetDevicePointer(o, host, 0));
    let registered = true;
    return {
      view,
      host,
      device,
      release: () => {
        if (!registered) return;
        registered = false;
        check('cuMemHostUnregister', cu().cuMemHostUnregister(host));
        void mem; // the allocation lives as long as this closure
      },
    };
  }
  free(ptr: bigint): void {
    check('cuMemFree', cu().cuMemFree(ptr));
  }
  memInfo(): { free: number; total: number } {
    const f = new BigUint64Array(1);
    const t = new BigUint64Array(1);
    check('cuMemGetInfo', cu().cuMemGetInfo(f, t));
    return { free: Number(f[0]), total: Number(t[0]) };
  }
  upload(dst: bigint, src: ArrayBufferView): void {
    check('cuMemcpyHtoD', cu().cuMemcpyHtoD(dst, src, BigInt(src.byteLength)));
  }
  download(dst: ArrayBufferView, src: bigint): void {
    check('cuMemcpyDtoH', cu().cuMemcpyDtoH(dst, src, BigInt(dst.byteLength)));
  }
  /** Stream-ordered copies between device memory and pinned host memory (hostMapped's `host`). */
  uploadAsync(dst: bigint, srcHost: bigint, bytes: number, stream: CudaStream): void {
    check('cuMemcpyHtoDAsync', cu().cuMemcpyHtoDAsync(dst, srcHost, BigInt(bytes), stream.handle));
  }
  downloadAsync(dstHost: bigint, src: bigint, bytes: number, stream: CudaStream): void {
    check('cuMemcpyDtoHAsync', cu().cuMemcpyDtoHAsync(dstHost, src, BigInt(bytes), stream.handle));
  }
  copyAsync(dst: bigint, src: bigint, bytes: number, stream: CudaStream): void {
    check('cuMemcpyDtoDAsync', cu().cuMemcpyDtoDAsync(dst, src, BigInt(bytes), stream.handle));
  }
  /**
   * Stream-ordered copy between unified addresses on any GPUs: to a peer's allocation (peer access
   * on) or to this process's IPC mapping of it. The copy engine moves the bytes over NVLink/PCIe.
   */
  copyPeerAsync(dst: bigint, src: bigint, bytes: number, stream: CudaStream): void {
    check('cuMemcpyAsync', cu().cuMemcpyAsync(dst, src, BigInt(bytes), stream.handle));
  }
  memsetAsync(dst: bigint, value: number, bytes: number, stream: CudaStream): void {
    check('cuMemsetD8Async', cu().cuMemsetD8Async(dst, value, BigInt(bytes), stream.handle));
  }
  synchronize(): void {
    check('cuCtxSynchronize', cu().cuCtxSynchronize());
  }

  /** Captures the work `fn` queues on `stream` (and streams it forks through events) into a graph. */
  capture(stream: CudaStream, fn: () => void): CudaGraph {
    check('cuStreamBeginCapture', cu().cuStreamBeginCapture(stream.handle, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
    let failure: unknown;
    try {
      fn();
    } catch (err) {
      failure = err;
    }
    // Capture must always be ended, or the stream stays unusable.
    const graph = outU64('cuStreamEndCapture', (o) => cu().cuStreamEndCapture(stream.handle, o));
    if (failure !== undefined) {
      if (graph !== 0n) cu().cuGraphDestroy(graph);
      throw failure;
    }
    const exec = outU64('cuGraphInstantiate', (o) => cu().cuGraphInstantiate(o, graph, 0n));
    return new CudaGraph(graph, exec);
  }

  release(): void {
    if (this.#released) return;
    this.#released = true;
    check('cuDevicePrimaryCtxRelease', cu().cuDevicePrimaryCtxRelease(this.ordinal));
  }
}
