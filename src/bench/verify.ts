// Checks one all-to-all-v result before it is timed, so a wrong kernel cannot print a fast number.
// `arm()` poisons what the call must overwrite (outSplitsOffsets, a few sampled rows from every source,
// with the complement of their expected bytes) and plants a canary past the last received row;
// `verify()` then reads them back and names the first wrong byte it finds.
import type { Comm, DeviceBuffer } from '../backends/backend.js';
import { A2avError } from '../errors.js';
import type { InputPattern } from './data.js';
import { mulberry32, type Splits } from './splits.js';
import { formatBytes } from './units.js';

/** Where a check found its first wrong byte. */
export interface WrongByte {
  buffer: 'outSplitsOffsets' | 'output';
  /** Byte offset in that buffer. */
  offset: number;
  /** What is wrong there, in words: the row and source, or the entry, and the values. */
  detail: string;
}

/**
 * The benchmark's own check of a collective's result failed: on rank `rank`, the `form` call
 * (eager, graph) at `bytesPerRank` per rank; `wrong` is the first wrong byte found, or absent on a
 * rank that only learned that `rank` found one (that rank's error names it).
 */
export class WrongResultError extends A2avError {
  readonly rank: number;
  readonly form: string;
  readonly bytesPerRank: number;
  readonly wrong?: WrongByte;

  constructor(fields: { rank: number; form: string; bytesPerRank: number; wrong?: WrongByte; reportedBy?: number }) {
    const { rank, form, bytesPerRank, wrong, reportedBy } = fields;
    const where = wrong
      ? `${wrong.buffer} byte ${wrong.offset}: ${wrong.detail}`
      : `found by rank ${rank}${reportedBy === undefined ? '' : `, reported to rank ${reportedBy}`} (its error names the first wrong byte)`;
    super('A2AV_BENCH_WRONG_RESULT', `rank ${rank}: ${form} all-to-all-v gave a wrong result at ${formatBytes(bytesPerRank)} per rank: ${where}`);
    this.rank = rank;
    this.form = form;
    this.bytesPerRank = bytesPerRank;
    if (wrong) this.wrong = wrong;
  }
}

const SAMPLES_PER_SOURCE = 4;
export const CANARY_BYTES = 64;
const CANARY = 0xa5;

interface Sample {
  src: number;
  /** Row index within the rows received from `src`. */
  row: number;
  outOffset: number;
  expected: Uint8Array;
}

export interface CheckedBuffers {
  output: DeviceBuffer;
  outSplitsOffsets: DeviceBuffer;
}

export class ResultCheck {
  /** Input bytes per rank of the checked call. */
  readonly bytesPerRank: number;
  readonly #comm: Comm;
  readonly #buffers: CheckedBuffers;
  readonly #expectedSplitsOffsets: BigInt64Array;
  readonly #samples: Sample[] = [];
  readonly #canaryOffset: number;
  readonly #canary: Uint8Array;

  /** `patterns[r]` is rank r's input pattern; `seed` picks the sampled rows. */
  constructor(comm: Comm, buffers: CheckedBuffers, splits: Splits, rowBytes: number, patterns: readonly InputPattern[], seed: number) {
    this.#comm = comm;
    this.#buffers = buffers;
    this.bytesPerRank = splits.rowsPerRank * rowBytes;
    const w = comm.worldSize;
    const me = comm.rank;
    const random = mulberry32(seed ^ Math.imul(me + 1, 0x27d4eb2f));
    this.#expectedSplitsOffsets = new BigInt64Array(2 * w);
    let received = 0;
    for (let src = 0; src < w; src++) {
      const n = splits.rows[src][me];
      this.#expectedSplitsOffsets[src] = BigInt(n);
      this.#expectedSplitsOffsets[w + src] = BigInt(received);
      // Where src's rows for me start in src's input: after its rows for ranks 0..me-1.
      let inputRow = 0;
      for (let dst = 0; dst < me; dst++) inputRow += splits.rows[src][dst];
      const picks = new Set<number>();
      if (n > 0) picks.add(0).add(n - 1);
      while (picks.size < Math.min(n, SAMPLES_PER_SOURCE)) picks.add(Math.floor(random() * n));
      for (const row of picks) {
        const expected = patterns[src].bytes((inputRow + row) * rowBytes, rowBytes);
        this.#samples.push({ src, row, outOffset: (received + row) * rowBytes, expected });
      }
      received += n;
    }
    // In output order, so the first mismatch found is the first wrong byte among the samples.
    this.#samples.sort((a, b) => a.outOffset - b.outOffset);
    this.#canaryOffset = received * rowBytes;
    this.#canary = new Uint8Array(Math.max(0, Math.min(CANARY_BYTES, buffers.output.bytes - this.#canaryOffset))).fill(CANARY);
  }

  /** Call after every peer has finished writing into this rank's output, before the checked call. */
  arm(): void {
    const { output, outSplitsOffsets } = this.#buffers;
    this.#comm.write(outSplitsOffsets, new BigInt64Array(this.#expectedSplitsOffsets.length).fill(-1n));
    for (const s of this.#samples) this.#comm.write(output, s.expected.map((b) => ~b & 0xff), s.outOffset);
    if (this.#canary.length > 0) this.#comm.write(output, this.#canary, this.#canaryOffset);
  }

  /** Call once the checked call has completed on this rank; throws WrongResultError naming the first wrong byte. */
  verify(form: string): void {
    const { output, outSplitsOffsets } = this.#buffers;
    const w = this.#comm.worldSize;
    const fail = (wrong: WrongByte): never => {
      throw new WrongResultError({ rank: this.#comm.rank, form, bytesPerRank: this.bytesPerRank, wrong });
    };
    const raw = this.#comm.read(outSplitsOffsets, 0, 16 * w).slice();
    const got = new BigInt64Array(raw.buffer);
    for (let i = 0; i < 2 * w; i++) {
      if (got[i] !== this.#expectedSplitsOffsets[i]) {
        const expected = new Uint8Array(this.#expectedSplitsOffsets.buffer, 8 * i, 8);
        const at = raw.subarray(8 * i, 8 * i + 8).findIndex((b, k) => b !== expected[k]);
        fail({ buffer: 'outSplitsOffsets', offset: 8 * i + at, detail: `outSplitsOffsets[${i < w ? 0 : 1}][${i % w}] is ${got[i]}, expected ${this.#expectedSplitsOffsets[i]}` });
      }
    }
    for (const s of this.#samples) {
      const bytes = this.#comm.read(output, s.outOffset, s.expected.length);
      const at = bytes.findIndex((b, i) => b !== s.expected[i]);
      if (at >= 0) {
        fail({ buffer: 'output', offset: s.outOffset + at, detail: `row ${s.row} from rank ${s.src}, byte ${at} of the row, is ${hex(bytes[at])}, expected ${hex(s.expected[at])}` });
      }
    }
    if (this.#canary.length > 0) {
      const after = this.#comm.read(output, this.#canaryOffset, this.#canary.length);
      const at = after.findIndex((b) => b !== CANARY);
      if (at >= 0) fail({ buffer: 'output', offset: this.#canaryOffset + at, detail: `written past the last received row (${hex(after[at])} over the canary ${hex(CANARY)})` });
    }
  }
}

function hex(b: number): string {
  return `0x${b.toString(16).padStart(2, '0')}`;
}
