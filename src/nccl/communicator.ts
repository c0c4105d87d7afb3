// One NCCL communicator: init from a unique id shared through the rendezvous store, the calls a2av
// makes, asynchronous errors, abort and teardown. Both NCCL modes are supported:
//   blocking     calls return once enqueued (NCCL's default, and what its users run);
//   nonblocking  calls may return ncclInProgress and are settled here by polling
//                ncclCommGetAsyncError, bounded: init itself can then be aborted.
// Nonblocking mode runs every grouped launch on a helper thread NCCL creates per call, which costs
// tens of µs: fine for init, wrong for a baseline that is meant to be timed.
import { TimeoutError, UsageError } from '../errors.js';
import type { Store } from '../world/store.js';
import { check, ncclError, ncclLib, NcclResult, UNIQUE_ID_BYTES, type NcclOp, type NcclType } from './library.js';

export interface NcclInitOptions {
  rank: number;
  nranks: number;
  /** ncclGetUniqueId() of one rank, the same on all (shareUniqueId). */
  id: Uint8Array;
  blocking: boolean;
  /** Bound on a nonblocking init (the communicator is aborted past it); unused when blocking. */
  timeoutMs: number;
}

/** ncclConfig_t as NCCL 2.17 laid it out; NCCL fills newer fields with defaults (it reads `size` bytes). */
const CONFIG_BYTES = 40;
const CONFIG_MAGIC = 0xcafebeef;
const CONFIG_VERSION = 21700;
const CONFIG_UNDEF_INT = -2147483648;

function encodeConfig(blocking: boolean): Buffer {
  const b = Buffer.alloc(CONFIG_BYTES);
  b.writeBigUInt64LE(BigInt(CONFIG_BYTES), 0);
  b.writeUInt32LE(CONFIG_MAGIC, 8);
  b.writeUInt32LE(CONFIG_VERSION, 12);
  b.writeInt32LE(blocking ? 1 : 0, 16);
  for (const at of [20, 24, 28]) b.writeInt32LE(CONFIG_UNDEF_INT, at); // cgaClusterSize, minCTAs, maxCTAs
  // [32, 40): netName = NULL
  return b;
}

const nap = new Int32Array(new SharedArrayBuffer(4));

/** Sleeps a little: the polls below wait on other threads (NCCL's) or other processes. */
export function napMs(ms: number): void {
  Atomics.wait(nap, 0, 0, ms);
}

export class NcclCommunicator {
  readonly rank: number;
  readonly nranks: number;
  readonly blocking: boolean;
  #handle: bigint;

  private constructor(handle: bigint, opts: NcclInitOptions) {
    this.#handle = handle;
    this.rank = opts.rank;
    this.nranks = opts.nranks;
    this.blocking = opts.blocking;
  }

  /** A fresh unique id: one rank creates it (and hosts the bootstrap root), every rank inits with it. */
  static uniqueId(): Uint8Array {
    const id = new Uint8Array(UNIQUE_ID_BYTES);
    check('ncclGetUniqueId', ncclLib().ncclGetUniqueId(id));
    return id;
  }

  /**
   * Collective over `nranks` ranks, on the CUDA device current in this thread. Blocking: returns
   * when every rank has joined. Nonblocking: polls, and aborts with TimeoutError after timeoutMs.
   */
  static init(opts: NcclInitOptions): NcclCommunicator {
    if (opts.id.byteLength !== UNIQUE_ID_BYTES) throw new UsageError(`NCCL unique id must be ${UNIQUE_ID_BYTES} bytes, got ${opts.id.byteLength}`);
    const out = new BigUint64Array(1);
    const status = ncclLib().ncclCommInitRankConfig(out, opts.nranks, { internal: opts.id }, opts.rank, encodeConfig(opts.blocking));
    if (status !== NcclResult.inProgress) check('ncclCommInitRankConfig', status, out[0]);
    const comm = new NcclCommunicator(out[0], opts);
    if (status === NcclResult.inProgress) comm.#settle('ncclCommInitRankConfig', status, performance.now() + opts.timeoutMs, opts.timeoutMs);
    return comm;
  }

