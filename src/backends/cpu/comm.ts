// The CPU backend: ranks are worker threads, "device memory" is SharedArrayBuffer, and a symmetric
// allocation is every rank's SharedArrayBuffer handed to every peer through the rendezvous store.
// Collectives run synchronously in the calling thread, so every Handle is complete when returned.
import { Buffer } from 'node:buffer';
import { freemem } from 'node:os';
import type { AllToAllVArgs, Comm, DeviceBuffer, Handle, Lane, Replay, Stream } from '../backend.js';
import type { CommOptions } from '../create.js';
import { checkAllToAllV, checkBuffer, type CheckContext } from '../../collectives/check.js';
import { CommAbortedError, StoreError, TimeoutError, UsageError } from '../../errors.js';
import type { Store } from '../../world/store.js';
import { CpuBuffer } from './buffer.js';
import { copyBytes } from './memcpy.js';
import { CpuLane, type CpuCallArgs } from './lane.js';
import { PadLayout, PadViews } from './pad.js';

/**
 * Waits during set-up (the pad exchange) get at least this long: starting W threads can take
 * longer than a short collective timeout a test asks for.
 */
const STARTUP_TIMEOUT_FLOOR_MS = 10_000;

export async function createCpuComm(opts: CommOptions): Promise<Comm> {
  const layout = new PadLayout(opts.worldSize, opts.lanes);
  const ex = new Rendezvous(opts.store, opts.rank, opts.worldSize);
  const pads = await ex.share('pad', new SharedArrayBuffer(layout.bytes), Math.max(opts.timeoutMs, STARTUP_TIMEOUT_FLOOR_MS));
  return new CpuComm(opts, ex, layout, pads.map((m) => new PadViews(m.buffer as SharedArrayBuffer)));
}

class CpuComm implements Comm, CheckContext {
  readonly backend = 'cpu';
  readonly rank: number;
  readonly worldSize: number;
  readonly timeoutMs: number;
  readonly deviceName = 'cpu thread';
  readonly ranksOnDevice: number;
  readonly laneCount: number;
  #exchange: Rendezvous;
  #lanes: CpuLane[];
  #nextSymmetricId = 0;
  #barriers = 0;
  /** Why the communicator is unusable (closed, or a peer timed out), else undefined. */
  #broken: Error | undefined;

  constructor(opts: CommOptions, exchange: Rendezvous, layout: PadLayout, pads: PadViews[]) {
    this.rank = opts.rank;
    this.worldSize = opts.worldSize;
    this.timeoutMs = opts.timeoutMs;
    this.ranksOnDevice = opts.worldSize;
    this.laneCount = opts.lanes;
    this.#exchange = exchange;
    const onTimeout = (cause: Error): void => {
      this.#broken ??= new CommAbortedError(this.rank, { cause });
    };
    this.#lanes = Array.from({ length: opts.lanes }, (_, index) => new CpuLane({ index, rank: this.rank, layout, pads, timeoutMs: this.timeoutMs, onTimeout }));
  }

  owns(buf: DeviceBuffer): boolean {
    return buf instanceof CpuBuffer && buf.owner === this;
  }

  ownsLane(lane: Lane): boolean {
    return this.#lanes[lane.index] === lane;
  }

  alloc(bytes: number): DeviceBuffer {
    this.#usable();
    checkSize(bytes);
    return new CpuBuffer(this, new SharedArrayBuffer(bytes));
  }

  async allocSymmetric(bytes: number): Promise<DeviceBuffer> {
    this.#usable();
    checkSize(bytes);
    const id = this.#nextSymmetricId++;
    const memory = new SharedArrayBuffer(bytes);
    const peers = await this.#exchange.share(`sym/${id}`, memory, this.timeoutMs);
    return new CpuBuffer(this, memory, id, peers);
  }

  free(buf: DeviceBuffer): void {
    checkBuffer(this, 'buffer to free', buf);
    (buf as CpuBuffer).release();
  }

  write(buf: DeviceBuffer, data: ArrayBufferView, offsetBytes = 0): void {
    checkBuffer(this, 'write target', buf);
    checkRange(buf, offsetBytes, data.byteLength, 'write');
    copyBytes((buf as CpuBuffer).u8, offsetBytes, Buffer.from(data.buffer, data.byteOffset, data.byteLength), 0, data.byteLength);
  }

