// The cuda backend: one rank's communicator on one GPU. Ranks may share a GPU (each has its own
// streams and its share of the SMs) or sit on different GPUs (peer access, or CUDA IPC across
// processes). setup.ts builds it, symmetric.ts maps peers' memory, kernels.ts queues the kernels,
// records.ts reads each call's outcome back.
import type {
  AllReduceArgs,
  AllToAllV2dArgs,
  AllToAllV2dOffsetArgs,
  AllToAllVArgs,
  BarrierOptions,
  Comm,
  CopyOffsets,
  CommOptions,
  DeviceBuffer,
  ExchangePlan,
  Handle,
  Lane,
  PeerCopyArgs,
  PlanAllToAllV2dArgs,
  PlanAllToAllV2dOffsetArgs,
  PlanAllToAllVArgs,
  Replay,
  Stream,
} from '../backend.js';
import { ABORTED, EXPLAINED, ON_REPLAY, type Explain } from '../backend.js';
import { CudaStream, type CudaDevice, type CudaEvent, type CudaGraph } from '../../cuda/device.js';
import { queueShortfall } from '../../cuda/hardware-queues.js';
import { noteLaneCall } from '../../cuda/driver-trace.js';
import type { KernelModule } from '../../jit/module.js';
import { loadModules, type ModuleLoad } from './modules.js';
import { EventTimer, hostWaitLimitMs } from '../event-timer.js';
import { GpuBuffer, GpuMemory } from '../gpu-memory.js';
import { EventRing, type HostWaiter } from '../stream-lane.js';
import { checkBarrier, gatheredValues, gatherWords, checkLaneIndex, checkAllReduce, checkAllToAllV, checkArgsObject, checkCapture, PEER_COPY_ARGS, checkAllToAllV2d, checkAllToAllV2dOffset, checkPlan, checkPlanMove, planBuffers, checkStream, LAUNCH_IN_CAPTURE, REPLAY_CALLS_PER_LANE, TOO_MANY_REPLAY_CALLS, type CheckContext, type PlanCheckArgs } from '../../collectives/check.js';
import { planWhat } from '../../collectives/call-names.js';
import type { ExchangeKind } from '../../collectives/exchange-rules.js';
import { ClosedError, CommAbortedError, TimeoutError, UsageError } from '../../errors.js';
import { allGatherJson, endingOnTimeout, GatherSweep, meet } from '../../world/all-gather.js';
import { gpuSetUpMs, startWaitMs } from '../../world/set-up-waits.js';
import type { Store } from '../../world/store.js';
import { AllReduceCalls } from './all-reduce.js';
import { A2avKernels } from './kernels.js';
import type { CallHost } from './call-host.js';
import type { PlanProbe } from '../../tune/table.js';
import { exchangeCall, MoeCalls, payloadOf, rowsOf } from './moe.js';
import { CudaLane } from './lane.js';
import { laneBytes, LaneHeaderField, MAX_WORLD, STATUS_AREA_BYTES, STATUS_RING } from './layout.js';
import { LaneRecords, type LaneCall } from './records.js';
import { allocSymmetric, contextSharers, type RankPlace, type SymmetricContext } from './symmetric.js';
import { waitForEvent } from '../../cuda/wait.js';

export interface CudaCommInit {
  opts: CommOptions;
  device: CudaDevice;
  module: KernelModule;
  /** The MoE kernels (kernels/exchange.cu). */
  moeModule: KernelModule;
  /** The allReduce kernels (kernels/all-reduce.cu). */
  allReduceModule: KernelModule;
  /** Other ranks of this process run these modules too (modules.ts): unloaded only after meeting them. */
  lendsModules: boolean;
  /** For the modules loaded later (kernelModule). */
  loads: ModuleLoad;
  places: RankPlace[];
  /** Other GPUs of this process, retained for as long as the communicator lives. */
  peerDevices: CudaDevice[];
}

/** A graph being recorded: its stream, and the lane and operation of each call it holds, in issue order. */
interface Capture {
  stream: CudaStream;
  calls: { lane: CudaLane; what: string; explain?: Explain }[];
  /** What each launch of the replay runs on the host (ON_REPLAY). */
  onLaunch: (() => void)[];
}

