// The nccl backend: allToAllV, the MoE dispatch and combine, and exchange plans the way NCCL users
// run them today, as the baseline for the cuda backend and the engine across machines. Per call, on
// the lane's stream (exchange.ts):
//   1. publish this rank's record (collectives/exchange-rules.ts: its header, then its device
//      splits) and ncclAllGather every rank's: the whole split matrix;
//   2. wait on the host for it and copy it down: the round trip a2av's own kernels avoid, timed in
//      `splitsSyncUs`;
//   3. judge the matrix on the host with the rules every backend shares: every rank sees the same
//      matrix, so either all refuse the call (SplitsError from wait(), nothing written) or none;
//   4. write outSplitsOffsets, then the rows: one NCCL group of ncclSend/ncclRecv, one of each per
//      peer, with device copies where a side's chunks are not contiguous (transfers.ts).
// A plan runs 1-3 once; each move gathers only the ranks' headers (row size, output), then does 4.
// One GPU per rank (NCCL's rule; setup.ts builds the communicator). Waits are bounded; a timeout
// aborts the NCCL communicators.
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
  PlanAllToAllV2dArgs,
  PlanAllToAllV2dOffsetArgs,
  PlanAllToAllVArgs,
  Replay,
  Stream,
} from '../backend.js';
import { ABORTED } from '../backend.js';
import { CudaStream, type CudaDevice, type CudaEvent } from '../../cuda/device.js';
import { directRecord, planRecord } from '../../collectives/call-records.js';
import { checkBarrier, gatheredValues, gatherWords, checkLaneIndex, checkAllReduce, checkAllToAllV, checkAllToAllV2d, checkAllToAllV2dOffset, checkPlan, planBuffers, checkStream, type CheckContext } from '../../collectives/check.js';
import { judge, type ExchangeKind } from '../../collectives/exchange-rules.js';
import { entryError } from '../../collectives/status.js';
import { ClosedError, CommAbortedError, TimeoutError, UsageError } from '../../errors.js';
import { napMs } from '../../nccl/communicator.js';
import { allGatherJson, endingOnTimeout, GatherSweep, meet } from '../../world/all-gather.js';
import { sizeDisagreement } from '../../world/disagreement.js';
import { startWaitMs } from '../../world/set-up-waits.js';
import type { Store } from '../../world/store.js';
import { EventTimer, hostWaitLimitMs } from '../event-timer.js';
import { GpuBuffer, GpuMemory } from '../gpu-memory.js';
import { queueAllReduce } from './all-reduce.js';
import { deliver, exchangeRecords, type NcclHost } from './exchange.js';
import { NcclPlan } from './exchange-plan.js';
import type { NcclLane } from './lane.js';
import { EventRing, type HostWaiter } from '../stream-lane.js';

