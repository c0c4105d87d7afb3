// Checks one call's result before it is timed, so a wrong kernel cannot print a fast number.
// `arm()` poisons what the call must overwrite (outSplitsOffsets, a few sampled rows from every source,
// with the complement of their expected bytes) and plants a canary past the last received row;
// `verify()` then reads them back and names the first wrong byte it finds. What the call must
// leave is an Expectation: the 1-D call's here, the MoE ops' in moe-layout.ts.
import type { Comm, DeviceBuffer } from '../backends/backend.js';
import { A2avError } from '../errors.js';
import type { InputPattern } from './data.js';
import { mulberry32, type Splits } from './splits.js';
import { formatBytes } from './units.js';

/** Where a check found its first wrong byte. */
export interface WrongByte {
  buffer: 'outSplitsOffsets' | 'output' | 'expertCounts' | 'expertOffsets' | 'recvX' | 'numRecvRows' | 'out';
  /** Byte offset in that buffer. */
  offset: number;
  /** What is wrong there, in words: the row and source, or the entry, and the values. */
  detail: string;
}

/**
 * The benchmark's own check of a collective's result failed: on rank `rank`, the `form` call
 * (eager, graph) of `op` (all-to-all-v, dispatch, combine) at `bytesPerRank` per rank; `wrong` is the
 * first wrong byte found, or absent on a rank that only learned that `rank` found one (that rank's
 * error names it).
 */
export class WrongResultError extends A2avError {
  readonly rank: number;
  readonly form: string;
  readonly op: string;
  readonly bytesPerRank: number;
  readonly wrong?: WrongByte;

  constructor(fields: { rank: number; form: string; op?: string; bytesPerRank: number; wrong?: WrongByte; reportedBy?: number }) {
    const { rank, form, op = ALL_TO_ALL_V, bytesPerRank, wrong, reportedBy } = fields;
    const where = wrong
      ? `${wrong.buffer} byte ${wrong.offset}: ${wrong.detail}`
      : `found by rank ${rank}${reportedBy === undefined ? '' : `, reported to rank ${reportedBy}`} (its error names the first wrong byte)`;
    super('A2AV_BENCH_WRONG_RESULT', `rank ${rank}: ${form} ${op} gave a wrong result at ${formatBytes(bytesPerRank)} per rank: ${where}`);
    this.rank = rank;
    this.form = form;
    this.op = op;
    this.bytesPerRank = bytesPerRank;
    if (wrong) this.wrong = wrong;
  }
}

/** The 1-D call's name in messages. */
export const ALL_TO_ALL_V = 'all-to-all-v';

const SAMPLES_PER_SOURCE = 4;
export const CANARY_BYTES = 64;
const CANARY = 0xa5;

/** One sampled row: where it lands in the output, the bytes it must hold, and its name in a message. */
export interface ExpectedRow {
  outOffset: number;
  expected: Uint8Array;
  /** `row 3 from rank 1`: what a message calls it. */
  name: string;
}

/** What a checked call must leave in this rank's buffers. */
export interface Expectation {
  /** All of outSplitsOffsets, int64[2][n]: counts, then offsets. */
  splitsOffsets: BigInt64Array;
  /** Sampled rows, in output order (so the first mismatch found is the first wrong byte among them). */
  samples: ExpectedRow[];
  /** Byte offset past the last byte the call may write in the output: the canary goes there. */
  end: number;
}

export interface CheckedBuffers {
  output: DeviceBuffer;
  outSplitsOffsets: DeviceBuffer;
}

/** What the sweep checks a call with: one ResultCheck, or several for a call that writes several outputs. */
export interface Check {
  /** The op named in a WrongResultError. */
  readonly op: string;
  /** Input bytes per rank of the checked call. */
  readonly bytesPerRank: number;
  arm(): void;
  verify(form: string): void;
}

/** What rank `me` receives from an all-to-all-v of `splits`: a few rows from every source, its first and last among them. */
export function expectAllToAllV(me: number, splits: Splits, rowBytes: number, patterns: readonly InputPattern[], seed: number): Expectation {
  const w = splits.rows.length;
  const random = mulberry32(seed ^ Math.imul(me + 1, 0x27d4eb2f));
  const splitsOffsets = new BigInt64Array(2 * w);
  const samples: ExpectedRow[] = [];
  let received = 0;
  for (let src = 0; src < w; src++) {
    const n = splits.rows[src][me];
    splitsOffsets[src] = BigInt(n);
    splitsOffsets[w + src] = BigInt(received);
    // Where src's rows for me start in src's input: after its rows for ranks 0..me-1.
    let inputRow = 0;
    for (let dst = 0; dst < me; dst++) inputRow += splits.rows[src][dst];
    const picks = new Set<number>();
    if (n > 0) picks.add(0).add(n - 1);
    while (picks.size < Math.min(n, SAMPLES_PER_SOURCE)) picks.add(Math.floor(random() * n));
    for (const row of picks) {
      const expected = patterns[src].bytes((inputRow + row) * rowBytes, rowBytes);
      samples.push({ outOffset: (received + row) * rowBytes, expected, name: `row ${row} from rank ${src}` });
    }
    received += n;
  }
  samples.sort((a, b) => a.outOffset - b.outOffset);
  return { splitsOffsets, samples, end: received * rowBytes };
}