export class CudaComm implements Comm, CheckContext, HostWaiter {
  readonly backend = 'cuda' as const;
  readonly rank: number;
  readonly worldSize: number;
  readonly timeoutMs: number;
  readonly deviceName: string;
  readonly laneCount: number;
  readonly ranksOnDevice: number;
  readonly #device: CudaDevice;
  readonly #store: Store;
  /** The host gathers of barrier() and gatherOnHost(), whose keys it removes as they are done (all-gather.ts). */
  readonly #sweep: GatherSweep;
  readonly #kernels: A2avKernels;
  readonly #moe: MoeCalls;
  readonly #allReduce: AllReduceCalls;
  readonly #memory: GpuMemory;
  readonly #lanes: CudaLane[] = [];
  readonly #symmetric: SymmetricContext;
  readonly #peerDevices: CudaDevice[];
  readonly #lendsModules: boolean;
  readonly #loads: ModuleLoad;
  /** Modules loaded after set-up (kernelModule), by file and options, each with whether it is lent. */
  readonly #later = new Map<string, Promise<{ modules: KernelModule[]; lends: boolean }>>();
  readonly #timer: EventTimer;
  /** Events of record() and of graph replays. */
  readonly #marks: EventRing;
  #records!: LaneRecords;
  #pad!: GpuBuffer;
  #symmetricCount = 0;
  #barriers = 0;
  #gathers = 0;
  #aborted: Error | undefined;
  #closed = false;
  #capture: Capture | undefined;

