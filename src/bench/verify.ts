// Checks one all-to-all-v result before it is timed, so a wrong kernel cannot print a fast number.
// `arm()` poisons what the call must overwrite (outSplitsOffsets, a few sampled rows from every source,
// with the complement of their expected bytes) and plants a canary past the last received row;
// `verify()` then reads them back.
import type { Comm, DeviceBuffer } from '../backends/backend.js';
import { A2avError } from '../errors.js';
import type { InputPattern } from './data.js';
import { mulberry32, type Splits } from './splits.js';
import { formatBytes } from './units.js';

/** The benchmark's own check of a collective's result failed. */
export class WrongResultError extends A2avError {
  constructor(readonly rank: number, readonly form: string, readonly bytesPerRank: number, detail: string) {
    super('A2AV_BENCH_WRONG_RESULT', `rank ${rank}: ${form} all-to-all-v gave a wrong result at ${formatBytes(bytesPerRank)} per rank: ${detail}`);
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
  readonly #comm: Comm;
  readonly #buffers: CheckedBuffers;
  readonly #bytesPerRank: number;
  readonly #expectedSplitsOffsets: BigInt64Array;
  readonly #samples: Sample[] = [];
  readonly #canaryOffset: number;
  readonly #canary: Uint8Array;

  /** `patterns[r]` is rank r's input pattern; `seed` picks the sampled rows. */
  constructor(comm: Comm, buffers: CheckedBuffers, splits: Splits, rowBytes: number, patterns: readonly InputPattern[], seed: number) {
    this.#comm = comm;
    this.#buffers = buffers;
    this.#bytesPerRank = splits.rowsPerRank * rowBytes;
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

  /** Call once the checked call has completed on this rank; throws WrongResultError. */
  verify(form: string): void {
    const { output, outSplitsOffsets } = this.#buffers;
    const w = this.#comm.worldSize;
    const fail = (detail: string): never => {
      throw new WrongResultError(this.#comm.rank, form, this.#bytesPerRank, detail);
    };
    const raw = this.#comm.read(outSplitsOffsets, 0, 16 * w).slice();
    const got = new BigInt64Array(raw.buffer);
    for (let i = 0; i < 2 * w; i++) {
      if (got[i] !== this.#expectedSplitsOffsets[i]) {
        fail(`outSplitsOffsets[${i < w ? 0 : 1}][${i % w}] is ${got[i]}, expected ${this.#expectedSplitsOffsets[i]}`);
      }
    }
    for (const s of this.#samples) {
      const bytes = this.#comm.read(output, s.outOffset, s.expected.length);
      const at = bytes.findIndex((b, i) => b !== s.expected[i]);
      if (at >= 0) fail(`row ${s.row} from rank ${s.src} differs at byte ${at} (${hex(bytes[at])}, expected ${hex(s.expected[at])})`);
    }
    if (this.#canary.length > 0) {
      const after = this.#comm.read(output, this.#canaryOffset, this.#canary.length);
      const at = after.findIndex((b) => b !== CANARY);
      if (at >= 0) fail(`wrote past the last received row (byte ${this.#canaryOffset + at} of the output)`);
    }
  }
}

function hex(b: number): string {
  return `0x${b.toString(16).padStart(2, '0')}`;
}