  read(buf: DeviceBuffer, offsetBytes: number, bytes: number): Uint8Array {
    checkBuffer(this, 'read source', buf);
    checkRange(buf, offsetBytes, bytes, 'read');
    const out = new Uint8Array(bytes);
    copyBytes(Buffer.from(out.buffer), 0, (buf as CpuBuffer).u8, offsetBytes, bytes);
    return out;
  }

  copy(dst: DeviceBuffer, src: DeviceBuffer, bytes: number, _stream?: Stream): void {
    checkBuffer(this, 'copy destination', dst);
    checkBuffer(this, 'copy source', src);
    checkRange(dst, 0, bytes, 'copy');
    checkRange(src, 0, bytes, 'copy');
    if (dst !== src) copyBytes((dst as CpuBuffer).u8, 0, (src as CpuBuffer).u8, 0, bytes);
  }

  lane(index: number): Lane {
    const lane = this.#lanes[index];
    if (lane === undefined) throw new UsageError(`rank ${this.rank}: lane ${index} out of range (this communicator has ${this.laneCount})`);
    return lane;
  }

  allToAllV(args: AllToAllVArgs): Handle {
    this.#usable();
    const lane = this.#lanes[checkAllToAllV(this, args)];
    lane.allToAllV(args as unknown as CpuCallArgs);
    return lane.handle;
  }

  capture(_stream: Stream, fn: () => void): Replay {
    this.#usable();
    // Nothing to record on CPU: replaying is calling the closure again, which re-reads the splits.
    return { launch: () => fn(), close: () => {} };
  }

  timeLoop(_stream: Stream, iters: number, fn: () => void): number {
    const start = performance.now();
    for (let i = 0; i < iters; i++) fn();
    return performance.now() - start;
  }

  async barrier(): Promise<void> {
    this.#usable();
    await this.#exchange.share(`barrier/${this.#barriers++}`, undefined, this.timeoutMs);
  }

  freeMemory(): number {
    return freemem();
  }

  async close(): Promise<void> {
    // Peers hold their own references to our shared memory, so nothing can dangle; just refuse more use.
    this.#broken = new UsageError(`rank ${this.rank}: communicator is closed`);
  }

  #usable(): void {
    if (this.#broken !== undefined) throw this.#broken;
  }
}

/** Set-up exchanges over the rendezvous store; a peer that does not show up is named. */
class Rendezvous {
  #store: Store;
  #rank: number;
  #world: number;

  constructor(store: Store, rank: number, world: number) {
    this.#store = store;
    this.#rank = rank;
    this.#world = world;
  }

  /**
   * Publishes `memory` (or an empty marker, for a barrier) under `name`, then collects every rank's,
   * in rank order. Returns views of every rank's memory (the same memory, not copies).
   */
  async share(name: string, memory: SharedArrayBuffer | undefined, timeoutMs: number): Promise<Uint8Array[]> {
    const key = (rank: number): string => `a2av/cpu/${name}/${rank}`;
    await this.#store.set(key(this.#rank), memory === undefined ? new Uint8Array(0) : new Uint8Array(memory));
    const deadline = Date.now() + timeoutMs;
    const all: Uint8Array[] = [];
    for (let p = 0; p < this.#world; p++) {
      let value: Uint8Array;
      try {
        value = await this.#store.get(key(p), Math.max(1, deadline - Date.now()));
      } catch (err) {
        if (err instanceof StoreError && err.reason === 'timeout') {
          throw new TimeoutError(this.#rank, p, timeoutMs, `cpu backend ${name}`);
        }
        throw err;
      }
      if (memory !== undefined) {
        if (!(value.buffer instanceof SharedArrayBuffer)) {
          throw new UsageError(`the cpu backend needs a store that passes shared memory (runRanks threads); rank ${p}'s ${name} arrived as a copy`);
        }
        if (value.byteLength !== memory.byteLength) {
          throw new UsageError(`rank ${this.#rank}: ${name} is ${memory.byteLength} bytes here but ${value.byteLength} on rank ${p} (every rank must ask for the same size)`);
        }
      }
      all.push(value);
    }
    return all;
  }
}

function checkSize(bytes: number): void {
  if (!Number.isSafeInteger(bytes) || bytes < 0) throw new UsageError(`allocation size must be a non-negative integer, got ${bytes}`);
}

function checkRange(buf: DeviceBuffer, offset: number, bytes: number, what: string): void {
  if (!Number.isSafeInteger(offset) || !Number.isSafeInteger(bytes) || offset < 0 || bytes < 0 || offset + bytes > buf.bytes) {
    throw new UsageError(`${what} of ${bytes} bytes at offset ${offset} is outside a ${buf.bytes}-byte buffer`);
  }
}
