// The cuda backend: one rank's communicator on one GPU. Ranks may share a GPU (each has its own
// streams and its share of the SMs) or sit on different GPUs of this process (peer access).
import type { AllToAllVArgs, Comm, DeviceBuffer, Handle, Lane, Replay, Stream } from '../backend.js';
import type { CommOptions } from '../create.js';
import { hostname } from 'node:os';
import { CudaDevice, CudaEvent, CudaGraph, CudaStream } from '../../cuda/device.js';
import { exportIpcHandle, openIpcHandle } from '../../cuda/ipc.js';
import { EventTimer, hostWaitLimitMs } from '../event-timer.js';
import { GpuBuffer, GpuMemory } from '../gpu-memory.js';
import { checkAllToAllV, type CheckContext } from '../../collectives/check.js';
import { StatusCode, STATUS_BYTES, statusError } from '../../collectives/status.js';
import { CommAbortedError, TimeoutError, UsageError } from '../../errors.js';
import { KernelFunction, KernelModule, StructLauncher } from '../../jit/module.js';
import { defaultPlan, gridCopyFromEnv, validatePlan, type GridCopy, type LaunchPlan, type PlanContext } from '../../tune/plan.js';
import { allGather, decodeJson, encodeJson } from '../../world/all-gather.js';
import { storeBarrier } from '../../world/barrier.js';
import type { Store } from '../../world/store.js';
import { A2AV_PARAMS_BYTES, writeA2avParams } from './kernel-params.js';
import { copySharedBytes, kernelSharedBytes, laneBytes, MAX_WORLD } from './layout.js';
import { CudaHandle, CudaLane, EVENT_RING } from './lane.js';
import { waitForEvent } from './wait.js';

/** Where a rank runs: peers in another process are reached through CUDA IPC mappings. */
interface RankPlace {
  pid: number;
  host: string;
  ordinal: number;
}

export async function createCudaComm(opts: CommOptions): Promise<CudaComm> {
  const count = CudaDevice.count();
  if (count === 0) throw new UsageError('cuda backend: the driver reports no GPU');
  const device = new CudaDevice((opts.localRank ?? opts.rank) % count);
  const where = (
    await allGather(opts.store, 'a2av/cuda/where', opts.rank, opts.worldSize, encodeJson({ pid: process.pid, host: hostname(), ordinal: device.ordinal }), opts.timeoutMs)
  ).map((b) => decodeJson<RankPlace>(b));
  const away = where.findIndex((w) => w.host !== hostname());
  if (away >= 0)
    throw new UsageError(`cuda backend: rank ${away} runs on ${where[away].host}; it reaches peers within one machine only (use nccl across machines)`);
  // Peers in this process need peer access enabled here; peers in other processes get it when
  // their memory is mapped (CUDA IPC, lazily enabled).
  // Each peer GPU's context is retained once, for as long as this communicator lives.
  const peerDevices = new Map<number, CudaDevice>();
  for (const w of where) {
    if (w.pid !== process.pid || w.ordinal === device.ordinal || peerDevices.has(w.ordinal)) continue;
    const peer = new CudaDevice(w.ordinal);
    peerDevices.set(w.ordinal, peer);
    device.enablePeerAccess(peer);
  }
  device.makeCurrent();
  const ranksOnDevice = where.filter((w) => w.ordinal === device.ordinal).length;
  // Rank 0 compiles (or fills the on-disk cache) first; the others then load the cached binary.
  const barrier = (name: string) => storeBarrier(opts.store, { name, worldSize: opts.worldSize, timeoutMs: opts.timeoutMs });
  if (opts.rank !== 0) await barrier('a2av/cuda/module');
  const oneGpu = where.every((w) => w.ordinal === device.ordinal) && process.env.A2AV_FORCE_SYSTEM_SCOPE !== '1';
  const module = new KernelModule('a2av.cu', device.arch, [`-DA2AV_ONE_GPU=${oneGpu ? 1 : 0}`]);
  if (opts.rank === 0) await barrier('a2av/cuda/module');
  const comm = new CudaComm(opts, device, module, ranksOnDevice, where, [...peerDevices.values()]);
  await comm.init();
  return comm;
}