  constructor(init: CudaCommInit) {
    const { opts, device } = init;
    this.rank = opts.rank;
    this.worldSize = opts.worldSize;
    this.timeoutMs = opts.timeoutMs;
    this.laneCount = opts.lanes;
    if (this.worldSize > MAX_WORLD) throw new UsageError(`cuda backend supports at most ${MAX_WORLD} ranks, got ${this.worldSize}`);
    this.ranksOnDevice = init.places.filter((w) => w.ordinal === device.ordinal).length;
    // Ranks of this process on this GPU share its context and so its hardware queues: said once, by the first.
    const sharing = contextSharers(init.places, this.rank);
    const shortfall = queueShortfall(sharing.length * opts.lanes);
    if (shortfall !== undefined && sharing[0] === this.rank) process.emitWarning(shortfall, { code: 'A2AV_HARDWARE_QUEUES' });
    this.#device = device;
    this.#peerDevices = init.peerDevices;
    this.#lendsModules = init.lendsModules;
    this.#loads = init.loads;
    this.#store = opts.store;
    this.#sweep = new GatherSweep(opts.store);
    this.#timer = new EventTimer(device);
    this.#marks = new EventRing(device);
    this.deviceName = `${device.name} #${device.ordinal}`;
    this.#memory = new GpuMemory(device, this, opts.timeoutMs);
    const gpus = new Set(init.places.map((w) => `${w.host}/${w.ordinal}`)).size;
    this.#kernels = new A2avKernels({ module: init.module, device, worldSize: this.worldSize, ranksOnDevice: this.ranksOnDevice, gpus, laneCount: this.laneCount });
    const host: CallHost = {
      rank: this.rank,
      worldSize: this.worldSize,
      laneCount: this.laneCount,
      ranksOnDevice: this.ranksOnDevice,
      timeoutMs: this.timeoutMs,
      device,
      pad: () => this.#pad,
      follow: (lane, stream) => {
        this.#makeRoom(lane, 1);
        lane.follow((stream as CudaStream | undefined) ?? this.#capture?.stream);
      },
      finish: (lane, what) => this.#finish(lane, what),
      usable: () => this.#usable(),
      capturing: () => this.#capture !== undefined,
    };
    this.#moe = new MoeCalls(host, init.moeModule);
    this.#allReduce = new AllReduceCalls(host, init.allReduceModule);
    this.#symmetric = { device, store: opts.store, rank: this.rank, worldSize: this.worldSize, timeoutMs: this.timeoutMs, places: init.places };
  }

  async init(): Promise<void> {
    const stride = laneBytes(this.worldSize);
    this.#pad = this.#memory.adopt(await allocSymmetric(this.#symmetric, stride * this.laneCount, -2));
    const areas = this.#device.hostMapped(STATUS_AREA_BYTES * this.laneCount);
    this.#records = new LaneRecords(areas, this.laneCount, this.timeoutMs, (err) => (this.#aborted ??= err));
    for (let i = 0; i < this.laneCount; i++) this.#lanes.push(new CudaLane(i, this.#device.createStream(), i * stride, this.#device));
    this.#moe.prepare(this.#lanes);
    this.#allReduce.prepare(this.#memory.adopt(await allocSymmetric(this.#symmetric, this.#allReduce.stageBytes(), -3)), this.#lanes[0].stream);
    // Pads must be zero on every rank before any peer raises a flag in them; each lane's header
    // says where its status area is.
    this.#device.memsetAsync(this.#pad.ptr, 0, this.#pad.bytes, this.#lanes[0].stream);
    this.#lanes[0].stream.synchronize();
    for (const lane of this.#lanes) {
      this.#device.upload(this.#pad.ptr + BigInt(lane.offset + LaneHeaderField.status), BigUint64Array.of(this.#records.deviceAddress(lane.index)));
    }
    await this.barrier({ timeoutMs: gpuSetUpMs(this.timeoutMs) });
  }

  owns(buf: DeviceBuffer): boolean {
    return this.#memory.owns(buf);
  }
  ownsLane(lane: Lane): boolean {
    return this.#lanes[lane.index] === lane;
  }

  knowsStream(stream: Stream): boolean {
    // A made-up stream object reached the driver as an undefined handle (koffi's TypeError).
    return stream instanceof CudaStream;
  }

  alloc(bytes: number): DeviceBuffer {
    this.#open();
    return this.#memory.alloc(bytes);
  }

  async allocSymmetric(bytes: number): Promise<DeviceBuffer> {
    this.#usable();
    this.#memory.checkBytes(bytes);
    return this.#memory.adopt(await this.#setUp(allocSymmetric(this.#symmetric, bytes, this.#symmetricCount++)));
  }

  free(buf: DeviceBuffer): void {
    this.#open();
    this.#memory.free(buf);
  }

  write(buf: DeviceBuffer, data: ArrayBufferView, offsetBytes = 0): void {
    this.#open();
    this.#memory.write(buf, data, offsetBytes);
  }

  read(buf: DeviceBuffer, offsetBytes: number, bytes: number): Uint8Array {
    this.#open();
    return this.#memory.read(buf, offsetBytes, bytes);
  }

  copy(dst: DeviceBuffer, src: DeviceBuffer, bytes: number, stream?: Stream, at?: CopyOffsets): void {
    this.#open();
    this.#memory.copy(dst, src, bytes, stream ?? this.#lanes[0].stream, at);
  }

  copyToPeer(args: PeerCopyArgs): void {
    this.#open();
    checkArgsObject(this, 'copyToPeer', args, PEER_COPY_ARGS);
    this.#memory.copyToPeer(args, args.stream ?? this.#lanes[0].stream);
  }

  record(stream?: Stream): Handle {
    this.#open();
    checkStream(this, stream);
    const s = (stream as CudaStream | undefined) ?? this.#lanes[0].stream;
    return this.#marks.handle(this, s, 'the work recorded on a stream');
  }

  allToAllV2d(args: AllToAllV2dArgs): Handle {
    this.#open();
    const lane = this.#lanes[checkAllToAllV2d(this, args)];
    const x = exchangeCall('dispatch', { ...args, splits: args.inSplits }, rowsOf(args));
    return this.#moe.call(lane, x, payloadOf(args), args.stream, 'allToAllV2d');
  }
  allToAllV2dOffset(args: AllToAllV2dOffsetArgs): Handle {
    this.#open();
    const lane = this.#lanes[checkAllToAllV2dOffset(this, args)];
    const x = exchangeCall('combine', { ...args, splits: args.inSplitsOffsets }, rowsOf(args));
    return this.#moe.call(lane, x, payloadOf(args), args.stream, 'allToAllV2dOffset');
  }
  planAllToAllV(args: PlanAllToAllVArgs): ExchangePlan {
    this.#open();
    return this.#planOf('1d', args, planWhat('1d'));
  }
  planAllToAllV2d(args: PlanAllToAllV2dArgs): ExchangePlan {
    this.#open();
    return this.#planOf('dispatch', args, planWhat('dispatch'));
  }
  planAllToAllV2dOffset(args: PlanAllToAllV2dOffsetArgs): ExchangePlan {
    this.#open();
    return this.#planOf('combine', args, planWhat('combine'));
  }

  #planOf(kind: ExchangeKind, args: PlanCheckArgs & { stream?: Stream }, what: string): ExchangePlan {
    // Checked before any field is read (checkPlan refuses a missing argument object by name).
    const lane = this.#lanes[checkPlan(this, kind, args)];
    const splits = (kind === 'combine' ? args.inSplitsOffsets : args.inSplits) as DeviceBuffer;
    const plan = this.#moe.plan(lane, exchangeCall(kind, { ...args, splits }, { inRows: args.inputRows, outRows: args.outputRows }), args.stream, what, args.maxBlocks);
    const buffers = planBuffers(args);
    return {
      ready: plan.ready,
      move: (m) => {
        checkPlanMove(this, buffers, m);
        return plan.move(m);
      },
      close: () => plan.close(),
    };
  }

