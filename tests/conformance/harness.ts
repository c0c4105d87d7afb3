// One rank's buffers for an allToAllV and the checks around a call, built only from comm.write /
// comm.read so the same code drives every backend.
import type { Comm, DeviceBuffer, Handle, Lane } from '../../src/backends/backend.js';
import { expectedOutput, expectedSplitsOffsets, inputKey, patternBytes, poisonBytes, ROW_SIZES, rowSum } from './reference.js';

/** Bytes past the largest receive, so every call has canary bytes to check. */
export const CANARY_BYTES = 61;

/** Buffer sizes that fit any call of makeSplits with `budget` and any row size of ROW_SIZES. */
export function sizesFor(world: number, budget: number): { inputBytes: number; outputBytes: number } {
  const perPeer = Math.max(budget, ROW_SIZES[ROW_SIZES.length - 1]);
  return { inputBytes: world * perPeer, outputBytes: world * perPeer + CANARY_BYTES };
}

export const maxRowsFor = (budget: number, rowBytes: number): number => Math.max(1, Math.floor(budget / rowBytes));

export interface ExchangeSizes {
  inputBytes: number;
  outputBytes: number;
}

/** Thrown by a rank when its output differs from the host reference. */
export class ConformanceError extends Error {
  override name = 'ConformanceError';
}

export class Exchange {
  readonly comm: Comm;
  readonly input: DeviceBuffer;
  readonly output: DeviceBuffer;
  readonly inSplits: DeviceBuffer;
  readonly outSplitsOffsets: DeviceBuffer;
  /** Salt of the poison now in the outputs. */
  #salt = 0;

  private constructor(comm: Comm, input: DeviceBuffer, output: DeviceBuffer) {
    this.comm = comm;
    this.input = input;
    this.output = output;
    this.inSplits = comm.alloc(8 * comm.worldSize);
    this.outSplitsOffsets = comm.alloc(16 * comm.worldSize);
  }

  /** Collective (allocates the symmetric output). */
  static async create(comm: Comm, sizes: ExchangeSizes, output?: DeviceBuffer): Promise<Exchange> {
    const out = output ?? (await comm.allocSymmetric(sizes.outputBytes));
    return new Exchange(comm, comm.alloc(sizes.inputBytes), out);
  }

  /** Writes this rank's input rows and splits for `call`, and poisons both outputs. */
  prepare(seed: number, call: number, S: number[][], rowBytes: number): void {
    const me = this.comm.rank;
    // Capped at the input: the error cases ask for more rows than it holds.
    const bytes = Math.max(0, Math.min(rowSum(S, me) * rowBytes, this.input.bytes));
    this.comm.write(this.input, patternBytes(inputKey(seed, call, me), 0, bytes));
    this.writeSplits(S[me]);
    this.poison(call);
  }

  writeSplits(row: number[]): void {
    this.comm.write(this.inSplits, BigInt64Array.from(row, (n) => BigInt(n)));
  }

  poison(salt: number): void {
    this.#salt = salt & 0xff;
    this.comm.write(this.output, poisonBytes(this.#salt, this.output.bytes));
    this.comm.write(this.outSplitsOffsets, poisonBytes(this.#salt ^ 0x3c, this.outSplitsOffsets.bytes));
  }

  call(rowBytes: number, lane?: Lane): Handle {
    return this.comm.allToAllV({
      input: this.input,
      output: this.output,
      inSplits: this.inSplits,
      outSplitsOffsets: this.outSplitsOffsets,
      rowBytes,
      lane,
      stream: lane?.stream,
    });
  }

  /** Checks the received rows, the canary bytes past them, and outSplitsOffsets. Call after wait(). */
  verify(seed: number, call: number, S: number[][], rowBytes: number, label: string): void {
    const me = this.comm.rank;
    const got = this.comm.read(this.output, 0, this.output.bytes);
    const want = expectedOutput(seed, call, S, me, rowBytes);
    const poison = poisonBytes(this.#salt, this.output.bytes);
    for (let i = 0; i < got.length; i++) {
      const expected = i < want.length ? want[i] : poison[i];
      if (got[i] !== expected) {
        const where = i < want.length ? `received row ${Math.floor(i / rowBytes)}` : `canary ${i - want.length} past the ${want.length} received bytes`;
        throw new ConformanceError(`${label}: rank ${me} output byte ${i} (${where}) is ${got[i]}, expected ${expected}; splits ${JSON.stringify(S)}`);
      }
    }
    const offs = this.#readSplitsOffsets();
    const wantOffs = expectedSplitsOffsets(S, me);
    for (let i = 0; i < wantOffs.length; i++) {
      if (offs[i] !== wantOffs[i]) {
        throw new ConformanceError(`${label}: rank ${me} outSplitsOffsets = [${offs.join(', ')}], expected [${wantOffs.join(', ')}]`);
      }
    }
  }

  /** Checks that neither output was written since the last poison (a refused call). */
  verifyUntouched(label: string): void {
    const me = this.comm.rank;
    const checks: [string, DeviceBuffer, number][] = [
      ['output', this.output, this.#salt],
      ['outSplitsOffsets', this.outSplitsOffsets, this.#salt ^ 0x3c],
    ];
    for (const [name, buf, salt] of checks) {
      const got = this.comm.read(buf, 0, buf.bytes);
      const poison = poisonBytes(salt, buf.bytes);
      const i = got.findIndex((b, k) => b !== poison[k]);
      if (i >= 0) throw new ConformanceError(`${label}: rank ${me} ${name} byte ${i} was written by a refused call`);
    }
  }

  #readSplitsOffsets(): bigint[] {
    const bytes = this.comm.read(this.outSplitsOffsets, 0, 16 * this.comm.worldSize);
    return Array.from(new BigInt64Array(bytes.buffer, bytes.byteOffset, 2 * this.comm.worldSize));
  }
}
