// allReduce on one cpu lane. Ranks may be processes, and an input from alloc() is memory only its
// own rank maps, so each rank stages its input through its pad's scratch (pad.ts), one chunk per
// round (CpuLane.round): copy the chunk in, arrive, sum every rank's scratch in rank order into its
// own output (collectives/reduce.ts), done. Staging, rather than asking for a symmetric input, keeps
// the interface's "any buffer" and makes in-place free: the output is written only after every
// input chunk it covers has been staged. It costs one copy per element, which the cpu reference can
// afford; the pad's fixed scratch also means no collective allocation per call size.
import type { Buffer } from 'node:buffer';
import type { ReduceDtype } from '../backend.js';
import { ELEMENT_BYTES, orderedSum } from '../../collectives/reduce.js';
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

  /** Runs the call to completion: its error (a peer timed out), else undefined. */
  run(call: CpuAllReduceCall): Error | undefined {
    const size = ELEMENT_BYTES[call.dtype];
    const chunk = Math.floor(SCRATCH_BYTES / size);
    const what = `allReduce of ${call.count} ${call.dtype} on lane ${this.#lane.index}`;
    const mine = this.#scratch[this.#rank];
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
}
