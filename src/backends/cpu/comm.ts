// The CPU backend: ranks are worker threads of one process or processes of one node, "device
// memory" is shared memory (memory.ts: SharedArrayBuffer, or POSIX shared memory), and a symmetric
// allocation is every rank's region handed to every peer through the rendezvous store.
// Collectives run synchronously in the calling thread, so every Handle is complete when returned.
import { Buffer } from 'node:buffer';
import type {
  AllReduceArgs,
  AllToAllV2dArgs,
  AllToAllV2dOffsetArgs,
  AllToAllVArgs,
  BarrierOptions,
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
import { ABORTED, EXPLAINED, explained, type CopyOffsets, type Explain } from '../backend.js';
import { checkBarrier, gatheredValues, gatherWords, checkCopyBytes, checkCopyOverlap, checkLaneIndex, checkAllReduce, checkAllToAllV, checkAllToAllV2d, checkAllToAllV2dOffset, checkBuffer, checkCapture, checkPlan, planBuffers, checkStream, checkWaitOn, checkWriteData, LAUNCH_IN_CAPTURE, REPLAY_CALLS_PER_LANE, TOO_MANY_REPLAY_CALLS, type CheckContext } from '../../collectives/check.js';
import { directRecord, planRecord } from '../../collectives/call-records.js';
import type { ExchangeKind } from '../../collectives/exchange-rules.js';
import { ClosedError, CommAbortedError, shown, UsageError } from '../../errors.js';
import { decodeJson, encodeJson, endingOnTimeout } from '../../world/all-gather.js';
import { startWaitMs } from '../../world/set-up-waits.js';
import { CpuReducer } from './all-reduce.js';
import { allocateShared, checkCpuBufferBytes, closeAll, CpuBuffer } from './buffer.js';
import { copyBytes } from './memcpy.js';
import { CpuLane, doneHandle, isCpuStream } from './lane.js';
import { threadMemory, type SharedMemory, type SharedRegion } from './memory.js';
import { PadLayout, PadViews } from './pad.js';
import { CpuPlan } from './plan.js';
import { Rendezvous } from './rendezvous.js';
import { checkCpuWorld } from './world.js';

export async function createCpuComm(opts: CommOptions): Promise<Comm> {
  // Before the pads: launched processes come here first, threads were refused by runRanks already.
  checkCpuWorld(opts.worldSize);
  const layout = new PadLayout(opts.worldSize, opts.lanes);
  const ex = new Rendezvous(opts.store, await sharedMemory(opts), opts.rank, opts.worldSize);
  const pads = await ex.share('pad', layout.bytes, startWaitMs(opts.timeoutMs), 'the communicator\'s pad, sized by the world size and lanes');
  return new CpuComm(opts, ex, layout, pads);
}

/** Threads of one process share SharedArrayBuffers through their store; processes map shared memory. */
async function sharedMemory(opts: CommOptions): Promise<SharedMemory> {
  if (opts.store.sharesMemory) return threadMemory;
  const local = opts.localWorldSize ?? opts.worldSize;
  if (local !== opts.worldSize) {
    throw new UsageError(`the cpu backend shares memory within one node: ${opts.worldSize} ranks, but ${local} on this node`);
  }
  const { ProcessMemory } = await import('./process-memory.js');
  return new ProcessMemory(opts.rank);
}

/** A call made inside a replayed closure: its handle, its lane, and what its refusal means (EXPLAINED). */
interface ReplayedCall {
  handle: Handle;
  lane: number;
  explain?: Explain;
}

/** The pads of this process's (or thread's) open communicators, marked if it exits with them open. */
const openPads = new Set<PadViews>();
const markOpenPads = (code: number): void => {
  // An exit with an error status is a failure of its own (peerFailed): its own error says why.
  for (const pad of openPads) pad.markExited(code !== 0);
};

function markedAtExit(pad: PadViews, open: boolean): void {
  if (open) openPads.add(pad);
  else openPads.delete(pad);
  // One listener while any is open, none otherwise: an idle process's exit is its own.
  if (openPads.size > 0 && process.listeners('exit').indexOf(markOpenPads) < 0) process.on('exit', markOpenPads);
  if (openPads.size === 0) process.off('exit', markOpenPads);
}

class CpuComm implements Comm, CheckContext {
  readonly backend = 'cpu';
  readonly rank: number;
  readonly worldSize: number;
  readonly timeoutMs: number;
  readonly deviceName: string;
  readonly ranksOnDevice: number;
  readonly laneCount: number;
  #exchange: Rendezvous;
  #lanes: CpuLane[];
  /** allReduce's staging, by lane. */
  #reducers: CpuReducer[];
  #pads: SharedRegion[];
  /** Live buffers, released on close (for processes their memory is unmapped then). */
  #buffers = new Set<CpuBuffer>();
  #nextSymmetricId = 0;
  #barriers = 0;
  #gathers = 0;
  /** The calls a replay is making, while one runs: each one's handle, lane and explanation (EXPLAINED). */
  #replayed: ReplayedCall[] | undefined;
  /** Set by close(): every later call is a ClosedError. */
  #closed = false;
  /** The timeout that aborted the communicator, if one did: later calls are a CommAbortedError. */
  #aborted: Error | undefined;
  /** This rank's pad: marked when its process exits with the communicator open. */
  #ownPad: PadViews;

  constructor(opts: CommOptions, exchange: Rendezvous, layout: PadLayout, pads: SharedRegion[]) {
    this.rank = opts.rank;
    this.worldSize = opts.worldSize;
    this.timeoutMs = opts.timeoutMs;
    this.deviceName = `cpu ${exchange.memory.where}`;
    this.ranksOnDevice = opts.worldSize;
    this.laneCount = opts.lanes;
    this.#exchange = exchange;
    this.#pads = pads;
    const onTimeout = (cause: Error): void => {
      this.#aborted ??= cause;
    };
    const views = pads.map((region) => new PadViews(region));
    // The host waits (barrier, gatherOnHost, allocSymmetric) end, as a lane's do, for a peer that has closed.
    exchange.peerGone = (rank) => (rank === this.rank || this.#closed ? undefined : views[rank]?.closed);
    this.#lanes = Array.from({ length: opts.lanes }, (_, index) => new CpuLane({ index, rank: this.rank, layout, pads: views, timeoutMs: this.timeoutMs, onTimeout }));
    // A process (or thread) that exits with this communicator open makes no call again: its peers'
    // waits end when they see that, not at their timeout.
    this.#ownPad = views[this.rank]!;
    markedAtExit(this.#ownPad, true);
    this.#reducers = this.#lanes.map((lane) => new CpuReducer(lane, this.rank, layout, views));
  }

  owns(buf: DeviceBuffer): boolean {
    return buf instanceof CpuBuffer && buf.owner === this;
  }

  ownsLane(lane: Lane): boolean {
    return this.#lanes[lane.index] === lane;
  }

  knowsStream(stream: Stream): boolean {
    return isCpuStream(stream);
  }

  alloc(bytes: number): DeviceBuffer {
    this.#usable();
    checkSize(this.rank, bytes);
    // Only this rank touches a local buffer, so it needs no shared mapping.
    return this.#keep(new CpuBuffer(this, allocateShared(this.rank, bytes, 'alloc')));
  }

  async allocSymmetric(bytes: number): Promise<DeviceBuffer> {
    this.#usable();
    checkSize(this.rank, bytes);
    const id = this.#nextSymmetricId++;
    const regions = await this.#setUp(this.#exchange.share(`sym/${id}`, bytes, startWaitMs(this.timeoutMs), `allocSymmetric #${id}`));
    if (this.#closed || this.#aborted !== undefined) {
      closeAll(regions); // closed while the peers were being mapped
      this.#usable();
    }
    return this.#keep(new CpuBuffer(this, regions[this.rank].buffer, id, regions));
  }

  free(buf: DeviceBuffer): void {
    this.#open();
    checkBuffer(this, 'buffer to free', buf);
    this.#buffers.delete(buf as CpuBuffer);
    (buf as CpuBuffer).release();
  }

  write(buf: DeviceBuffer, data: ArrayBufferView, offsetBytes = 0): void {
    this.#open();
    checkBuffer(this, 'write target', buf);
    checkWriteData(this, data);
    checkRange(this.rank, buf, offsetBytes, data.byteLength, 'write');
    copyBytes((buf as CpuBuffer).u8, offsetBytes, Buffer.from(data.buffer, data.byteOffset, data.byteLength), 0, data.byteLength);
  }

  read(buf: DeviceBuffer, offsetBytes: number, bytes: number): Uint8Array {
    this.#open();
    checkBuffer(this, 'read source', buf);
    checkRange(this.rank, buf, offsetBytes, bytes, 'read');
    const out = new Uint8Array(bytes);
    copyBytes(Buffer.from(out.buffer), 0, (buf as CpuBuffer).u8, offsetBytes, bytes);
    return out;
  }

  copy(dst: DeviceBuffer, src: DeviceBuffer, bytes: number, _stream?: Stream, at?: CopyOffsets): void {
    this.#open();
    checkBuffer(this, 'copy destination', dst);
    checkBuffer(this, 'copy source', src);
    const { dstOffset = 0, srcOffset = 0 } = at ?? {};
    checkCopyBytes(this.rank, bytes);
    checkRange(this.rank, dst, dstOffset, bytes, 'copy destination');
    checkRange(this.rank, src, srcOffset, bytes, 'copy source');
    checkCopyOverlap(this.rank, dst, src, bytes, dstOffset, srcOffset);
    if (dst !== src || dstOffset !== srcOffset) copyBytes((dst as CpuBuffer).u8, dstOffset, (src as CpuBuffer).u8, srcOffset, bytes);
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
    return this.#plan('1d', args);
  }

  planAllToAllV2d(args: PlanAllToAllV2dArgs): ExchangePlan {
    return this.#plan('dispatch', args);
  }

  planAllToAllV2dOffset(args: PlanAllToAllV2dOffsetArgs): ExchangePlan {
    return this.#plan('combine', args);
  }

  lane(index: number): Lane {
    this.#open();
    checkLaneIndex(this, index);
    return this.#lanes[index];
  }

  allToAllV(args: AllToAllVArgs): Handle {
    this.#usable();
    return this.#direct('1d', this.#lanes[checkAllToAllV(this, args)], args);
  }

  allReduce(args: AllReduceArgs): Handle {
    this.#usable();
    const index = checkAllReduce(this, args);
    const reducer = this.#reducers[index];
    const { input, output, count, dtype } = args;
    return this.#call(index, () => doneHandle(reducer.run({ input: input as CpuBuffer, output: output as CpuBuffer, count, dtype })));
  }

  /** Runs a checked direct call to completion; its handle reports exactly this call's outcome. */
  #direct(kind: ExchangeKind, lane: CpuLane, args: AllToAllVArgs | AllToAllV2dArgs | AllToAllV2dOffsetArgs): Handle {
    const { x, p } = directRecord(kind, this.worldSize, args);
    return this.#call(lane.index, () => doneHandle(lane.call(x, p)));
  }

  #plan(kind: ExchangeKind, args: PlanAllToAllVArgs | PlanAllToAllV2dArgs | PlanAllToAllV2dOffsetArgs): ExchangePlan {
    this.#usable();
    const lane = this.#lanes[checkPlan(this, kind, args)];
    return new CpuPlan({
      ctx: this,
      lane,
      exchange: planRecord(kind, this.worldSize, args),
      buffers: planBuffers(args),
      usable: () => this.#usable(),
      call: (run) => this.#call(lane.index, run),
      replaying: () => this.#replayed !== undefined,
    });
  }

  [EXPLAINED]<T>(explain: Explain, queue: () => T): T {
    const calls = this.#replayed;
    const from = calls?.length ?? 0;
    const queued = queue();
    // The innermost explanation stands: a call already explained keeps its own.
    for (const call of calls?.slice(from) ?? []) call.explain ??= explain;
    return queued;
  }

  /**
   * A call on lane `index`: inside a replayed closure it is counted first (a graph holds at most
   * REPLAY_CALLS_PER_LANE calls a lane, as cuda refuses at capture), then made, and its handle
   * collected for the replay's.
   */
  #call(index: number, run: () => Handle): Handle {
    const calls = this.#replayed;
    if (calls !== undefined && calls.filter((c) => c.lane === index).length >= REPLAY_CALLS_PER_LANE) throw new UsageError(TOO_MANY_REPLAY_CALLS(this.rank, 'more'));
    const handle = run();
    calls?.push({ handle, lane: index });
    return this.#checked(handle.wait);
  }

  // Work here is done when its call returns, so waitOn orders nothing; its stream is still checked,
  // as cuda's is: code tried here must not pass a Lane or a number there unsaid.
  #checked(wait: () => void): Handle {
    return { wait, waitOn: (stream) => checkWaitOn(this.rank, stream, this) };
  }

  capture(stream: Stream, fn: () => void): Replay {
    this.#usable();
    // On cuda the closure runs at capture, so a capture inside it is refused there; here it runs at
    // each launch, and code tried here must not come to rely on one.
    if (this.#replayed !== undefined) throw new UsageError(`rank ${this.rank}: capture() is already in progress`);
    // Checked now, as a capture on cuda runs it now: not as a TypeError at the first launch.
    checkCapture(this, stream, fn);
    let closed = false;
    // Nothing to record on CPU: replaying is calling the closure again, which re-reads the splits.
    // The replay's handle reports the first refused call of the closure, as a graph's would.
    return {
      launch: (on?: Stream) => {
        this.#usable();
        // A closed graph is gone on cuda: code tried here must not come to rely on launching one.
        if (closed) throw new UsageError(`rank ${this.rank}: this replay is closed`);
        // Unused here, but cuda queues the graph on it: a Lane or a number must not pass unsaid.
        checkStream(this, on);
        // Inside a replayed closure: on cuda that is inside capture(), where a launch is refused.
        if (this.#replayed !== undefined) throw new UsageError(LAUNCH_IN_CAPTURE(this.rank));
        const calls: ReplayedCall[] = [];
        this.#replayed = calls;
        try {
          fn();
        } catch (err) {
          // A call of the closure that ended the communicator (a timeout) makes the next one throw
          // CommAbortedError here, where a graph on cuda runs on: as there, the replay's handle
          // reports the first failure.
          if (!(err instanceof CommAbortedError) || calls.length === 0) throw err;
        } finally {
          this.#replayed = undefined;
        }
        return this.#checked(() => {
          for (const { handle, explain } of calls) {
            try {
              handle.wait();
            } catch (err) {
              throw err instanceof Error ? explained(explain, err) : err;
            }
          }
        });
      },
      close: () => {
        closed = true;
      },
    };
  }

  record(stream?: Stream): Handle {
    this.#open();
    checkStream(this, stream);
    // Work on cpu is done when its call returns: there is nothing left to wait for.
    return this.#checked(() => {});
  }

  timeLoop(_stream: Stream, iters: number, fn: () => void, leadIn = 0): number {
    this.#open();
    for (let i = 0; i < leadIn; i++) fn();
    const start = performance.now();
    for (let i = 0; i < iters; i++) fn();
    return performance.now() - start;
  }

  async barrier(options?: BarrierOptions): Promise<void> {
    this.#usable();
    checkBarrier(this.rank, options);
    await this.#setUp(this.#exchange.meet(`barrier/${this.#barriers++}`, options?.timeoutMs ?? startWaitMs(this.timeoutMs)));
  }

  async gatherOnHost(values: readonly number[], options?: BarrierOptions): Promise<number[][]> {
    this.#usable();
    checkBarrier(this.rank, options);
    const words = gatherWords(this.rank, values);
    const all = await this.#setUp(this.#exchange.gather(`gather/${this.#gathers++}`, encodeJson(words), options?.timeoutMs ?? startWaitMs(this.timeoutMs)));
    return all.map((b) => gatheredValues(decodeJson<(number | string)[]>(b)));
  }

  /** A set-up wait whose timeout ends the communicator (endingOnTimeout says why). */
  #setUp<T>(wait: Promise<T>): Promise<T> {
    return endingOnTimeout(wait, (err) => (this.#aborted ??= err));
  }

  [ABORTED](): Error | undefined {
    return this.#closed ? undefined : this.#aborted;
  }

  freeMemory(): number {
    this.#open();
    return this.#exchange.memory.freeBytes();
  }

  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    markedAtExit(this.#ownPad, false);
    // A peer still waiting for this rank will say, when its wait times out, that it is gone.
    if (this.#pads.length > 0) new PadViews(this.#pads[this.rank]).markClosed(this.#aborted !== undefined);
    // Peers hold their own mappings of our memory, so nothing of theirs dangles. Ours go after
    // every view of them (buffers; pads: lanes are never used again once #closed is set).
    const buffers = [...this.#buffers];
    this.#buffers.clear();
    const regions = this.#pads;
    this.#pads = [];
    let first: unknown;
    for (const release of [...buffers.map((b) => () => b.release()), () => closeAll(regions)]) {
      try {
        release();
      } catch (err) {
        first ??= err;
      }
    }
    if (first !== undefined) throw first;
  }

  #keep(buf: CpuBuffer): CpuBuffer {
    this.#buffers.add(buf);
    return buf;
  }

  // A new error per call (as cuda and nccl), so its stack is the call's, not close()'s or the timeout's.
  #usable(): void {
    this.#open();
    if (this.#aborted !== undefined) throw new CommAbortedError(this.rank, { cause: this.#aborted });
  }

  /** Calls that stay allowed on an aborted communicator (reading what is there) are not after close(). */
  #open(): void {
    if (this.#closed) throw new ClosedError(this.rank);
  }
}

// Messages name the rank, as the GPU backends' do: ranks as processes print to one terminal.
function checkSize(rank: number, bytes: number): void {
  if (!Number.isSafeInteger(bytes) || bytes < 0) throw new UsageError(`rank ${rank}: allocation size must be a non-negative integer (at most 2^53-1), got ${shown(bytes)}`);
  // Before the memory is made, so the limit is named rather than met as a failed allocation.
  checkCpuBufferBytes(rank, bytes);
}

function checkRange(rank: number, buf: DeviceBuffer, offset: number, bytes: number, what: string): void {
  if (!Number.isSafeInteger(offset) || offset < 0) throw new UsageError(`rank ${rank}: ${what}: offset must be a non-negative integer, got ${shown(offset)}`);
  if (!Number.isSafeInteger(bytes) || bytes < 0) throw new UsageError(`rank ${rank}: ${what}: byte count must be a non-negative integer, got ${shown(bytes)}`);
  if (offset + bytes > buf.bytes) {
    throw new UsageError(`rank ${rank}: ${what} of ${bytes} bytes at offset ${offset} is outside a ${buf.bytes}-byte buffer`);
  }
}
