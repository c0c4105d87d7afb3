// allReduce on one cpu lane. Ranks may be processes, and an input from alloc() is memory only its
// own rank maps, so each rank stages its input through its pad's scratch (pad.ts), one chunk per
// round (CpuLane.round): copy the chunk in, arrive, sum every rank's scratch in rank order into its
// own output (collectives/reduce.ts), done. Staging, rather than asking for a symmetric input, keeps
// the interface's "any buffer" and makes in-place free: the output is written only after every
// input chunk it covers has been staged. It costs one copy per element, which the cpu reference can
// afford; the pad's fixed scratch also means no collective allocation per call size.
// First, one round compares every rank's call (count, dtype, op, output) with rank 0's, as the cuda
// kernels do: a rank that differs fails the call on every rank with the same SplitsError, nothing
// written. That round also publishes an allReduce's record (CpuLane.round's `first`), so that a rank in
// an all-to-all call beside it is refused the same way, as a mismatch of kind. The output is compared only where both are symmetric (on cpu any buffer will do).
import type { Buffer } from 'node:buffer';
import type { ReduceDtype } from '../backend.js';
import { DTYPE_CODE, ELEMENT_BYTES, OP_CODE, orderedSum } from '../../collectives/reduce.js';
import { SplitsError, type MismatchField } from '../../errors.js';
import type { CpuBuffer } from './buffer.js';
import type { CpuLane } from './lane.js';
import { copyBytes } from './memcpy.js';
import { SCRATCH_BYTES, type PadLayout, type PadViews } from './pad.js';

export interface CpuAllReduceCall {
  input: CpuBuffer;
  output: CpuBuffer;
  count: number;
  dtype: ReduceDtype;
}

/** One lane's allReduce: every rank's scratch of that lane, and the bf16 accumulator (reused). */
export class CpuReducer {
  readonly #lane: CpuLane;
  readonly #rank: number;
  /** Every rank's scratch on this lane, by rank. */
  readonly #scratch: Buffer[];
  #accumulator: Float32Array | undefined;

  constructor(lane: CpuLane, rank: number, layout: PadLayout, pads: PadViews[]) {
    this.#lane = lane;
    this.#rank = rank;
    const at = layout.scratchByte(lane.index);
    this.#scratch = pads.map((pad) => pad.u8.subarray(at, at + SCRATCH_BYTES));
  }

  /** Runs the call to completion: its error (a peer timed out, or the ranks' calls differ), else undefined. */
  run(call: CpuAllReduceCall): Error | undefined {
    const size = ELEMENT_BYTES[call.dtype];
    const chunk = Math.floor(SCRATCH_BYTES / size);
    const what = `allReduce of ${call.count} ${call.dtype} on lane ${this.#lane.index}`;
    const mine = this.#scratch[this.#rank];
    const refused = this.#compareCalls(call, what);
    if (refused !== undefined) return refused;
    const out = call.output.u8;
    // A zero count still meets the peers once, so every rank's lane stays in step and a missing
    // rank is still named.
    for (let first = 0; first < call.count || first === 0; first += chunk) {
      const n = Math.min(chunk, call.count - first);
      const bytes = n * size;
      const at = first * size;
      const err = this.#lane.round(
        what,
        () => copyBytes(mine, 0, call.input.u8, at, bytes),
        () => {
          if (n === 0) return;
          if (call.dtype === 'bf16') this.#accumulator ??= new Float32Array(chunk);
          orderedSum({ dtype: call.dtype, sources: this.#scratch, output: out.subarray(at, at + bytes), count: n, accumulator: this.#accumulator });
        },
      );
      if (err !== undefined) return err;
      if (n === 0) break;
    }
    return undefined;
  }

  /** The header round: a timeout, a SplitsError naming the first rank whose call differs, or undefined. */
  #compareCalls(call: CpuAllReduceCall, what: string): Error | undefined {
    const mine = this.#scratch[this.#rank];
    const header = BigInt64Array.of(BigInt(call.count), BigInt(DTYPE_CODE[call.dtype]), BigInt(OP_CODE.sum), BigInt(call.output.symmetricId));
    const all: BigInt64Array[] = [];
    const err = this.#lane.round(
      `${what}: the ranks' calls compared`,
      () => mine.set(new Uint8Array(header.buffer), 0),
      () => {
        for (const s of this.#scratch) all.push(new BigInt64Array(Uint8Array.from(s.subarray(0, HEADER_BYTES)).buffer));
      },
      true,
    );
    if (err !== undefined) return err;
    for (let q = 1; q < all.length; q++) {
      for (let j = 0; j < HEADER_WORDS; j++) {
        const a = all[q]![j]!, b = all[0]![j]!;
        // The output counts only where both ranks gave a symmetric one (id >= 0).
        if (a === b || (j === OUTPUT_WORD && (a < 0n || b < 0n))) continue;
        return new SplitsError({ problem: 'mismatch', rank: q, peer: 0, needed: a, available: b, reportedBy: this.#rank, op: 'allReduce', field: HEADER_FIELDS[j] });
      }
    }
    return undefined;
  }
}

/** The header's words, as the cuda kernels send theirs: count, dtype, op (DTYPE_CODE, OP_CODE), output id. */
const HEADER_WORDS = 4;
const HEADER_BYTES = 8 * HEADER_WORDS;
const OUTPUT_WORD = 3;
/** What each word is named by in a mismatch. */
const HEADER_FIELDS = ['count', 'dtype', 'op', 'output'] as const satisfies readonly MismatchField[];
