// The operations the sweep can time, and what each needs per size: its buffers, its call, the check
// of its result, the 1-D allToAllV of the same bytes beside it, and the directions the reference copies.
//   alltoallv  the 1-D call: input -> mid.
//   dispatch   allToAllV2d: input -> mid, expert-major, each expert's block aligned.
//   combine    allToAllV2dOffset: mid -> back, fed by one dispatch's outSplitsOffsets (run untimed,
//              checked, before the combines are), giving every rank its dispatch input back.
//   roundtrip  dispatch then combine, per call.
// The 1-D comparison moves the same rows between the same ranks: "there" with the dispatch's rows
// per peer (input -> mid), "back" with the transposed matrix (mid -> back), a round trip both.
import type { AllToAllV2dArgs, AllToAllV2dOffsetArgs, AllToAllVArgs, Comm, DeviceBuffer, Handle } from '../backends/backend.js';
import type { InputPattern } from './data.js';
import { expectCombine, expectDispatch, maxDispatchRows } from './moe-layout.js';
import type { Splits } from './splits.js';
import { allOf, CANARY_BYTES, ResultCheck, type Check } from './verify.js';

export const BENCH_OPS = ['alltoallv', 'dispatch', 'combine', 'roundtrip'] as const;
export type BenchOp = (typeof BENCH_OPS)[number];

/** What a sweep times: the op, and for the MoE ops their experts per rank and block alignment. */
export interface OpShape {
  op: BenchOp;
  /** E (1 for alltoallv). */
  experts: number;
  /** majorAlign of the dispatch (1 for alltoallv). */
  align: number;
  rowBytes: number;
  /** Every call's SM budget (maxBlocks; the 1-D comparison's too), when the sweep has one. */
  maxBlocks?: number;
}

/** Bytes of one rank's payload buffers for a sweep whose largest size is last in `plans`. */
export interface OpBytes {
  inputBytes: number;
  /** The first direction's output (symmetric): rows received, or the dispatch's aligned layout; a canary past it. */
  midBytes: number;
  /** combine, roundtrip: the rows given back (symmetric), a canary past them; 0 otherwise. */
  backBytes: number;
}

export function opBytes(shape: OpShape, plans: readonly Splits[]): OpBytes {
  const largest = plans[plans.length - 1];
  const inputBytes = largest.rowsPerRank * shape.rowBytes;
  // Room for the canary past the fullest receiver's rows, so every rank's check has one. A
  // dispatch's aligned layout holds at least the rows received, so the 1-D call fits it too.
  const midRows = Math.max(...plans.map((p) => (shape.op === 'alltoallv' ? p.maxRowsReceived : maxDispatchRows(p, shape.align))));
  return { inputBytes, midBytes: midRows * shape.rowBytes + CANARY_BYTES, backBytes: hasBack(shape.op) ? inputBytes + CANARY_BYTES : 0 };
}

const hasBack = (op: BenchOp): boolean => op === 'combine' || op === 'roundtrip';

/** One direction the reference copies: a split matrix and the buffers its rows go between. */
export interface Direction {
  splits: Splits;
  input: DeviceBuffer;
  output: DeviceBuffer;
}

/** One size of the sweep, its splits written. */
export interface SizeOp {
  /** combine: the dispatch that produces its input, run once and checked before the op. */
  setup?: { check: Check; run(): void };
  /** One call of the op; a round trip's handle waits for both of its calls. */
  call(): Handle;
  check: Check;
  /** MoE ops: the 1-D calls of the same bytes, in the op's directions. */
  oneD?: () => void;
  /** What the reference copies: the op's directions. */
  directions: Direction[];
}

/** int64 splits and offsets, named for the buffers they describe. */
type SplitsBuffers = Record<'in' | 'midSo' | 'backSo' | 'in1d' | 'mid1dSo' | 'inBack1d' | 'back1dSo', DeviceBuffer>;

/** The sweep's buffers for one op, allocated once for its largest size, and each size's calls on them. */
export class OpBench {
  readonly input: DeviceBuffer;
  readonly mid: DeviceBuffer;
  readonly #comm: Comm;
  readonly #shape: OpShape;
  readonly #back?: DeviceBuffer;
  readonly #splits: SplitsBuffers;

  private constructor(comm: Comm, shape: OpShape, payload: { input: DeviceBuffer; mid: DeviceBuffer; back?: DeviceBuffer }, splits: SplitsBuffers) {
    this.#comm = comm;
    this.#shape = shape;
    this.input = payload.input;
    this.mid = payload.mid;
    this.#back = payload.back;
    this.#splits = splits;
  }

  /** Collective (symmetric allocations). `keep` records every buffer for the caller to free. */
  static async create(comm: Comm, shape: OpShape, bytes: OpBytes, keep: (buf: DeviceBuffer) => DeviceBuffer): Promise<OpBench> {
    const n = comm.worldSize * shape.experts;
    const w = comm.worldSize;
    const input = keep(comm.alloc(bytes.inputBytes));
    const mid = keep(await comm.allocSymmetric(bytes.midBytes));
    const back = bytes.backBytes > 0 ? keep(await comm.allocSymmetric(bytes.backBytes)) : undefined;
    const words = (count: number) => keep(comm.alloc(8 * count));
    // The 1-D comparison has its own splits, so the MoE op's outSplitsOffsets (a combine's input) stay as they are.
    const splits: SplitsBuffers = {
      in: words(n), midSo: words(2 * n), backSo: words(2 * n), in1d: words(w), mid1dSo: words(2 * w), inBack1d: words(w), back1dSo: words(2 * w),
    };
    return new OpBench(comm, shape, { input, mid, back }, splits);
  }