export class CudaComm implements Comm, CheckContext {
  readonly backend = 'cuda' as const;
  readonly rank: number;
  readonly worldSize: number;
  readonly timeoutMs: number;
  readonly deviceName: string;
  readonly laneCount: number;
  readonly ranksOnDevice: number;
  readonly #device: CudaDevice;
  readonly #module: KernelModule;
  readonly #store: Store;
  readonly #launcher: StructLauncher;
  readonly #copyFn: KernelFunction;
  readonly #gridCopy: GridCopy = gridCopyFromEnv();
  readonly #doneFn: KernelFunction;
  readonly #memory: GpuMemory;
  readonly #lanes: CudaLane[] = [];
  readonly #residentCache = new Map<number, number>();
  readonly #statusHost = new BigInt64Array(STATUS_BYTES / 8);
  #pad!: GpuBuffer;
  #symmetricCount = 0;
  #barriers = 0;
  #aborted: Error | undefined;
  #capture: { stream: CudaStream; lanes: Set<CudaLane> } | undefined;
  readonly #timer: EventTimer;
  readonly #smem: number;
  /** Programmatic dependent launch (Hopper+); A2AV_EARLY_LAUNCH=0 turns it off. */
  readonly #earlyLaunch: boolean;

  readonly #places: RankPlace[];
  readonly #crossProcess: boolean;

  readonly #peerDevices: CudaDevice[];

