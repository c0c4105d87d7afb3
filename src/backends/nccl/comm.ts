// The nccl backend: allToAllV the way NCCL users run it today, as the baseline for the cuda backend
// and the engine across machines. Per call, on the lane's stream:
//   1. publish this rank's header (capacities, row size, output id) and its device splits, and
//      ncclAllGather every rank's: the whole split matrix;
//   2. wait on the host for it and copy it down: the round trip a2av's own kernel avoids, timed in
//      `splitsSyncUs`;
//   3. check the matrix on the host with the kernel's rules (plan.ts): every rank sees the same
//      matrix, so either all refuse the call (SplitsError from wait(), nothing written) or none;
//   4. write outSplitsOffsets, then one NCCL group of ncclSend/ncclRecv of each peer's bytes,
//      straight into the output grouped by source.
// One GPU per rank (NCCL's rule; setup.ts builds the communicator). Waits are bounded; a timeout
// aborts the NCCL communicators.
import type {
  AllToAllV2dArgs,
  AllToAllV2dOffsetArgs,
  AllToAllVArgs,
  Comm,
  CommOptions,
  DeviceBuffer,
  ExchangePlan,
  Handle,
  Lane,
  PlanAllToAllV2dArgs,
  PlanAllToAllV2dOffsetArgs,
  PlanAllToAllVArgs,
  Replay,
  Stream,
} from '../backend.js';
import type { CudaDevice, CudaEvent, CudaStream } from '../../cuda/device.js';
import { checkAllToAllV, type CheckContext } from '../../collectives/check.js';
import { entryError } from '../../collectives/status.js';
import { CommAbortedError, TimeoutError, UsageError } from '../../errors.js';
import { groupEnd, groupStart, napMs } from '../../nccl/communicator.js';
import { NcclType } from '../../nccl/library.js';
import { allGatherJson } from '../../world/all-gather.js';
import { storeBarrier } from '../../world/barrier.js';
import type { Store } from '../../world/store.js';
import { EventTimer, hostWaitLimitMs } from '../event-timer.js';
import { GpuBuffer, GpuMemory } from '../gpu-memory.js';
import { uploadAsync } from './copies.js';
import type { NcclLane } from './lane.js';
import { EventRing, type HostWaiter } from '../stream-lane.js';
import { HEADER_WORDS, payloadWords, SplitPlan } from './plan.js';

export class NcclComm implements Comm, CheckContext, HostWaiter {
  readonly backend = 'nccl' as const;
  readonly rank: number;
  readonly worldSize: number;
  readonly timeoutMs: number;
  readonly deviceName: string;
  readonly laneCount: number;
  readonly ranksOnDevice = 1;
  readonly #device: CudaDevice;
  readonly #store: Store;
  readonly #key: string;
  readonly #lanes: NcclLane[];
  readonly #memory: GpuMemory;
  #symmetricCount = 0;
  #barriers = 0;
  #splitsSyncUs = 0;
  #aborted: Error | undefined;
  #closed = false;
  readonly #timer: EventTimer;
  /** Events of record(). */
  readonly #marks: EventRing;
  /** The errors of the calls a timed loop is making, while one runs. */
  #loopErrors: Error[] | undefined;

  constructor(opts: CommOptions, device: CudaDevice, lanes: NcclLane[], key: string) {
    this.rank = opts.rank;
    this.worldSize = opts.worldSize;
    this.timeoutMs = opts.timeoutMs;
    this.laneCount = lanes.length;
    this.#device = device;
    this.#timer = new EventTimer(device);
    this.#marks = new EventRing(device);
    this.#memory = new GpuMemory(device, this);
    this.#store = opts.store;
    this.#key = key;
    this.#lanes = lanes;
    this.deviceName = `${device.name} #${device.ordinal}`;
  }

  /** µs the host has spent waiting for the device splits (steps 1-2), summed over every call. */
  get splitsSyncUs(): number {
    return this.#splitsSyncUs;
  }

  /**
   * One split exchange and a one-byte send to and receive from every peer on each lane, so NCCL
   * connects every path the calls use now, bounded, rather than inside the first timed call.
   */
  warmUp(timeoutMs: number): void {
    const W = this.worldSize;
    for (const lane of this.#lanes) {
      const s = lane.stream.handle;
      lane.nccl.settle('ncclAllGather', lane.nccl.allGather(lane.payload, lane.gathered, payloadWords(W), NcclType.int64, s), timeoutMs);
      groupStart();
      for (let peer = 0; peer < W; peer++) {
        lane.nccl.send(lane.payload, 1, NcclType.uint8, peer, s);
        lane.nccl.recv(lane.gathered + BigInt(peer), 1, NcclType.uint8, peer, s);
      }
      lane.nccl.settle('ncclGroupEnd', groupEnd(), timeoutMs);
      lane.exchanged.record(lane.stream);
      const err = this.#waitEvent(lane.exchanged, timeoutMs, 'NCCL warm-up');
      if (err) throw err;
    }
  }

  owns(buf: DeviceBuffer): boolean {
    return this.#memory.owns(buf);
  }
  ownsLane(lane: Lane): boolean {
    return this.#lanes[lane.index] === lane;
  }