  /** Writes this size's splits; `patterns` and `seed` give the checks' expected rows. */
  size(splits: Splits, patterns: readonly InputPattern[], seed: number): SizeOp {
    const comm = this.#comm;
    const { op, experts, align, rowBytes } = this.#shape;
    const me = comm.rank;
    const s = this.#splits;
    const bytesPerRank = splits.rowsPerRank * rowBytes;
    const common = { rowBytes, lane: comm.lane(0), sizeHintBytes: bytesPerRank, ...(this.#shape.maxBlocks === undefined ? {} : { maxBlocks: this.#shape.maxBlocks }) };
    const there: Direction = { splits, input: this.input, output: this.mid };
    comm.write(s.in, BigInt64Array.from(splits.chunks[me], BigInt));
    if (op === 'alltoallv') {
      const args: AllToAllVArgs = { ...common, input: this.input, output: this.mid, inSplits: s.in, outSplitsOffsets: s.midSo };
      const check = ResultCheck.allToAllV(comm, { output: this.mid, outSplitsOffsets: s.midSo }, splits, rowBytes, patterns, seed);
      return { call: () => comm.allToAllV(args), check, directions: [there] };
    }
    const back = this.#back;
    const backSplits = transposed(splits);
    const moe = { expertsPerRank: experts, ...common };
    const dispatchArgs: AllToAllV2dArgs = { ...moe, input: this.input, output: this.mid, inSplits: s.in, outSplitsOffsets: s.midSo, majorAlign: align };
    const dispatch = () => comm.allToAllV2d(dispatchArgs);
    const dispatchCheck = new ResultCheck(comm, { output: this.mid, outSplitsOffsets: s.midSo },
      expectDispatch(splits, me, align, rowBytes, patterns, seed), { op: 'dispatch', bytesPerRank });
    // The 1-D calls of the same rows: there (input -> mid), back (mid -> back, the transposed matrix).
    comm.write(s.in1d, BigInt64Array.from(splits.rows[me], BigInt));
    const oneDThere: AllToAllVArgs = { ...common, input: this.input, output: this.mid, inSplits: s.in1d, outSplitsOffsets: s.mid1dSo };
    if (op === 'dispatch') {
      return { call: dispatch, check: dispatchCheck, oneD: () => void comm.allToAllV(oneDThere), directions: [there] };
    }
    comm.write(s.inBack1d, BigInt64Array.from(backSplits.rows[me], BigInt));
    const oneDBack: AllToAllVArgs = { ...common, input: this.mid, output: back!, inSplits: s.inBack1d, outSplitsOffsets: s.back1dSo };
    const combineArgs: AllToAllV2dOffsetArgs = { ...moe, input: this.mid, output: back!, inSplitsOffsets: s.midSo, outSplitsOffsets: s.backSo };
    const combine = () => comm.allToAllV2dOffset(combineArgs);
    const combineCheck = new ResultCheck(comm, { output: back!, outSplitsOffsets: s.backSo },
      expectCombine(splits, me, rowBytes, patterns, seed), { op: 'combine', bytesPerRank });
    const backDirection: Direction = { splits: backSplits, input: this.mid, output: back! };
    if (op === 'combine') {
      return {
        setup: { check: dispatchCheck, run: () => dispatch().wait() },
        call: combine,
        check: combineCheck,
        oneD: () => void comm.allToAllV(oneDBack),
        directions: [backDirection],
      };
    }
    return {
      call: () => both(dispatch(), combine()),
      check: allOf('roundtrip', [dispatchCheck, combineCheck]),
      oneD: () => {
        comm.allToAllV(oneDThere);
        comm.allToAllV(oneDBack);
      },
      directions: [there, backDirection],
    };
  }
}

/** The way back: rows[src][dst] of the result = rows dst sent src. Each rank gets its rowsPerRank rows back. */
export function transposed(splits: Splits): Splits {
  const w = splits.rows.length;
  const rows = Array.from({ length: w }, (_, src) => Array.from({ length: w }, (_, dst) => splits.rows[dst][src]));
  // rowsPerRank is the mean a rank sends back (exact with uniform splits): the copy reference
  // only uses the total over a device's ranks, which it gets right.
  return { rows, rowsPerRank: splits.rowsPerRank, maxRowsReceived: splits.rowsPerRank, experts: 1, chunks: rows };
}

/** Two calls on one lane as one: waits for both (each handle reports its own call's error). */
function both(first: Handle, second: Handle): Handle {
  return {
    wait: () => {
      first.wait();
      second.wait();
    },
    // One lane runs its calls in issue order: the second's point is after the first.
    waitOn: (stream) => second.waitOn(stream),
  };
}
