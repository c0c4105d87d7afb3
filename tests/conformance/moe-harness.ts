// One rank's buffers for a MoE round trip (dispatch input -> `mid` -> combine -> `back`) and the
// checks around the calls, built only from comm.write / comm.read so the same code drives every
// backend. Every output and offsets buffer is poisoned before a call and checked whole: rows where
// the reference puts them, padding rows and everything past the end untouched.
import type { Comm, DeviceBuffer, Handle, Lane } from '../../src/backends/backend.js';
import { ConformanceError } from './harness.js';
import { combineOffsets, dispatchOffsets, expectedDispatch, moeInput, type MoeSplits } from './moe-reference.js';
import { poisonBytes } from './reference.js';

/** Bytes past the largest output, and past the offsets of the largest E, left for canaries. */
export const MOE_CANARY_BYTES = 37;

export interface MoeSizes {
  /** Largest E of the calls. */
  experts: number;
  /** Bytes of the input (and of combine's output, before its canary) and of dispatch's output. */
  inputBytes: number;
  outputBytes: number;
  /** Canary bytes after both outputs (default true); without, capacities are exactly the sizes' rows. */
  canary?: boolean;
}

/** Which buffers a refused call must leave as they were. */
const SALTS = { mid: 0x00, back: 0x11, midOffsets: 0x3c, backOffsets: 0x5a } as const;
export type Poisoned = keyof typeof SALTS;
const POISONED = Object.keys(SALTS) as Poisoned[];

export class Moe {
  readonly comm: Comm;
  readonly input: DeviceBuffer;
  readonly mid: DeviceBuffer;
  readonly back: DeviceBuffer;
  readonly inSplits: DeviceBuffer;
  readonly midOffsets: DeviceBuffer;
  readonly backOffsets: DeviceBuffer;
  /** The salt of the poison now in each buffer. */
  #salts: Record<Poisoned, number> = { mid: 0, back: 0, midOffsets: 0, backOffsets: 0 };

  private constructor(comm: Comm, own: Pick<Moe, 'input' | 'inSplits' | 'midOffsets' | 'backOffsets'>, mid: DeviceBuffer, back: DeviceBuffer) {
    this.comm = comm;
    this.mid = mid;
    this.back = back;
    this.input = own.input;
    this.inSplits = own.inSplits;
    this.midOffsets = own.midOffsets;
    this.backOffsets = own.backOffsets;
  }

  /**
   * Collective (allocates the symmetric outputs). This rank's own buffers come first: once the
   * last collective allocation returns, a faster peer may already spin in its first call, and
   * allocating device memory then can wait for that kernel (README: between phases).
   */
  static async create(comm: Comm, s: MoeSizes): Promise<Moe> {
    const n = comm.worldSize * s.experts;
    const own = {
      input: comm.alloc(s.inputBytes),
      inSplits: comm.alloc(8 * n),
      midOffsets: comm.alloc(16 * n + MOE_CANARY_BYTES),
      backOffsets: comm.alloc(16 * n + MOE_CANARY_BYTES),
    };
    const extra = s.canary === false ? 0 : MOE_CANARY_BYTES;
    const mid = await comm.allocSymmetric(s.outputBytes + extra);
    const back = await comm.allocSymmetric(s.inputBytes + extra);
    return new Moe(comm, own, mid, back);
  }

  /** Writes this rank's input rows (stream `key(rank)`) and splits, and poisons every output. */
  prepare(key: (q: number) => number, C: MoeSplits, rowBytes: number, salt: number): void {
    const me = this.comm.rank;
    this.comm.write(this.input, moeInput(key(me), C, me, rowBytes));
    this.writeSplits(C.row(me));
    this.poison(salt);
  }

  /** inSplits: int64[W·E], rank-major (peer·E + e). */
  writeSplits(row: readonly (number | bigint)[]): void {
    this.comm.write(this.inSplits, BigInt64Array.from(row, (n) => BigInt(n)));
  }

