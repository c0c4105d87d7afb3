// Host-side agreement between ranks, built on the collective itself: every rank sends one row of
// float64 values to every peer (an all-gather), and may reduce what it receives. Where ranks must
// take the same decision from local facts (the bench: how many iterations to time, how much memory
// fits; a MoE group: the options that size its buffers), a mismatch would otherwise be a hang or a
// symmetric buffer of another size on some rank. Only Comm calls: every backend has it.
import type { Comm, DeviceBuffer } from '../backends/backend.js';

export class Agreement {
  readonly #comm: Comm;
  readonly #slots: number;
  readonly #input: DeviceBuffer;
  readonly #output: DeviceBuffer;
  readonly #inSplits: DeviceBuffer;
  readonly #outSplitsOffsets: DeviceBuffer;

  private constructor(comm: Comm, slots: number, buffers: DeviceBuffer[]) {
    this.#comm = comm;
    this.#slots = slots;
    [this.#input, this.#output, this.#inSplits, this.#outSplitsOffsets] = buffers;
  }

  /** Collective. `slots` is the most values one call agrees on. */
  static async create(comm: Comm, slots = 4): Promise<Agreement> {
    const w = comm.worldSize;
    const rowBytes = 8 * slots;
    const output = await comm.allocSymmetric(w * rowBytes);
    const inSplits = comm.alloc(8 * w);
    comm.write(inSplits, new BigInt64Array(w).fill(1n));
    return new Agreement(comm, slots, [comm.alloc(w * rowBytes), output, inSplits, comm.alloc(16 * w)]);
  }

  /** Collective: every rank's `values`, in rank order. */
  gather(values: readonly number[]): number[][] {
    if (values.length > this.#slots) throw new RangeError(`at most ${this.#slots} values, got ${values.length}`);
    const w = this.#comm.worldSize;
    const slots = this.#slots;
    const send = new Float64Array(w * slots);
    for (let peer = 0; peer < w; peer++) send.set(values, peer * slots);
    this.#comm.write(this.#input, send);
    this.#comm
      .allToAllV({
        input: this.#input,
        output: this.#output,
        inSplits: this.#inSplits,
        outSplitsOffsets: this.#outSplitsOffsets,
        rowBytes: 8 * slots,
      })
      .wait();
    // slice(): a fresh, 8-byte aligned copy whatever view read() returns.
    const received = new Float64Array(this.#comm.read(this.#output, 0, w * 8 * slots).slice().buffer);
    return Array.from({ length: w }, (_, peer) => Array.from(received.subarray(peer * slots, peer * slots + values.length)));
  }

  /** Collective: the element-wise maximum over ranks of `values`. */
  max(values: readonly number[]): number[] {
    const all = this.gather(values);
    return values.map((_, i) => Math.max(...all.map((v) => v[i])));
  }

  /** Collective: the element-wise minimum over ranks. */
  min(values: readonly number[]): number[] {
    return this.max(values.map((v) => -v)).map((v) => -v);
  }

  close(): void {
    for (const buf of [this.#input, this.#output, this.#inSplits, this.#outSplitsOffsets]) this.#comm.free(buf);
  }
}

/** Collective: every rank's `values` (the same count on each), in rank order, through an Agreement made for this once. */
export async function gatherOnce(comm: Comm, values: number[]): Promise<number[][]> {
  const agreement = await Agreement.create(comm, values.length);
  try {
    return agreement.gather(values);
  } finally {
    agreement.close();
  }
}

/**
 * Collective: every rank's `bytes` (each its own length), in rank order. Two rounds: the lengths
 * through an Agreement, then the bytes padded to the longest, so every buffer, symmetric ones
 * included, has the same size on every rank whatever the ranks send.
 */
export async function gatherBytes(comm: Comm, bytes: Uint8Array): Promise<Uint8Array[]> {
  const w = comm.worldSize;
  const lengths = (await gatherOnce(comm, [bytes.length])).map(([n]) => n);
  const row = Math.max(1, ...lengths);
  const send = new Uint8Array(w * row);
  for (let peer = 0; peer < w; peer++) send.set(bytes, peer * row);
  // This rank's buffers first, then the collective one (allocating while a peer spins can stall).
  const input = comm.alloc(w * row);
  const inSplits = comm.alloc(8 * w);
  const outSplitsOffsets = comm.alloc(16 * w);
  const output = await comm.allocSymmetric(w * row);
  try {
    comm.write(input, send);
    comm.write(inSplits, new BigInt64Array(w).fill(1n));
    comm.allToAllV({ input, output, inSplits, outSplitsOffsets, rowBytes: row }).wait();
    const received = comm.read(output, 0, w * row).slice();
    return lengths.map((n, peer) => received.subarray(peer * row, peer * row + n));
  } finally {
    for (const buf of [input, inSplits, outSplitsOffsets, output]) comm.free(buf);
  }
}
