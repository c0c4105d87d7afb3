// One lane of the CPU backend and its allToAllV: the same protocol and validation as the CUDA
// kernel, run synchronously in the rank's thread, so both backends fail the same way. Ranks are
// threads or processes: the pads and outputs are SharedRegions (memory.ts), the same code for both.
//
// A call on sequence number s: publish this rank's description (splits read now, capacities, row
// size, output id) into its pad slot s & 1, raise its arrive flag to s; wait for every peer's
// arrive flag; validate the whole split matrix (every rank reaches the same verdict, so either all
// move data or none does); push this rank's rows straight into each peer's output, write its own
// outSplitsOffsets, raise its done flag on every peer; wait for every peer's done flag here.
import type { Handle, Lane, Stream } from '../backend.js';
import { StatusCode, entryError, saturatingSum, type StatusEntry } from '../../collectives/status.js';
import type { CpuBuffer } from './buffer.js';
import { copyBytes } from './memcpy.js';
import { PadViews, SlotField, type PadLayout } from './pad.js';

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
const TWO32 = 4294967296;

export interface CpuCallArgs {
  input: CpuBuffer;
  output: CpuBuffer;
  inSplits: CpuBuffer;
  outSplitsOffsets: CpuBuffer;
  rowBytes: number;
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

export class CpuLane implements Lane {
  readonly index: number;
  readonly stream: Stream = { kind: 'stream' };
  #rank: number;
  #world: number;
  #timeoutMs: number;
  #pads: PadViews[];
  #onTimeout: (err: Error) => void;
  #arrive: number;
  #done: number;
  #header: [number, number];
  #splits: [number, number];
  #seq = 0;
  /** Split matrix of the current call, S[p·W + r] = rows p sends r (scratch, reused). */
  #S: Float64Array;
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
    this.#header = [layout.headerF64(index, 0), layout.headerF64(index, 1)];
    this.#splits = [layout.splitsWord(index, 0), layout.splitsWord(index, 1)];
    this.#S = new Float64Array(this.#world * this.#world);
  }

  /** Runs one call to completion; its handle reports exactly this call's outcome. */
  allToAllV(a: CpuCallArgs): Handle {
    const err = this.#run(a);
    return {
      wait: () => {
        if (err !== undefined) throw err;
      },
      waitOn: () => {},
    };
  }