  /** Poisons `names` (default every output and offsets buffer). */
  poison(salt: number, names: readonly Poisoned[] = POISONED): void {
    for (const name of names) {
      this.#salts[name] = (salt ^ SALTS[name]) & 0xff;
      this.comm.write(this[name], this.poisonOf(name));
    }
  }

  /** What `name` holds while nothing has written it since it was poisoned. */
  poisonOf(name: Poisoned): Uint8Array {
    return poisonBytes(this.#salts[name], this[name].bytes);
  }

  dispatch(a: { experts: number; rowBytes: number; align?: number; lane?: Lane; output?: DeviceBuffer; maxBlocks?: number }): Handle {
    return this.comm.allToAllV2d({
      maxBlocks: a.maxBlocks,
      input: this.input,
      output: a.output ?? this.mid,
      inSplits: this.inSplits,
      outSplitsOffsets: this.midOffsets,
      expertsPerRank: a.experts,
      rowBytes: a.rowBytes,
      majorAlign: a.align,
      lane: a.lane,
      stream: a.lane?.stream,
    });
  }

  /** Combine of what dispatch left in `mid`, with dispatch's outSplitsOffsets as they are. */
  combine(a: { experts: number; rowBytes: number; lane?: Lane; output?: DeviceBuffer; maxBlocks?: number }): Handle {
    return this.comm.allToAllV2dOffset({
      maxBlocks: a.maxBlocks,
      input: this.mid,
      output: a.output ?? this.back,
      inSplitsOffsets: this.midOffsets,
      outSplitsOffsets: this.backOffsets,
      expertsPerRank: a.experts,
      rowBytes: a.rowBytes,
      lane: a.lane,
      stream: a.lane?.stream,
    });
  }

  /** `mid` and its offsets after a dispatch; `back` and its offsets untouched. Call after wait(). */
  verifyDispatch(key: (q: number) => number, C: MoeSplits, align: number, rowBytes: number, label: string): void {
    const me = this.comm.rank;
    const want = expectedDispatch(key, C, me, align, rowBytes, this.poisonOf('mid'));
    this.compare('mid', want, label, rowBytes);
    this.verifyOffsets('midOffsets', dispatchOffsets(C, me, align), label);
  }

  /** `back` holds this rank's input again, and its offsets the packed layout. Call after wait(). */
  verifyCombine(key: (q: number) => number, C: MoeSplits, rowBytes: number, label: string): void {
    const me = this.comm.rank;
    const want = this.poisonOf('back');
    want.set(moeInput(key(me), C, me, rowBytes));
    this.compare('back', want, label, rowBytes);
    this.verifyOffsets('backOffsets', combineOffsets(C, me), label);
  }

  /** Checks that none of `names` was written since the last poison (a refused call). */
  verifyUntouched(label: string, names: readonly Poisoned[] = POISONED): void {
    for (const name of names) this.compare(name, this.poisonOf(name), `${label} (a refused call wrote it)`, 1);
  }

  /** `name` holds exactly `want`. */
  compare(name: Poisoned, want: Uint8Array, label: string, rowBytes: number): void {
    const got = this.comm.read(this[name], 0, this[name].bytes);
    const i = got.findIndex((b, k) => b !== want[k]);
    if (i >= 0) {
      throw new ConformanceError(`${label}: rank ${this.comm.rank} ${name} byte ${i} (row ${Math.floor(i / rowBytes)}) is ${got[i]}, expected ${want[i]}`);
    }
  }

  /** `name` holds `words`, then its poison. */
  verifyOffsets(name: 'midOffsets' | 'backOffsets', words: bigint[], label: string): void {
    const want = this.poisonOf(name);
    want.set(new Uint8Array(BigInt64Array.from(words).buffer));
    const got = this.comm.read(this[name], 0, this[name].bytes);
    const i = got.findIndex((b, k) => b !== want[k]);
    if (i >= 0) {
      const n = words.length;
      const shown = new BigInt64Array(got.buffer, 0, Math.min(n, Math.floor(got.length / 8)));
      throw new ConformanceError(`${label}: rank ${this.comm.rank} ${name} byte ${i} differs: got [${shown.join(', ')}], expected [${words.join(', ')}]`);
    }
  }
}