  lane(index: number): Lane {
    this.#open();
    checkLaneIndex(this, index);
    return this.#lanes[index];
  }

  allToAllV(args: AllToAllVArgs): Handle {
    this.#open();
    if (this.#aborted) throw new CommAbortedError(this.rank, { cause: this.#aborted });
    const lane = this.#lanes[checkAllToAllV(this, args)];
    const ctx = this.#kernels.planContext(Math.min(args.input.bytes, args.sizeHintBytes ?? Infinity), args.rowBytes, args.maxBlocks);
    const plan = this.#kernels.plan(ctx, args.plan);
    const input = args.input as GpuBuffer;
    const output = args.output as GpuBuffer;
    this.#makeRoom(lane, 1);
    lane.follow((args.stream as CudaStream | undefined) ?? this.#capture?.stream);
    this.#kernels.queue(
      lane.stream,
      {
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
        splitByPeer: this.#kernels.splitByPeer,
      },
      plan,
      ctx,
    );
    return this.#finish(lane, 'allToAllV');
  }

  /** ar_reduce (and ar_done after rounds) on the lane (all-reduce.ts); the handle reports this call's outcome. */
  /** For a2av tune (src/tune/sweep.ts): the shape and limits its candidate plans come from. */
  planProbe(): PlanProbe {
    return this.#kernels.probe();
  }

  allReduce(args: AllReduceArgs): Handle {
    this.#open();
    const lane = this.#lanes[checkAllReduce(this, args)];
    const output = args.output as GpuBuffer;
    // Peers write their sums into it.
    if (!output.symmetric) throw new UsageError(`rank ${this.rank}: allReduce output must be a symmetric buffer (allocSymmetric) on cuda: peers write the sum into it`);
    return this.#allReduce.call(lane, { input: args.input as GpuBuffer, output, count: args.count, dtype: args.dtype }, args.stream);
  }

  /** Before queueing `calls` calls on `lane`: waits until it holds few enough (pacing.ts). */
  #makeRoom(lane: CudaLane, calls: number): void {
    if (this.#capture) return;
    lane.pacer.makeRoom(lane.seq, calls, (event, n) => this.hostWait(event, `lane ${lane.index}: calls queued before call ${lane.seq + 1}`, n));
  }

  /** The handle of the call just queued on `lane`: it reads the call's own record once run. */
  #finish(lane: CudaLane, what: string): Handle {
    if (this.#capture) {
      // Its sequence number is known only when a replay is launched: the replay's handle reports it.
      this.#capture.calls.push({ lane, what });
      return lane.finish(this, `${what} captured on lane ${lane.index}`, () => {
        return new UsageError(`rank ${this.rank}: a captured call has no outcome of its own; wait on the handle its replay's launch() returns`);
      });
    }
    const call: LaneCall = { lane, seq: ++lane.seq, what };
    noteLaneCall(call.seq);
    lane.pacer.mark(lane.stream, lane.seq, false);
    return lane.finish(this, `${what} on lane ${lane.index}, call ${call.seq}`, () => this.#outcome([call]));
  }

  capture(stream: Stream, fn: () => void): Replay {
    this.#open();
    const s = stream as CudaStream;
    if (this.#capture) throw new UsageError(`rank ${this.rank}: capture() is already in progress`);
    checkCapture(this, stream, fn);
    const capture: Capture = { stream: s, calls: [], onLaunch: [] };
    this.#capture = capture;
    let graph: CudaGraph;
    try {
      graph = this.#device.capture(s, () => {
        fn();
        for (const lane of new Set(capture.calls.map((c) => c.lane))) s.waitEvent(lane.lastEvent());
      });
    } finally {
      this.#capture = undefined;
    }
    const perLane = this.#lanes.map((lane) => capture.calls.filter((c) => c.lane === lane).length);
    const most = Math.max(...perLane);
    if (most > REPLAY_CALLS_PER_LANE) {
      graph.destroy();
      throw new UsageError(TOO_MANY_REPLAY_CALLS(this.rank, most));
    }
    let closed = false;
    return {
      launch: (on?: Stream) => {
        // Before anything is queued: a destroyed graph would fail in the driver, a lane's counters already moved.
        if (closed) throw new UsageError(`rank ${this.rank}: this replay is closed`);
        if (this.#aborted) throw new CommAbortedError(this.rank, { cause: this.#aborted });
        checkStream(this, on);
        // The lanes number a replay's calls when it is launched: inside a capture they would be numbered now, not when they run.
        if (this.#capture) throw new UsageError(LAUNCH_IN_CAPTURE(this.rank));
        const target = (on as CudaStream | undefined) ?? s;
        for (const [i, n] of perLane.entries()) if (n > 0) this.#makeRoom(this.#lanes[i], n);
        graph.launch(target);
        const calls: LaneCall[] = capture.calls.map(({ lane, what, explain }) => ({ lane, seq: ++lane.seq, what, explain }));
        noteLaneCall(-(calls.at(-1)?.seq ?? 0));
        // The graph ends joined on `target`: one checkpoint there covers its calls on every lane.
        for (const [i, n] of perLane.entries()) if (n > 0) this.#lanes[i].pacer.mark(target, this.#lanes[i].seq, true);
        for (const fn of capture.onLaunch) fn();
        return this.#marks.handle(this, target, `a graph replay of ${calls.length} calls`, () => this.#outcome(calls));
      },
      close: () => {
        closed = true;
        graph.destroy();
      },
    };
  }

  [ON_REPLAY](fn: () => void): boolean {
    this.#capture?.onLaunch.push(fn);
    return this.#capture !== undefined;
  }

  [EXPLAINED]<T>(explain: Explain, queue: () => T): T {
    const capture = this.#capture;
    const from = capture?.calls.length ?? 0;
    const queued = queue();
    // The innermost explanation stands: a call already explained keeps its own.
    for (const call of capture?.calls.slice(from) ?? []) call.explain ??= explain;
    return queued;
  }

  timeLoop(stream: Stream, iters: number, fn: () => void, leadIn = 0): number {
    this.#open();
    const before = this.#lanes.map((lane) => ({ seq: lane.seq, refused: this.#records.refusedCount(lane) }));
    const ms = this.#timer.time(stream as CudaStream, iters, fn, leadIn, (end, calls) => this.hostWait(end, 'timed loop', calls));
    for (const [i, lane] of this.#lanes.entries()) {
      const err = this.#records.loopOutcome(lane, before[i].seq, lane.seq, before[i].refused);
      if (err) throw err;
    }
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

  /** The first failure of `calls`, whose events have passed; they must still have their records. */
  #outcome(calls: LaneCall[]): Error | undefined {
    const stale = calls.find((c) => c.lane.seq - c.seq >= STATUS_RING);
    if (stale) {
      return new UsageError(`rank ${this.rank}: the outcome of call ${stale.seq} on lane ${stale.lane.index} was overwritten (more than ${STATUS_RING} later calls)`);
    }
    return calls.length === 1 ? this.#records.outcome(calls[0]) : this.#records.firstOutcome(calls);
  }

  /**
   * Collective, between phases of work (loading code waits for the kernels on the GPU): `file`
   * compiled with `options` and loaded once for the ranks of this process on this GPU, as the
   * communicator's own kernels are (modules.ts); kept until close(). The token MoE group's kernels
   * come from here on cuda.
   */
  async kernelModule(file: string, options: readonly string[]): Promise<KernelModule> {
    this.#open();
    const id = [file, ...options].join(' ');
    let load = this.#later.get(id);
    if (!load) {
      load = loadModules(this.#loads, `a2av/cuda/modules/${this.#later.size}`, [file], options);
      this.#later.set(id, load);
    }
    return (await load).modules[0]!;
  }

  // async: after close() the ClosedError arrives as a rejection, like every other barrier failure.
  async barrier(options?: BarrierOptions): Promise<void> {
    this.#usable();
    checkBarrier(this.rank, options);
    return this.#setUp(this.#meet(options?.timeoutMs));
  }

  #meet(timeoutMs = this.timeoutMs): Promise<void> {
    return meet({ store: this.#store, key: `a2av/cuda/comm/${this.#barriers++}`, rank: this.rank, worldSize: this.worldSize, timeoutMs, sweep: this.#sweep });
  }

  async gatherOnHost(values: readonly number[], options?: BarrierOptions): Promise<number[][]> {
    this.#usable();
    checkBarrier(this.rank, options);
    const words = gatherWords(this.rank, values);
    const timeoutMs = options?.timeoutMs ?? startWaitMs(this.timeoutMs);
    const all = await this.#setUp(allGatherJson<(number | string)[]>({ store: this.#store, key: `a2av/cuda/gather/${this.#gathers++}`, rank: this.rank, worldSize: this.worldSize, value: words, timeoutMs, sweep: this.#sweep }));
    return all.map(gatheredValues);
  }

  /** A set-up wait whose timeout ends the communicator (endingOnTimeout says why). */
  #setUp<T>(wait: Promise<T>): Promise<T> {
    return endingOnTimeout(wait, (err) => (this.#aborted ??= err));
  }

  #usable(): void {
    this.#open();
    if (this.#aborted) throw new CommAbortedError(this.rank, { cause: this.#aborted });
  }

  [ABORTED](): Error | undefined {
    return this.#aborted;
  }

  freeMemory(): number {
    this.#open();
    return this.#device.memInfo().free;
  }

  /** Every call after close() is a ClosedError: its streams, modules and memory are gone. */
  #open(): void {
    if (this.#closed) throw new ClosedError(this.rank);
  }

  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    // Peers may still be writing into our output or pad: meet them first. A peer that gave up on
    // this job (timeout) never comes, so a failed meeting only delays the release, bounded.
    const met = !this.#aborted && (await this.#meet().then(() => true, () => false));
    this.#device.synchronize();
    // Unmet, a peer may yet run a call it queued (one held up in the driver until after our timeout)
    // and write into our outputs, pad, scratch or stage: freed, that write would be an illegal address
    // that ends the context of every rank sharing it. So after a failure they stay allocated until the
    // process ends.
    if (met) {
      this.#moe.release();
      this.#allReduce.release();
      this.#memory.freeAll();
    }
    this.#records.release();
    for (const lane of this.#lanes) lane.release(this.#device);
    this.#marks.destroy();
    this.#timer.destroy();
    // Borrowers share this context, so once met, the synchronisation above has seen their last
    // kernels end too; unmet, one may still be running this code.
    if (met || !this.#lendsModules) this.#kernels.unload();
    for (const load of this.#later.values()) {
      const { modules, lends } = await load.catch(() => ({ modules: [], lends: true }));
      if (met || !lends) for (const m of modules) m.unload();
    }
    for (const peer of this.#peerDevices) peer.release();
    this.#device.release();
  }
}