  alloc(bytes: number): DeviceBuffer {
    this.#usable();
    return this.#memory.alloc(bytes);
  }

  /** A plain allocation, made collectively: NCCL moves the bytes, peers never address it directly. */
  async allocSymmetric(bytes: number): Promise<DeviceBuffer> {
    this.#usable();
    this.#memory.checkBytes(bytes);
    const id = this.#symmetricCount++;
    const sizes = await allGatherJson({ store: this.#store, key: `${this.#key}/sym/${id}`, rank: this.rank, worldSize: this.worldSize, value: bytes, timeoutMs: this.timeoutMs });
    const odd = sizes.findIndex((n) => n !== bytes);
    if (odd >= 0) throw new UsageError(`allocSymmetric #${id}: rank ${this.rank} asked for ${bytes} bytes but rank ${odd} for ${sizes[odd]}`);
    return this.#memory.alloc(bytes, id);
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

  allToAllV2d(_args: AllToAllV2dArgs): Handle {
    throw new UsageError(`rank ${this.rank}: allToAllV2d is not available on the nccl backend yet`);
  }
  allToAllV2dOffset(_args: AllToAllV2dOffsetArgs): Handle {
    throw new UsageError(`rank ${this.rank}: allToAllV2dOffset is not available on the nccl backend yet`);
  }
  planAllToAllV(_args: PlanAllToAllVArgs): ExchangePlan {
    throw new UsageError(`rank ${this.rank}: exchange plans are not available on the nccl backend yet`);
  }
  planAllToAllV2d(_args: PlanAllToAllV2dArgs): ExchangePlan {
    throw new UsageError(`rank ${this.rank}: exchange plans are not available on the nccl backend yet`);
  }
  planAllToAllV2dOffset(_args: PlanAllToAllV2dOffsetArgs): ExchangePlan {
    throw new UsageError(`rank ${this.rank}: exchange plans are not available on the nccl backend yet`);
  }

  lane(index: number): Lane {
    const lane = this.#lanes[index];
    if (!lane) throw new UsageError(`rank ${this.rank}: lane ${index} out of range (this communicator has ${this.laneCount})`);
    return lane;
  }

  record(stream?: Stream): Handle {
    this.#usable();
    return this.#marks.handle(this, (stream as CudaStream | undefined) ?? this.#lanes[0].stream, 'the work recorded on a stream');
  }

  allToAllV(args: AllToAllVArgs): Handle {
    this.#usable();
    const lane = this.#lanes[checkAllToAllV(this, args)];
    lane.follow(args.stream as CudaStream | undefined);
    const started = performance.now();
    const failed = this.#exchangeSplits(lane, args);
    this.#splitsSyncUs += (performance.now() - started) * 1000;
    const problem = failed ? undefined : lane.plan.check(lane.gatheredHost, this.rank);
    // The host knows the outcome now: the handle keeps it, so it reports this call and no other.
    const err = failed ?? (problem ? entryError(problem, this.timeoutMs, `allToAllV on lane ${lane.index}`) : this.#moveRows(lane, args));
    if (err) this.#loopErrors?.push(err);
    return lane.finish(this, `allToAllV on lane ${lane.index}, call ${lane.done.count + 1}`, () => err);
  }

  /** Steps 1-2: every rank's header and splits, on this host. Returns the failure, if any. */
  #exchangeSplits(lane: NcclLane, args: AllToAllVArgs): Error | undefined {
    const W = this.worldSize;
    const h = lane.header;
    SplitPlan.header(h, { inputBytes: args.input.bytes, outputBytes: args.output.bytes, rowBytes: args.rowBytes, outId: args.output.symmetricId });
    const u = lane.uploadedHeader;
    if (h[0] !== u[0] || h[1] !== u[1] || h[2] !== u[2] || h[3] !== u[3]) {
      uploadAsync(lane.payload, h, lane.stream);
      u.set(h);
    }
    this.#device.copyAsync(lane.payload + BigInt(8 * HEADER_WORDS), (args.inSplits as GpuBuffer).ptr, 8 * W, lane.stream);
    try {
      lane.nccl.settle('ncclAllGather', lane.nccl.allGather(lane.payload, lane.gathered, payloadWords(W), NcclType.int64, lane.stream.handle), this.timeoutMs);
    } catch (err) {
      return this.#abort(err as Error);
    }
    lane.exchanged.record(lane.stream);
    const err = this.#waitEvent(lane.exchanged, this.timeoutMs, `allToAllV on lane ${lane.index}: split exchange`);
    if (err) return err;
    this.#device.download(lane.gatheredHost, lane.gathered);
    return undefined;
  }

  /** Step 4: outSplitsOffsets, then the rows, as one NCCL group. Returns the failure, if any. */
  #moveRows(lane: NcclLane, args: AllToAllVArgs): Error | undefined {
    const W = this.worldSize;
    const plan = lane.plan;
    plan.layout(lane.gatheredHost, this.rank, args.rowBytes);
    // The lane's stream is idle here (step 2 waited for it), so this upload queues without delay.
    uploadAsync((args.outSplitsOffsets as GpuBuffer).ptr, plan.splitsOffsets, lane.stream);
    const input = (args.input as GpuBuffer).ptr;
    const output = (args.output as GpuBuffer).ptr;
    const s = lane.stream.handle;
    let status = 0;
    groupStart();
    // NCCL p2p moves bytes whatever the element type, so uint8 costs nothing over wider types.
    for (let peer = 0; peer < W && status === 0; peer++) {
      if (plan.sendBytes[peer] > 0) status = lane.nccl.send(input + BigInt(plan.sendOffset[peer]), plan.sendBytes[peer], NcclType.uint8, peer, s);
      if (status === 0 && plan.recvBytes[peer] > 0) status = lane.nccl.recv(output + BigInt(plan.recvOffset[peer]), plan.recvBytes[peer], NcclType.uint8, peer, s);
    }
    const ended = groupEnd(); // always close the group, even after a failed enqueue
    try {
      lane.nccl.settle('ncclSend/ncclRecv', status || ended, this.timeoutMs);
    } catch (err) {
      return this.#abort(err as Error);
    }
    return undefined;
  }

  capture(_stream: Stream, _fn: () => void): Replay {
    // A graph replays what was queued at capture. NCCL's calls carry the byte counts as host values,
    // read from the splits before queueing, so a replay would move the captured call's sizes
    // whatever the split buffers hold by then: wrong results, not an error. Refuse instead.
    throw new UsageError(`rank ${this.rank}: the nccl backend cannot capture allToAllV into a CUDA graph: NCCL needs the split sizes ` +
      'on the host before it can queue a call, so a replay would reuse the captured sizes. Use the cuda backend for graphs.');
  }

  timeLoop(stream: Stream, iters: number, fn: () => void, leadIn = 0): number {
    const errors: Error[] = [];
    this.#loopErrors = errors;
    try {
      const ms = this.#timer.time(stream as CudaStream, iters, fn, leadIn, (end, calls) => this.hostWait(end, 'timed loop', calls));
      if (errors.length > 0) throw errors[0];
      return ms;
    } finally {
      this.#loopErrors = undefined;
    }
  }

  /** Waits on the host for `event`; a stall becomes TimeoutError and aborts the communicator. */
  hostWait(event: CudaEvent, what: string, calls = 1): void {
    const err = this.#waitEvent(event, hostWaitLimitMs(this.timeoutMs, calls), what);
    if (err) throw err;
  }

  /**
   * Polls `event` (spinning first: short calls finish in microseconds) and the NCCL communicators'
   * asynchronous errors. Returns the error that ended the wait, after aborting; undefined when done.
   */
  #waitEvent(event: CudaEvent, limitMs: number, what: string): Error | undefined {
    const start = performance.now();
    for (let i = 0; !event.query(); i++) {
      if (i < 2000) continue;
      if (i % 16 === 0) {
        try {
          for (const lane of this.#lanes) if (!lane.nccl.destroyed) lane.nccl.throwAsyncError(what);
        } catch (err) {
          return this.#abort(err as Error);
        }
      }
      if (performance.now() - start > limitMs) {
        if (event.query()) break;
        // NCCL does not say which rank it waits for, so the error cannot name one.
        return this.#abort(new TimeoutError(this.rank, -1, Math.round(limitMs), `${what}: not finished on the device; NCCL communicators aborted`));
      }
      napMs(0.05);
    }
    return undefined;
  }

  /** Aborts every lane's NCCL communicator (stops their kernels); later calls throw CommAbortedError. */
  #abort(cause: Error): Error {
    this.#aborted ??= cause;
    for (const lane of this.#lanes) {
      try {
        lane.nccl.abort();
      } catch {
        /* already failing; the first error is the one to report */
      }
    }
    return cause;
  }

  barrier(): Promise<void> {
    return storeBarrier(this.#store, { name: `${this.#key}/comm/${this.#barriers++}`, worldSize: this.worldSize, timeoutMs: this.timeoutMs });
  }

  freeMemory(): number {
    return this.#device.memInfo().free;
  }

  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    // Peers may still be sending into our output: meet them first (bounded; a peer that gave up on
    // the job never comes).
    if (!this.#aborted) await this.barrier().catch(() => {});
    let drained = true;
    for (const lane of this.#lanes) {
      lane.exchanged.record(lane.stream);
      if (this.#waitEvent(lane.exchanged, this.timeoutMs, 'close')) drained = false;
    }
    for (const lane of this.#lanes) {
      if (this.#aborted) lane.nccl.abort();
      else lane.nccl.destroy(this.timeoutMs);
    }
    // A stream that never drained may still be writing: leak its memory rather than free it under it.
    if (!drained) return;
    this.#memory.freeAll();
    for (const lane of this.#lanes) lane.release(this.#device);
    this.#marks.destroy();
    this.#timer.destroy();
    this.#device.release();
  }

  #usable(): void {
    if (this.#aborted) throw new CommAbortedError(this.rank, { cause: this.#aborted });
    if (this.#closed) throw new UsageError(`rank ${this.rank}: communicator is closed`);
  }
}