export class ResultCheck implements Check {
  readonly op: string;
  readonly bytesPerRank: number;
  readonly #comm: Comm;
  readonly #buffers: CheckedBuffers;
  readonly #expected: Expectation;
  readonly #canary: Uint8Array;

  /** The 1-D call's check: `patterns[r]` is rank r's input pattern; `seed` picks the sampled rows. */
  static allToAllV(comm: Comm, buffers: CheckedBuffers, splits: Splits, rowBytes: number, patterns: readonly InputPattern[], seed: number): ResultCheck {
    const expected = expectAllToAllV(comm.rank, splits, rowBytes, patterns, seed);
    return new ResultCheck(comm, buffers, expected, { op: ALL_TO_ALL_V, bytesPerRank: splits.rowsPerRank * rowBytes });
  }

  constructor(comm: Comm, buffers: CheckedBuffers, expected: Expectation, what: { op: string; bytesPerRank: number }) {
    this.#comm = comm;
    this.#buffers = buffers;
    this.#expected = expected;
    this.op = what.op;
    this.bytesPerRank = what.bytesPerRank;
    this.#canary = new Uint8Array(Math.max(0, Math.min(CANARY_BYTES, buffers.output.bytes - expected.end))).fill(CANARY);
  }

  /** Call after every peer has finished writing into this rank's output, before the checked call. */
  arm(): void {
    const { output, outSplitsOffsets } = this.#buffers;
    this.#comm.write(outSplitsOffsets, new BigInt64Array(this.#expected.splitsOffsets.length).fill(-1n));
    for (const s of this.#expected.samples) this.#comm.write(output, s.expected.map((b) => ~b & 0xff), s.outOffset);
    if (this.#canary.length > 0) this.#comm.write(output, this.#canary, this.#expected.end);
  }

  /** Call once the checked call has completed on this rank; throws WrongResultError naming the first wrong byte. */
  verify(form: string): void {
    const { output, outSplitsOffsets } = this.#buffers;
    const { splitsOffsets: want, samples, end } = this.#expected;
    const fail = (wrong: WrongByte): never => {
      throw new WrongResultError({ rank: this.#comm.rank, form, op: this.op, bytesPerRank: this.bytesPerRank, wrong });
    };
    const n = want.length / 2;
    const raw = this.#comm.read(outSplitsOffsets, 0, 8 * want.length).slice();
    const got = new BigInt64Array(raw.buffer);
    for (let i = 0; i < want.length; i++) {
      if (got[i] !== want[i]) {
        const expected = new Uint8Array(want.buffer, 8 * i, 8);
        const at = raw.subarray(8 * i, 8 * i + 8).findIndex((b, k) => b !== expected[k]);
        fail({ buffer: 'outSplitsOffsets', offset: 8 * i + at, detail: `outSplitsOffsets[${i < n ? 0 : 1}][${i % n}] is ${got[i]}, expected ${want[i]}` });
      }
    }
    for (const s of samples) {
      const bytes = this.#comm.read(output, s.outOffset, s.expected.length);
      const at = bytes.findIndex((b, i) => b !== s.expected[i]);
      if (at >= 0) {
        fail({ buffer: 'output', offset: s.outOffset + at, detail: `${s.name}, byte ${at} of the row, is ${hex(bytes[at])}, expected ${hex(s.expected[at])}` });
      }
    }
    if (this.#canary.length > 0) {
      const after = this.#comm.read(output, end, this.#canary.length);
      const at = after.findIndex((b) => b !== CANARY);
      if (at >= 0) fail({ buffer: 'output', offset: end + at, detail: `written past the last received row (${hex(after[at])} over the canary ${hex(CANARY)})` });
    }
  }
}

/** Several checks as one (a round trip's dispatch and combine): armed together, verified in order. */
export function allOf(op: string, checks: readonly Check[]): Check {
  return {
    op,
    bytesPerRank: checks[0].bytesPerRank,
    arm: () => checks.forEach((c) => c.arm()),
    verify: (form) => checks.forEach((c) => c.verify(form)),
  };
}

function hex(b: number): string {
  return `0x${b.toString(16).padStart(2, '0')}`;
}