  /** The call's error (refused, or a peer timed out), else undefined. */
  #run(a: CpuCallArgs): Error | undefined {
    const W = this.#world;
    const me = this.#rank;
    const pads = this.#pads;
    const seq = (this.#seq + 1) | 0;
    this.#seq = seq;
    const slot = seq & 1;
    const hdr = this.#header[slot];
    const spl = this.#splits[slot];
    this.#deadline = NaN;

    // Publish: the splits as they are in the buffer now, and what the peers must agree on.
    const mine = pads[me];
    const rowBytes = a.rowBytes;
    mine.f64[hdr + SlotField.inRows] = Math.floor(a.input.bytes / rowBytes);
    mine.f64[hdr + SlotField.outRows] = Math.floor(a.output.bytes / rowBytes);
    mine.f64[hdr + SlotField.rowBytes] = rowBytes;
    mine.f64[hdr + SlotField.outId] = a.output.symmetricId;
    const sp = a.inSplits.i32;
    const mi = mine.i32;
    for (let i = 0; i < 2 * W; i++) mi[spl + i] = sp[i];
    Atomics.store(mi, this.#arrive, seq);
    mine.wake(this.#arrive);

    for (let p = 0; p < W; p++) {
      if (p !== me && !this.#waitFor(pads[p], this.#arrive, seq)) return this.#timedOut(p, seq);
    }

    const S = this.#S;
    for (let p = 0; p < W; p++) {
      const pi = pads[p].i32;
      for (let r = 0; r < W; r++) S[p * W + r] = pi[spl + 2 * r + 1] * TWO32 + (pi[spl + 2 * r] >>> 0);
    }
    const refused = this.#invalid(hdr, spl);
    if (refused !== undefined) return refused;

    // Push this rank's rows: those for peer r are contiguous in the input, in peer order, and land
    // after the rows of lower source ranks in r's output.
    const src = a.input.u8;
    let srcRow = 0;
    for (let r = 0; r < W; r++) {
      const rows = S[me * W + r];
      if (rows > 0) {
        let dstRow = 0;
        for (let q = 0; q < me; q++) dstRow += S[q * W + r];
        copyBytes(a.output.peer(r), dstRow * rowBytes, src, srcRow * rowBytes, rows * rowBytes);
      }
      srcRow += rows;
    }
    const o = a.outSplitsOffsets.i32;
    let offset = 0;
    for (let q = 0; q < W; q++) {
      const rows = S[q * W + me];
      o[2 * q] = rows >>> 0;
      o[2 * q + 1] = Math.floor(rows / TWO32);
      o[2 * (W + q)] = offset >>> 0;
      o[2 * (W + q) + 1] = Math.floor(offset / TWO32);
      offset += rows;
    }

    const done = this.#done;
    for (let r = 0; r < W; r++) {
      if (r === me) continue;
      Atomics.store(pads[r].i32, done + me, seq);
      pads[r].wake(done + me);
    }
    for (let p = 0; p < W; p++) {
      if (p !== me && !this.#waitFor(mine, done + p, seq)) return this.#timedOut(p, seq);
    }
    return undefined;
  }

  /**
   * Checks the split matrix in the kernel's order and returns the first problem as an error. Every
   * rank sees the same matrix, so every rank refuses the call with the same error.
   */
  #invalid(hdr: number, spl: number): Error | undefined {
    const W = this.#world;
    const S = this.#S;
    const pads = this.#pads;
    const f0 = pads[0].f64;
    for (let p = 0; p < W; p++) {
      const fp = pads[p].f64;
      const rb = hdr + SlotField.rowBytes;
      if (fp[rb] !== f0[rb]) return this.#fail(StatusCode.mismatch, p, 0, BigInt(fp[rb]), BigInt(f0[rb]));
      const id = hdr + SlotField.outId;
      if (fp[id] !== f0[id]) return this.#fail(StatusCode.mismatch, p, 0, BigInt(fp[id]), BigInt(f0[id]));
    }
    for (let p = 0; p < W; p++) {
      for (let r = 0; r < W; r++) {
        if (S[p * W + r] < 0) return this.#fail(StatusCode.negative, p, r, this.#exact(spl, p, r), 0n);
      }
    }
    for (let p = 0; p < W; p++) {
      const cap = pads[p].f64[hdr + SlotField.inRows];
      let sum = 0;
      for (let r = 0; r < W; r++) {
        sum += S[p * W + r];
        if (sum > cap) return this.#fail(StatusCode.inputOverflow, p, r, this.#exactSum(spl, p, -1), BigInt(cap));
      }
    }
    for (let r = 0; r < W; r++) {
      const cap = pads[r].f64[hdr + SlotField.outRows];
      let sum = 0;
      for (let p = 0; p < W; p++) {
        sum += S[p * W + r];
        if (sum > cap) return this.#fail(StatusCode.outputOverflow, r, p, this.#exactSum(spl, -1, r), BigInt(cap));
      }
    }
    return undefined;
  }

  #fail(code: StatusCode, rank: number, peer: number, needed: bigint, available: bigint): Error {
    return entryError({ code, rank, peer, needed, available, reportedBy: this.#rank }, this.#timeoutMs);
  }

  /** S[p][r] as published, exactly (the float copy in #S rounds past 2^53). */
  #exact(spl: number, p: number, r: number): bigint {
    return this.#pads[p].i64[(spl >> 1) + r];
  }

  /** Row sum (col < 0) or column sum (row < 0) of the published matrix, saturated at INT64_MAX as on the device. */
  #exactSum(spl: number, row: number, col: number): bigint {
    const xs: bigint[] = [];
    for (let k = 0; k < this.#world; k++) xs.push(row >= 0 ? this.#exact(spl, row, k) : this.#exact(spl, k, col));
    return saturatingSum(xs);
  }

  /** Waits until word idx of `pad` >= seq (in wrapping int32 order); false when the call's deadline passed. */
  #waitFor(pad: PadViews, idx: number, seq: number): boolean {
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
        return false;
      }
      pad.wait(idx, v, Math.min(left, MAX_SLEEP_MS));
      v = Atomics.load(arr, idx);
    }
    return true;
  }

  #timedOut(peer: number, seq: number): Error {
    const entry: StatusEntry = {
      code: StatusCode.timeout,
      rank: this.#rank,
      peer,
      needed: BigInt(seq),
      available: BigInt(this.#lastSeen),
      reportedBy: this.#rank,
    };
    const err = entryError(entry, this.#timeoutMs);
    this.#onTimeout(err);
    return err;
  }
}
