// One lane of the CPU backend: the same protocol and rules as the CUDA kernels, run synchronously in
// the rank's thread, so every backend fails the same way. Ranks are threads or processes: the pads
// and outputs are SharedRegions (memory.ts), the same code for both.
//
// A call on sequence number s: publish this rank's record (collectives/exchange-rules.ts: the call's
// header, and its splits as they are in the buffer now) into its pad slot s & 1, raise its arrive
// flag to s; wait for every peer's arrive flag; judge every rank's record (every rank reaches the
// same verdict, so either all move data or none does); push this rank's rows straight into each
// peer's output, write its own outSplitsOffsets, raise its done flag on every peer; wait for every
// peer's done flag here. A plan's exchange stops before the rows; a plan's move publishes only the
// header and pushes along the plan's routing.
import type { Handle, Lane, Stream } from '../backend.js';
import { leftAfterFailure, peerLeftNote } from '../../errors.js';
import { judge, mismatchOf, RECORD_HEADER_WORDS, Records, writeAllReduceHeader, writeHeader, type RecordHeader } from '../../collectives/exchange-rules.js';
import { Routing } from '../../collectives/exchange-routing.js';
import { StatusCode, WAIT_AR_DATA, WAIT_AR_HEADER, WAIT_ARRIVAL, WAIT_DONE, WAIT_MOVE, entryError, type StatusEntry } from '../../collectives/status.js';
import type { CallRecord, Payload } from '../../collectives/call-records.js';
import type { CpuBuffer } from './buffer.js';
import { copyBytes } from './memcpy.js';
import type { PadLayout, PadViews } from './pad.js';

/**
 * How long a wait spins on a flag before it sleeps. A peer on another core usually arrives within
 * this, and a sleep costs a wake-up of tens of µs (more in a VM), as much as a 1 MiB call; with more
 * ranks than cores a sleeper gives its core to a peer, and spinning wastes at most this per wait.
 */
const SPIN_MS = 0.1;
/** Loads between looks at the clock while spinning. */
const SPIN_CHECK = 256;
/** Longest single sleep; only bounds how late the deadline is noticed (a peer's store wakes sleepers). */
const MAX_SLEEP_MS = 20;

/** The cpu backend's streams: plain objects (work is done when its call returns), known by identity. */
const cpuStreams = new WeakSet<Stream>();

/** A new stream of the cpu backend (a lane's, the pipeline's compute and data streams). */
export function cpuStream(): Stream {
  const stream: Stream = { kind: 'stream' };
  cpuStreams.add(stream);
  return stream;
}

/** Whether `stream` is one cpuStream() made. */
export function isCpuStream(stream: Stream): boolean {
  return cpuStreams.has(stream);
}

export interface CpuLaneInit {
  index: number;
  rank: number;
  layout: PadLayout;
  /** Every rank's pad, by rank. */
  pads: PadViews[];
  timeoutMs: number;
  /** Called once a wait has timed out: the lane's peers are out of step, the comm is done for. */
  onTimeout: (err: Error) => void;
}

/** A handle for work that already ran: it reports `err`, or nothing. */
export function doneHandle(err: Error | undefined): Handle {
  return {
    wait: () => {
      if (err !== undefined) throw err;
    },
    waitOn: () => {},
  };
}

export class CpuLane implements Lane {
  readonly index: number;
  readonly stream: Stream = cpuStream();
  #rank: number;
  #world: number;
  #timeoutMs: number;
  #pads: PadViews[];
  #onTimeout: (err: Error) => void;
  #arrive: number;
  #done: number;
  /** Every rank's record in slot 0 and slot 1. */
  #records: [Records, Records];
  /** The routing of the current direct call (reused). */
  #routing: Routing;
  #seq = 0;
  #deadline = NaN;
  #lastSeen = 0;