  constructor(opts: CommOptions, device: CudaDevice, module: KernelModule, ranksOnDevice: number, places: RankPlace[], peerDevices: CudaDevice[]) {
    this.#peerDevices = peerDevices;
    this.#places = places;
    this.#crossProcess = places.some((p) => p.pid !== process.pid);
    this.rank = opts.rank;
    this.worldSize = opts.worldSize;
    this.timeoutMs = opts.timeoutMs;
    this.laneCount = opts.lanes;
    this.ranksOnDevice = ranksOnDevice;
    this.#device = device;
    this.#timer = new EventTimer(device);
    this.#module = module;
    this.#store = opts.store;
    this.deviceName = `${device.name} #${device.ordinal}`;
    this.#memory = new GpuMemory(device, this);
    this.#launcher = new StructLauncher(module.fn('a2av_1d'), A2AV_PARAMS_BYTES);
    this.#copyFn = module.fn('a2av_copy');
    this.#doneFn = module.fn('a2av_done');
    if (this.worldSize > MAX_WORLD) throw new UsageError(`cuda backend supports at most ${MAX_WORLD} ranks, got ${this.worldSize}`);
    this.#smem = kernelSharedBytes(this.worldSize);
    this.#earlyLaunch = device.arch >= 90 && process.env.A2AV_EARLY_LAUNCH !== '0';
    if (this.#smem > 48 * 1024) this.#launcher.fn.allowSharedBytes(this.#smem);
  }

  async init(): Promise<void> {
    const stride = laneBytes(this.worldSize);
    this.#pad = (await this.#allocSymmetric(stride * this.laneCount, -2)) as GpuBuffer;
    for (let i = 0; i < this.laneCount; i++) this.#lanes.push(new CudaLane(i, this.#device.createStream(), i * stride, this.#device));
    // Pads must be zero on every rank before any peer raises a flag in them.
    this.#device.memsetAsync(this.#pad.ptr, 0, this.#pad.bytes, this.#lanes[0].stream);
    this.#lanes[0].stream.synchronize();
    await this.barrier();
  }

  owns(buf: DeviceBuffer): boolean {
    return this.#memory.owns(buf);
  }
  ownsLane(lane: Lane): boolean {
    return this.#lanes[lane.index] === lane;
  }

  alloc(bytes: number): DeviceBuffer {
    return this.#memory.alloc(bytes);
  }

  allocSymmetric(bytes: number): Promise<DeviceBuffer> {
    this.#memory.checkBytes(bytes);
    return this.#allocSymmetric(bytes, this.#symmetricCount++);
  }

  async #allocSymmetric(bytes: number, id: number): Promise<GpuBuffer> {
    const ptr = this.#device.alloc(bytes);
    const mine = { ptr: ptr.toString(), bytes, ipc: this.#crossProcess ? exportIpcHandle(ptr) : '' };
    let peers: (typeof mine)[];
    try {
      peers = (await allGather(this.#store, `a2av/cuda/sym/${id}`, this.rank, this.worldSize, encodeJson(mine), this.timeoutMs)).map((b) =>
        decodeJson<typeof mine>(b),
      );
    } catch (err) {
      this.#device.free(ptr);
      throw err;
    }
    const odd = peers.findIndex((p) => p.bytes !== bytes);
    if (odd >= 0) {
      this.#device.free(ptr);
      throw new UsageError(`allocSymmetric #${id}: rank ${this.rank} asked for ${bytes} bytes but rank ${odd} for ${peers[odd].bytes}`);
    }
    const mappings: bigint[] = [];
    const addresses = peers.map((p, r) => {
      if (this.#places[r].pid === process.pid) return BigInt(p.ptr);
      const mapped = openIpcHandle(p.ipc);
      mappings.push(mapped);
      return mapped;
    });
    const table = this.#device.alloc(8 * this.worldSize);
    this.#device.upload(table, BigUint64Array.from(addresses));
    return this.#memory.adopt(new GpuBuffer(ptr, bytes, id, table, mappings));
  }

  free(buf: DeviceBuffer): void {
    this.#memory.free(buf);
  }

  write(buf: DeviceBuffer, data: ArrayBufferView, offsetBytes = 0): void {
    this.#memory.write(buf, data, offsetBytes);
  }

  read(buf: DeviceBuffer, offsetBytes: number, bytes: number): Uint8Array {
    return this.#memory.read(buf, offsetBytes, bytes);
  }

  copy(dst: DeviceBuffer, src: DeviceBuffer, bytes: number, stream?: Stream): void {
    this.#memory.copy(dst, src, bytes, stream ?? this.#lanes[0].stream);
  }

  lane(index: number): Lane {
    const lane = this.#lanes[index];
    if (!lane) throw new UsageError(`rank ${this.rank}: lane ${index} out of range (this communicator has ${this.laneCount})`);
    return lane;
  }

  /** The plan a call with this much input gets by default, and the limit any override must meet. */
  planContext(inputBytes: number, rowBytes?: number): PlanContext {
    return {
      residentBlocks: (t) => this.#residentBlocks(t),
      ranksOnDevice: this.ranksOnDevice,
      inputBytes,
      rowBytes,
      allOnDevice: this.ranksOnDevice === this.worldSize,
      gridCopy: this.#gridCopy,
    };
  }

  allToAllV(args: AllToAllVArgs): Handle {
    if (this.#aborted) throw new CommAbortedError(this.rank, { cause: this.#aborted });
    const lane = this.#lanes[checkAllToAllV(this, args)];
    const ctx = this.planContext(Math.min(args.input.bytes, args.sizeHintBytes ?? Infinity), args.rowBytes);
    const plan: LaunchPlan = args.plan ? validatePlan(args.plan, ctx) : defaultPlan(ctx);
    const input = args.input as GpuBuffer;
    const output = args.output as GpuBuffer;
    writeA2avParams(this.#launcher.view, {
      input: input.ptr,
      inputBytes: input.bytes,
      outPeers: output.peerTable,
      outputBytes: output.bytes,
      inSplits: (args.inSplits as GpuBuffer).ptr,
      outSplitsOffsets: (args.outSplitsOffsets as GpuBuffer).ptr,
      padPeers: this.#pad.peerTable,
      laneOffset: lane.offset,
      rowBytes: args.rowBytes,
      outId: output.symmetricId,
      timeoutNs: BigInt(Math.round(this.timeoutMs * 1e6)),
      rank: this.rank,
      world: this.worldSize,
      pad: this.#pad.ptr,
      gridCopy: plan.grid !== undefined,
    });
    const caller = (args.stream as CudaStream | undefined) ?? this.#capture?.stream;
    const slot = lane.calls % EVENT_RING;
    if (caller && caller !== lane.stream) {
      lane.forks[slot].record(caller);
      lane.stream.waitEvent(lane.forks[slot]);
    }
    // An early launch keeps the next call's blocks resident beside this call's, so it is only safe
    // (no rank starved of SMs while others wait on it) when twice the blocks of every rank here fit.
    const launcher = this.#launcher;
    if (this.#earlyLaunch && 2 * plan.blocks <= Math.floor(ctx.residentBlocks(plan.threads) / this.ranksOnDevice))
      launcher.launchEarly(plan.blocks, plan.threads, lane.stream, this.#smem);
    else launcher.launch(plan.blocks, plan.threads, lane.stream, this.#smem);
    if (plan.grid) {
      // The copy grid is sized from the hint; its blocks loop when the sends turn out larger. Early
      // launches are safe here: a2av_1d lets them be scheduled only after every rank has arrived.
      const t = plan.grid.threads;
      const blocks = Math.max(1, Math.min(2 ** 31 - 1, Math.ceil(ctx.inputBytes / (16 * t))));
      const go = this.#earlyLaunch ? launcher.launchEarly.bind(launcher) : launcher.launch.bind(launcher);
      go(blocks, t, lane.stream, copySharedBytes(this.worldSize), this.#copyFn);
      go(1, Math.min(1024, Math.max(32, Math.ceil(this.worldSize / 32) * 32)), lane.stream, 0, this.#doneFn);
    }
    const event = lane.done[slot];
    event.record(lane.stream);
    lane.calls++;
    this.#capture?.lanes.add(lane);
    return new CudaHandle(this, lane, lane.calls, event);
  }

  capture(stream: Stream, fn: () => void): Replay {
    const s = stream as CudaStream;
    if (this.#capture) throw new UsageError(`rank ${this.rank}: capture() is already in progress`);
    this.#capture = { stream: s, lanes: new Set() };
    let graph: CudaGraph;
    try {
      graph = this.#device.capture(s, () => {
        fn();
        for (const lane of this.#capture!.lanes) s.waitEvent(lane.lastEvent());
      });
    } finally {
      this.#capture = undefined;
    }
    return {
      launch: (on?: Stream) => {
        if (this.#aborted) throw new CommAbortedError(this.rank, { cause: this.#aborted });
        graph.launch((on as CudaStream | undefined) ?? s);
      },
      close: () => graph.destroy(),
    };
  }

  timeLoop(stream: Stream, iters: number, fn: () => void, leadIn = 0): number {
    const ms = this.#timer.time(stream as CudaStream, iters, fn, leadIn, (end, calls) => this.hostWait(end, 'timed loop', calls));
    for (const lane of this.#lanes) this.raiseStatus(lane);
    return ms;
  }

  /** Waits on the host for `event`, bounded: a GPU that never finishes becomes a TimeoutError. */
  hostWait(event: CudaEvent, what: string, calls = 1): void {
    const limitMs = hostWaitLimitMs(this.timeoutMs, calls);
    if (!waitForEvent(event, limitMs)) {
      this.#aborted = new TimeoutError(this.rank, -1, limitMs, `${what} did not finish on the device`);
      throw this.#aborted;
    }
  }

  /** Reads and clears the lane's status record; throws the error it holds. */
  raiseStatus(lane: CudaLane): void {
    const st = this.#statusHost;
    const at = this.#pad.ptr + BigInt(lane.offset);
    this.#device.download(st, at);
    if (st[0] === 0n) return;
    const err = statusError(st, this.timeoutMs, `allToAllV on lane ${lane.index}`)!;
    if (Number(st[0]) === StatusCode.timeout) this.#aborted = err;
    st.fill(0n);
    this.#device.upload(at, st);
    throw err;
  }

  barrier(): Promise<void> {
    return storeBarrier(this.#store, { name: `a2av/cuda/comm/${this.#barriers++}`, worldSize: this.worldSize, timeoutMs: this.timeoutMs });
  }

  freeMemory(): number {
    return this.#device.memInfo().free;
  }

  async close(): Promise<void> {
    // Peers may still be writing into our output or pad: meet them first. A peer that gave up on
    // this job (timeout) never comes, so a failed meeting only delays the release, bounded.
    if (!this.#aborted) await this.barrier().catch(() => {});
    this.#device.synchronize();
    this.#memory.freeAll();
    for (const lane of this.#lanes) {
      for (const e of [...lane.done, ...lane.forks]) e.destroy();
      this.#device.destroyStream(lane.stream);
    }
    this.#timer.destroy();
    this.#module.unload();
    for (const peer of this.#peerDevices) peer.release();
    this.#device.release();
  }

  #residentBlocks(threads: number): number {
    let n = this.#residentCache.get(threads);
    if (n === undefined) {
      n = this.#launcher.fn.maxActiveBlocksPerSm(threads, this.#smem) * this.#device.smCount;
      this.#residentCache.set(threads, n);
    }
    return n;
  }
}
