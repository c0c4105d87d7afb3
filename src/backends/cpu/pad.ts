// Layout of a CPU rank's signal pad: one shared region per rank (a SharedArrayBuffer for threads,
// shared memory for processes), one region per lane after a header line. Peers read a rank's
// published call record and flags from it, and write their "done" flags into it.
//
// Header line: int32 sleepers: how many ranks sleep on a word of this pad (wakes are skipped
// while it is 0: a wake is a system call when ranks are processes); int32 closed: 1 once the rank
// closed its communicator, 2 if it closed after a failure of its own, 3 if its process (or thread)
// exited with the communicator open, 4 if it did so with an error status (a peer left waiting for it says which).
// Lane region (bytes from the lane's base; regions are 64-byte aligned so lanes never share a line):
//   0                 arrive flag (int32): the lane sequence number of this rank's latest call
//   64 + k·slotBytes  slot k = seq & 1 (double-buffered, so a peer that races ahead to the next call
//                     cannot overwrite a record still being read for this one): the call's record
//                     (collectives/exchange-rules.ts), sized for the largest, combine's with
//                     MAX_EXPERTS_PER_RANK experts: int64[7 + 2·W·256]. Ranks are processes, so
//                     the splits must be copied here for peers to read them.
//   doneOffset        int32 done[W]: done[p] = last sequence number whose data rank p has pushed here
//   scratchOffset     SCRATCH_BYTES: allReduce's staging (all-reduce.ts): a chunk of this rank's
//                     input, copied here for peers to read (a local input is not mapped by peers)
// The "done" words sit on their own line: peers write them while the owner writes its slots.
import { Buffer } from 'node:buffer';
import { MAX_EXPERTS_PER_RANK } from '../backend.js';
import type { PeerLeft } from '../../errors.js';
import { RECORD_HEADER_WORDS, recordDataWords } from '../../collectives/exchange-rules.js';
import type { SharedRegion } from './memory.js';

const LINE = 64;
/**
 * allReduce stages its input through the pad in chunks of this many bytes a rank per lane: small
 * enough for W = 72 ranks of 2 lanes (18 MiB of pads), large enough that a round's two waits cost
 * less than its sum.
 */
export const SCRATCH_BYTES = 128 * 1024;
/** Int32 index of the sleepers count. */
const SLEEPERS = 0;
/** Int32 index of the closed mark. */
const CLOSED = 1;

const align = (n: number, to: number): number => Math.ceil(n / to) * to;

export class PadLayout {
  readonly worldSize: number;
  readonly lanes: number;
  readonly laneBytes: number;
  readonly slotBytes: number;
  readonly doneOffset: number;
  readonly scratchOffset: number;

  constructor(worldSize: number, lanes: number) {
    this.worldSize = worldSize;
    this.lanes = lanes;
    this.slotBytes = align(8 * (RECORD_HEADER_WORDS + recordDataWords('combine', worldSize, MAX_EXPERTS_PER_RANK)), LINE);
    this.doneOffset = align(LINE + 2 * this.slotBytes, LINE);
    this.scratchOffset = align(this.doneOffset + 4 * worldSize, LINE);
    this.laneBytes = this.scratchOffset + SCRATCH_BYTES;
  }

  get bytes(): number {
    return LINE + this.laneBytes * this.lanes;
  }

  /** Int32 index of lane `lane`'s arrive flag. */
  arriveWord(lane: number): number {
    return this.#base(lane) >> 2;
  }

  /** Int32 index of done[0] in lane `lane`. */
  doneWord(lane: number): number {
    return (this.#base(lane) + this.doneOffset) >> 2;
  }

  /** Byte offset of lane `lane`'s allReduce scratch. */
  scratchByte(lane: number): number {
    return this.#base(lane) + this.scratchOffset;
  }

  /** Int32 index of slot `slot`'s record in lane `lane`. */
  recordWord(lane: number, slot: number): number {
    return (this.#base(lane) + LINE + slot * this.slotBytes) >> 2;
  }

  /** Byte offset of lane `lane`'s region: after the header line. */
  #base(lane: number): number {
    return LINE + lane * this.laneBytes;
  }
}

/** Typed views of one rank's pad, made once, and sleeping on and waking its words. */
export class PadViews {
  readonly i32: Int32Array;
  /** Bytes, as a Buffer so copies take memcpy.ts's fast path. */
  readonly u8: Buffer;
  readonly region: SharedRegion;

  constructor(region: SharedRegion) {
    this.region = region;
    this.i32 = new Int32Array(region.buffer);
    this.u8 = Buffer.from(region.buffer);
  }

  /**
   * Sleeps while word `index` holds `value` (at most timeoutMs). Counted in the pad's sleepers
   * before the sleep, which rechecks the word: a writer that stores, then finds no sleeper, stored
   * before this count rose, so the recheck sees its value.
   */
  wait(index: number, value: number, timeoutMs: number): void {
    Atomics.add(this.i32, SLEEPERS, 1);
    try {
      this.region.wait(index, value, timeoutMs);
    } finally {
      Atomics.sub(this.i32, SLEEPERS, 1);
    }
  }

  /** Marks the pad's rank as closed: it makes no call again; `failed`, after a failure of its own (a timeout). */
  markClosed(failed: boolean): void {
    Atomics.store(this.i32, CLOSED, failed ? 2 : 1);
  }

  /** Marks the pad's rank as gone with its communicator open (its process's exit); `failed`, with an error status. */
  markExited(failed: boolean): void {
    Atomics.store(this.i32, CLOSED, failed ? 4 : 3);
  }

  /** How the pad's rank left, if it has. */
  get closed(): PeerLeft | undefined {
    const v = Atomics.load(this.i32, CLOSED);
    return v === 1 ? 'closed' : v === 2 ? 'closed after a failure' : v === 3 ? 'exited' : v === 4 ? 'exited after a failure' : undefined;
  }

  /** Wakes the sleepers on word `index`, if any. Call after the Atomics.store to it. */
  wake(index: number): void {
    if (Atomics.load(this.i32, SLEEPERS) !== 0) this.region.wake(index);
  }
}