export class NcclComm implements Comm, CheckContext, HostWaiter, NcclHost {
  readonly backend = 'nccl' as const;
  readonly rank: number;
  readonly worldSize: number;
  readonly timeoutMs: number;
  readonly deviceName: string;
  readonly laneCount: number;
  readonly ranksOnDevice = 1;
  readonly #device: CudaDevice;
  readonly #store: Store;
  /** The host gathers of barrier() and allocSymmetric(), whose keys it removes as they are done (all-gather.ts). */
  readonly #sweep: GatherSweep;
  readonly #key: string;
  readonly #lanes: NcclLane[];
  readonly #memory: GpuMemory;
  #symmetricCount = 0;
  #barriers = 0;
  #gathers = 0;
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
    this.#memory = new GpuMemory(device, this, opts.timeoutMs);
    this.#store = opts.store;
    this.#sweep = new GatherSweep(opts.store);
    this.#key = key;
    this.#lanes = lanes;
    this.deviceName = `${device.name} #${device.ordinal}`;
  }

  /** µs the host has spent waiting for the device splits (steps 1-2), summed over every call. */
  get splitsSyncUs(): number {
    return this.#splitsSyncUs;
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
    this.#usable();
    return this.#memory.alloc(bytes);
  }

  /** A plain allocation, made collectively: NCCL moves the bytes, peers never address it directly. */
  async allocSymmetric(bytes: number): Promise<DeviceBuffer> {
    this.#usable();
    this.#memory.checkBytes(bytes);
    const id = this.#symmetricCount++;
    const sizes = await this.#setUp(allGatherJson({ store: this.#store, key: `${this.#key}/sym/${id}`, rank: this.rank, worldSize: this.worldSize, value: bytes, timeoutMs: this.timeoutMs, sweep: this.#sweep }));
    const odd = sizeDisagreement(this.rank, `allocSymmetric #${id}`, sizes);
    if (odd !== undefined) throw new UsageError(odd);
    return this.#memory.alloc(bytes, id);
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

  allToAllV2d(args: AllToAllV2dArgs): Handle {
    this.#usable();
    return this.#direct('dispatch', this.#lanes[checkAllToAllV2d(this, args)], args);
  }

  allToAllV2dOffset(args: AllToAllV2dOffsetArgs): Handle {
    this.#usable();
    return this.#direct('combine', this.#lanes[checkAllToAllV2dOffset(this, args)], args);
  }

  planAllToAllV(args: PlanAllToAllVArgs): ExchangePlan {
    this.#open();
    return this.#plan('1d', args);
  }

  planAllToAllV2d(args: PlanAllToAllV2dArgs): ExchangePlan {
    this.#open();
    return this.#plan('dispatch', args);
  }

  planAllToAllV2dOffset(args: PlanAllToAllV2dOffsetArgs): ExchangePlan {
    this.#open();
    return this.#plan('combine', args);
  }

  lane(index: number): Lane {
    this.#open();
    checkLaneIndex(this, index);
    return this.#lanes[index];
  }

  record(stream?: Stream): Handle {
    this.#usable();
    checkStream(this, stream);
    return this.#marks.handle(this, (stream as CudaStream | undefined) ?? this.#lanes[0].stream, 'the work recorded on a stream');
  }

  allToAllV(args: AllToAllVArgs): Handle {
    this.#usable();
    return this.#direct('1d', this.#lanes[checkAllToAllV(this, args)], args);
  }

  /** One ncclAllReduce on the lane (all-reduce.ts); the handle reports this call's outcome, timeouts as for allToAllV. */
  allReduce(args: AllReduceArgs): Handle {
    this.#usable();
    const lane = this.#lanes[checkAllReduce(this, args)];
    lane.follow(args.stream as CudaStream | undefined);
    const { count, dtype } = args;
    const err = queueAllReduce(this, lane, { input: (args.input as GpuBuffer).ptr, output: (args.output as GpuBuffer).ptr, count, dtype });
    if (err) this.#loopErrors?.push(err);
    return lane.finish(this, `allReduce of ${count} ${dtype} on lane ${lane.index}, call ${lane.done.count + 1}`, () => err);
  }

  /** Steps 1-4 of a checked direct call; its handle keeps the outcome, so it reports this call and no other. */
  #direct(kind: ExchangeKind, lane: NcclLane, args: AllToAllVArgs | AllToAllV2dArgs | AllToAllV2dOffsetArgs): Handle {
    lane.follow(args.stream as CudaStream | undefined);
    const { x, p } = directRecord(kind, this.worldSize, args);
    const what = `${x.what} on lane ${lane.index}`;
    const started = performance.now();
    const m = exchangeRecords(this, lane, { header: x.header, splits: (x.splits as GpuBuffer).ptr, words: x.words }, x.what);
    this.#splitsSyncUs += (performance.now() - started) * 1000;
    let err: Error | undefined;
    if (m instanceof Error) err = m;
    else {
      const refused = judge(m, this.rank, lane.routing);
      const payload = { input: (p.input as GpuBuffer).ptr, output: (p.output as GpuBuffer).ptr, rowBytes: p.rowBytes };
      err = refused ? entryError(refused, this.timeoutMs, what) : deliver(this, lane, lane.routing, payload, (x.outSplitsOffsets as GpuBuffer).ptr);
    }
    if (err) this.#loopErrors?.push(err);
    return lane.finish(this, `${what}, call ${lane.done.count + 1}`, () => err);
  }

  #plan(kind: ExchangeKind, args: PlanAllToAllVArgs | PlanAllToAllV2dArgs | PlanAllToAllV2dOffsetArgs): ExchangePlan {
    this.#usable();
    const lane = this.#lanes[checkPlan(this, kind, args)];
    return new NcclPlan({
      host: this,
      lane,
      exchange: planRecord(kind, this.worldSize, args),
      buffers: planBuffers(args),
      stream: args.stream,
      usable: () => this.#usable(),
      outcome: (err) => {
        if (err) this.#loopErrors?.push(err);
      },
    });
  }

  get device(): CudaDevice {
    return this.#device;
  }

  waitFor(event: CudaEvent, what: string, limitMs = this.timeoutMs): Error | undefined {
    return this.#waitEvent(event, limitMs, what);
  }

  fail(cause: Error): Error {
    return this.#abort(cause);
  }

  lanesIdle(): boolean {
    return this.#lanes.every((lane) => lane.stream.query());
  }

  capture(_stream: Stream, _fn: () => void): Replay {
    // A graph replays what was queued at capture. NCCL's calls carry the byte counts as host values,
    // read from the splits before queueing, so a replay would move the captured call's sizes
    // whatever the split buffers hold by then: wrong results, not an error. Refuse instead.
    throw new UsageError(`rank ${this.rank}: the nccl backend cannot capture collectives into a CUDA graph: NCCL needs the split sizes ` +
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

  // async: after close() the ClosedError arrives as a rejection, like every other barrier failure.
  async barrier(options?: BarrierOptions): Promise<void> {
    this.#usable();
    checkBarrier(this.rank, options);
    return this.#setUp(this.#meet(options?.timeoutMs));
  }

  #meet(timeoutMs = this.timeoutMs): Promise<void> {
    return meet({ store: this.#store, key: `${this.#key}/comm/${this.#barriers++}`, rank: this.rank, worldSize: this.worldSize, timeoutMs, sweep: this.#sweep });
  }

  async gatherOnHost(values: readonly number[], options?: BarrierOptions): Promise<number[][]> {
    this.#usable();
    checkBarrier(this.rank, options);
    const words = gatherWords(this.rank, values);
    const timeoutMs = options?.timeoutMs ?? startWaitMs(this.timeoutMs);
    const all = await this.#setUp(allGatherJson<(number | string)[]>({ store: this.#store, key: `${this.#key}/gather/${this.#gathers++}`, rank: this.rank, worldSize: this.worldSize, value: words, timeoutMs }));
    return all.map(gatheredValues);
  }

  /** A set-up wait whose timeout ends the communicator (endingOnTimeout says why). */
  #setUp<T>(wait: Promise<T>): Promise<T> {
    return endingOnTimeout(wait, (err) => this.#abort(err));
  }

  [ABORTED](): Error | undefined {
    return this.#aborted;
  }

  freeMemory(): number {
    this.#open();
    return this.#device.memInfo().free;
  }

  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    // Peers may still be sending into our output: meet them first (bounded; a peer that gave up on
    // the job never comes).
    if (!this.#aborted) await this.#meet().catch(() => {});
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
    this.#open();
  }

  /** After close() every call is a ClosedError (its streams and memory are gone); an aborted communicator still reads and frees. */
  #open(): void {
    if (this.#closed) throw new ClosedError(this.rank);
  }
}