  constructor(init: CpuLaneInit) {
    this.index = init.index;
    this.#rank = init.rank;
    this.#world = init.layout.worldSize;
    this.#timeoutMs = init.timeoutMs;
    this.#pads = init.pads;
    this.#onTimeout = init.onTimeout;
    const { layout, index } = init;
    this.#arrive = layout.arriveWord(index);
    this.#done = layout.doneWord(index);
    this.#records = [0, 1].map((slot) => {
      const m = new Records(this.#world);
      init.pads.forEach((pad, q) => {
        m.words[q] = pad.i32;
        m.base[q] = layout.recordWord(index, slot);
      });
      return m;
    }) as [Records, Records];
    this.#routing = new Routing(this.#rank, this.#world);
  }

  /** The sequence number of the latest call on this lane (every rank's calls on a lane are numbered alike). */
  get seq(): number {
    return this.#seq;
  }

  /** A direct call (allToAllV, allToAllV2d, allToAllV2dOffset): its error (refused, or a peer timed out), else undefined. */
  call(x: CallRecord, p: Payload): Error | undefined {
    const seq = this.#publish(x.header, x.splits as CpuBuffer, x.words);
    const err = this.#arrived(seq, x.what) ?? this.#judge(seq, x, this.#routing);
    if (err !== undefined) return err;
    this.#push(this.#routing, p);
    this.#routing.writeSplitsOffsets((x.outSplitsOffsets as CpuBuffer).i32);
    return this.#finish(seq, x.what);
  }

  /** A plan's exchange: judged into `routing` (kept by the plan), outSplitsOffsets written, no rows. */
  plan(x: CallRecord, routing: Routing): Error | undefined {
    const seq = this.#publish(x.header, x.splits as CpuBuffer, x.words);
    const err = this.#arrived(seq, x.what) ?? this.#judge(seq, x, routing);
    if (err === undefined) routing.writeSplitsOffsets((x.outSplitsOffsets as CpuBuffer).i32);
    return err;
  }

  /** A plan's move (`what` names it, and its operation): the ranks' headers must agree (row size, output), then the rows along `routing`. */
  move(header: RecordHeader, routing: Routing, p: Payload, what: string): Error | undefined {
    const seq = this.#publish(header, undefined, 0);
    const err = this.#arrived(seq, what, WAIT_MOVE);
    if (err !== undefined) return err;
    const refused = mismatchOf(this.#records[seq & 1], this.#rank);
    if (refused !== undefined) return entryError(refused, this.#timeoutMs, what);
    this.#push(routing, p);
    return this.#finish(seq, what);
  }

  /**
   * One round of an allReduce (all-reduce.ts): `stage` fills this rank's scratch before it arrives,
   * `reduce` runs once every peer has arrived (their scratch is then complete), and the done flags
   * keep every scratch unchanged until each peer has read it. The call's first round (`first`)
   * also publishes an allReduce's record, so that a peer in an exchange call (allToAllV, MoE, a
   * plan's) beside it and this rank both refuse the call, as a mismatch of kind, before any done
   * flag (a refused exchange call raises none); the others carry nothing to judge.
   */
  round(what: string, stage: () => void, reduce: () => void, first = false): Error | undefined {
    const seq = this.#next();
    stage();
    const m = this.#records[seq & 1];
    if (first) writeAllReduceHeader(this.#pads[this.#rank].i32, m.base[this.#rank]);
    this.#arriveAt(seq);
    const err = this.#arrived(seq, what, first ? WAIT_AR_HEADER : WAIT_AR_DATA);
    if (err !== undefined) return err;
    const refused = first ? mismatchOf(m, this.#rank) : undefined;
    if (refused !== undefined) return entryError(refused, this.#timeoutMs, what);
    reduce();
    return this.#finish(seq, what);
  }

  /** The next call's sequence number; starts its deadline afresh. */
  #next(): number {
    this.#seq = (this.#seq + 1) | 0;
    this.#deadline = NaN;
    return this.#seq;
  }

  /** Raises this rank's arrive flag to `seq` (after what peers will read is in place). */
  #arriveAt(seq: number): void {
    const mine = this.#pads[this.#rank];
    Atomics.store(mine.i32, this.#arrive, seq);
    mine.wake(this.#arrive);
  }

  /** Writes this rank's record for the next call into its slot and arrives; returns the call's sequence number. */
  #publish(header: RecordHeader, splits: CpuBuffer | undefined, words: number): number {
    const seq = this.#next();
    const m = this.#records[seq & 1];
    const mine = this.#pads[this.#rank];
    const at = m.base[this.#rank];
    writeHeader(mine.i32, at, header);
    if (splits !== undefined) {
      const from = splits.i32;
      const to = mine.i32;
      const data = at + 2 * RECORD_HEADER_WORDS;
      for (let i = 0; i < 2 * words; i++) to[data + i] = from[i];
    }
    this.#arriveAt(seq);
    return seq;
  }

  /**
   * Waits for every peer's record of call `seq`; the timeout's error if one never comes, naming the
   * wait as the GPU kernels name theirs (`site`: a call's splits, a move's header, an allReduce's).
   */
  #arrived(seq: number, what: string, site = WAIT_ARRIVAL): Error | undefined {
    for (let p = 0; p < this.#world; p++) {
      if (p === this.#rank) continue;
      const waited = this.#waitFor(this.#pads[p], this.#arrive, seq, p);
      if (waited !== true) return this.#timedOut(p, seq, what, site, waited);
    }
    return undefined;
  }

  #judge(seq: number, x: CallRecord, routing: Routing): Error | undefined {
    const refused = judge(this.#records[seq & 1], this.#rank, routing);
    return refused && entryError(refused, this.#timeoutMs, x.what);
  }

  /** Pushes this rank's chunks straight into each peer's output. */
  #push(routing: Routing, p: Payload): void {
    const rb = p.rowBytes;
    const src = (p.input as CpuBuffer).u8;
    const output = p.output as CpuBuffer;
    for (let k = 0; k < routing.chunks; k++) {
      copyBytes(output.peer(routing.peer[k]), routing.dstRow[k] * rb, src, routing.srcRow[k] * rb, routing.rows[k] * rb);
    }
  }

  /** Raises this rank's done flag on every peer, then waits for theirs. */
  #finish(seq: number, what: string): Error | undefined {
    const me = this.#rank;
    const pads = this.#pads;
    const done = this.#done;
    for (let r = 0; r < this.#world; r++) {
      if (r === me) continue;
      Atomics.store(pads[r].i32, done + me, seq);
      pads[r].wake(done + me);
    }
    for (let p = 0; p < this.#world; p++) {
      if (p === me) continue;
      const waited = this.#waitFor(pads[me], done + p, seq, p);
      if (waited !== true) return this.#timedOut(p, seq, what, WAIT_DONE, waited);
    }
    return undefined;
  }

  /**
   * Waits until word idx of `pad` >= seq (in wrapping int32 order), which rank `peer` writes:
   * 'timeout' when the call's deadline passed, 'left' as soon as `peer` has closed its
   * communicator without writing it (it makes no call again, so waiting on would only delay the error).
   */
  #waitFor(pad: PadViews, idx: number, seq: number, peer: number): true | 'timeout' | 'left' {
    const arr = pad.i32;
    let v = Atomics.load(arr, idx);
    if (((v - seq) | 0) >= 0) return true;
    const spinUntil = performance.now() + SPIN_MS;
    for (let i = 1; ; i++) {
      v = Atomics.load(arr, idx);
      if (((v - seq) | 0) >= 0) return true;
      if (i % SPIN_CHECK === 0 && performance.now() > spinUntil) break;
    }
    // Spinning did not do it: sleep until the writer's wake (3 ranks on 2 cores must yield).
    if (this.#deadline !== this.#deadline) this.#deadline = performance.now() + this.#timeoutMs;
    while (((v - seq) | 0) < 0) {
      const left = this.#deadline - performance.now();
      if (left <= 0) {
        this.#lastSeen = v;
        return 'timeout';
      }
      pad.wait(idx, v, Math.min(left, MAX_SLEEP_MS));
      v = Atomics.load(arr, idx);
      if (((v - seq) | 0) < 0 && this.#pads[peer].closed !== undefined) {
        // The peer stores its words before its closed mark: read again after seeing the mark.
        v = Atomics.load(arr, idx);
        if (((v - seq) | 0) < 0) {
          this.#lastSeen = v;
          return 'left';
        }
      }
    }
    return true;
  }

  #timedOut(peer: number, seq: number, what: string, site: number, how: 'timeout' | 'left'): Error {
    const entry: StatusEntry = {
      code: StatusCode.timeout,
      rank: this.#rank,
      peer,
      needed: BigInt(seq),
      available: BigInt(this.#lastSeen),
      reportedBy: this.#rank,
      expert: site,
    };
    const left = this.#pads[peer].closed;
    const note = left === undefined ? undefined : peerLeftNote(left);
    const waited = { waitedMs: Math.round(performance.now() - (this.#deadline - this.#timeoutMs)), peerFailed: left !== undefined && leftAfterFailure(left) };
    // Named by its lane, as cuda's are: ranks that call lanes in another order wait on different ones.
    const onLane = /on lane \d+/.test(what) ? what : `${what} on lane ${this.index}`;
    const err = entryError(entry, this.#timeoutMs, onLane, note, how === 'left' ? waited : undefined);
    this.#onTimeout(err);
    return err;
  }
}