  get handle(): bigint {
    if (this.#handle === 0n) throw new UsageError(`NCCL communicator of rank ${this.rank} is already destroyed`);
    return this.#handle;
  }

  get destroyed(): boolean {
    return this.#handle === 0n;
  }

  /** ncclCommGetAsyncError: ncclSuccess, ncclInProgress (nonblocking work pending) or the error. */
  asyncError(): number {
    const out = new Int32Array(1);
    check('ncclCommGetAsyncError', ncclLib().ncclCommGetAsyncError(this.handle, out), this.#handle);
    return out[0];
  }

  /** Throws the communicator's asynchronous error as NcclError; returns for success or in-progress. */
  throwAsyncError(what: string): void {
    const s = this.asyncError();
    if (s !== NcclResult.success && s !== NcclResult.inProgress) throw ncclError(`${what} (asynchronous)`, s, this.#handle);
  }

  // The enqueue calls return NCCL's status: groupEnd() settles the group, and outside a group
  // settle() does. Within a group a call only records the operation.
  send(ptr: bigint, count: number, type: NcclType, peer: number, stream: bigint): number {
    return ncclLib().ncclSend(ptr, count, type, peer, this.handle, stream);
  }
  recv(ptr: bigint, count: number, type: NcclType, peer: number, stream: bigint): number {
    return ncclLib().ncclRecv(ptr, count, type, peer, this.handle, stream);
  }
  allGather(send: bigint, recv: bigint, count: number, type: NcclType, stream: bigint): number {
    return ncclLib().ncclAllGather(send, recv, count, type, this.handle, stream);
  }
  allReduce(send: bigint, recv: bigint, count: number, type: NcclType, op: NcclOp, stream: bigint): number {
    return ncclLib().ncclAllReduce(send, recv, count, type, op, this.handle, stream);
  }
  /** ncclAlltoAll (NCCL >= 2.28): `count` elements to and from every rank. */
  allToAll(send: bigint, recv: bigint, count: number, type: NcclType, stream: bigint): number {
    const fn = ncclLib().ncclAlltoAll;
    if (!fn) throw new UsageError(`this NCCL (${ncclLib().version}) has no ncclAlltoAll`);
    return fn(send, recv, count, type, this.handle, stream);
  }

  /**
   * Turns an enqueue status into done-or-throw: errors become NcclError; ncclInProgress (nonblocking
   * only) is polled until the operation is enqueued, and past `timeoutMs` the communicator is
   * aborted and TimeoutError thrown.
   */
  settle(call: string, status: number, timeoutMs: number): void {
    if (status === NcclResult.success) return;
    if (status !== NcclResult.inProgress) throw ncclError(call, status, this.#handle);
    this.#settle(call, status, performance.now() + timeoutMs, timeoutMs);
  }

  #settle(call: string, status: number, deadline: number, timeoutMs: number): void {
    for (let i = 0; status === NcclResult.inProgress; i++) {
      if (performance.now() > deadline) {
        this.abort();
        throw new TimeoutError(this.rank, -1, timeoutMs, `${call}: NCCL did not finish (a peer never joined?); communicator aborted`);
      }
      if (i > 100) napMs(0.1);
      status = this.asyncError();
    }
    if (status !== NcclResult.success) {
      const err = ncclError(call, status, this.#handle);
      this.abort();
      throw err;
    }
  }

  /** Stops everything this communicator runs, on the device too, and frees it. Local, never waits for peers. */
  abort(): void {
    if (this.#handle === 0n) return;
    const h = this.#handle;
    this.#handle = 0n;
    check('ncclCommAbort', ncclLib().ncclCommAbort(h));
  }

  /**
   * The orderly end: ncclCommFinalize (flushes, may wait for peers), then ncclCommDestroy. Bounded:
   * a finalize that does not complete within `timeoutMs` ends in abort instead.
   */
  destroy(timeoutMs: number): void {
    if (this.#handle === 0n) return;
    const h = this.#handle;
    try {
      this.settle('ncclCommFinalize', ncclLib().ncclCommFinalize(h), timeoutMs);
    } catch {
      this.abort(); // settle() aborted already on timeout; abort() is idempotent
      return;
    }
    this.#handle = 0n;
    check('ncclCommDestroy', ncclLib().ncclCommDestroy(h));
  }
}

export function groupStart(): void {
  check('ncclGroupStart', ncclLib().ncclGroupStart());
}

/** Ends a group; returns its status for `comm.settle()` (ncclInProgress with nonblocking communicators). */
export function groupEnd(): number {
  return ncclLib().ncclGroupEnd();
}

/**
 * Rank 0 creates a unique id and publishes it under `key`; every other rank reads it. Keys must be
 * fresh per communicator (the store keeps values).
 */
export async function shareUniqueId(store: Store, key: string, rank: number, timeoutMs: number): Promise<Uint8Array> {
  if (rank === 0) {
    const id = NcclCommunicator.uniqueId();
    await store.set(key, id);
    return id;
  }
  const id = await store.get(key, timeoutMs);
  if (id.byteLength !== UNIQUE_ID_BYTES) throw new UsageError(`${key}: expected a ${UNIQUE_ID_BYTES}-byte NCCL unique id, got ${id.byteLength} bytes`);
  return id;
}
