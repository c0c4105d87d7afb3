// What the examples share: their command line and how they end, the rows they send, and the check
// of what arrives. Every row is four int32s, [source rank, destination rank, row index, step], so a
// row that lands in the wrong place, or a stale one from an earlier step, is plain to see.
import { parseArgs } from 'node:util';
import { recordExitError, UsageError, type BackendName, type Comm, type DeviceBuffer } from 'a2av';

export const ROW_BYTES = 16;
/** At most this many rows go from one rank to another in a step. */
export const MAX_ROWS_PER_PEER = 3;

export interface ExampleArgs {
  /** Undefined: the library picks (cuda where a GPU is visible, else cpu). */
  backend?: BackendName;
  ranks: number;
}

/**
 * `--backend cpu|cuda|nccl` (default: the library's choice), `--ranks N` (default 4). `launched`:
 * the launcher starts the ranks, so `--ranks` would be ignored, and is refused.
 */
export function exampleArgs(argv = process.argv.slice(2), launched = false): ExampleArgs {
  const values = parse(argv);
  if (launched && argv.some((a) => a === '--ranks' || a.startsWith('--ranks='))) {
    throw new UsageError('--ranks is the launcher\'s here: a2av launch -n N (or torchrun --nproc-per-node N) starts the ranks');
  }
  const backend = values.backend;
  if (backend !== undefined && backend !== 'cpu' && backend !== 'cuda' && backend !== 'nccl') {
    throw new UsageError(`--backend must be cpu, cuda or nccl, got '${backend}'`);
  }
  const ranks = Number(values.ranks);
  if (!Number.isInteger(ranks) || ranks < 1) throw new UsageError(`--ranks must be a positive integer, got '${values.ranks}'`);
  return { backend, ranks };
}

/** parseArgs, with its refusals as UsageError. */
function parse(argv: string[]) {
  try {
    return parseArgs({ args: argv, options: { backend: { type: 'string' }, ranks: { type: 'string', default: '4' } } }).values;
  } catch (err) {
    // An unknown option or a stray argument, named by parseArgs.
    throw new UsageError(`${(err as Error).message}; the options are --backend cpu|cuda|nccl and --ranks N`);
  }
}

/**
 * Runs an example with its command line. Any error ends it as the a2av command ends: one line, the
 * error's name and its message's first line (a library-not-found error lists every path it tried
 * after it), and exit status 1. An a2av error that wraps another already repeats its message.
 */
export async function main(example: (args: ExampleArgs) => Promise<void>, opts: { launched?: boolean } = {}): Promise<void> {
  try {
    await example(exampleArgs(process.argv.slice(2), opts.launched));
  } catch (err) {
    const e = err instanceof Error ? err : new Error(String(err));
    process.stderr.write(`${e.name}: ${e.message.split('\n')[0]}\n`);
    process.exitCode = 1;
    // Under a launcher, why this rank failed, for the launcher's report: init() records only uncaught errors.
    recordExitError(err);
  }
}

/** Rows rank `src` sends to each peer in `step`: 0 to MAX_ROWS_PER_PEER, some zero, new every step. */
export function splitsOf(src: number, world: number, step: number): number[] {
  return Array.from({ length: world }, (_, dst) => (src * 3 + dst * 5 + step) % (MAX_ROWS_PER_PEER + 1));
}

/** Rank `src`'s input for `step`: splits[dst] rows for each peer, in peer order, contiguous. */
export function inputRows(src: number, world: number, step: number): Int32Array {
  const rows: number[] = [];
  splitsOf(src, world, step).forEach((count, dst) => {
    for (let i = 0; i < count; i++) rows.push(src, dst, i, step);
  });
  return Int32Array.from(rows);
}

/** Thrown when what arrived is not what the senders sent; the example then exits non-zero. */
export class MismatchError extends Error {
  override name = 'MismatchError';
}

/**
 * Checks rank `me`'s result of `step`: `splitsOffsets` (int64[2][W], read back from the device)
 * holds the rows from each source and where they start, and `output` the rows grouped by source.
 * Returns what arrived from each source.
 */
export function checkReceived(me: number, world: number, step: number, splitsOffsets: BigInt64Array, output: Int32Array): number[] {
  const fail = (what: string): never => {
    throw new MismatchError(`rank ${me}, step ${step}: ${what}`);
  };
  const received: number[] = [];
  let start = 0;
  for (let src = 0; src < world; src++) {
    const expected = splitsOf(src, world, step)[me];
    const [count, offset] = [Number(splitsOffsets[src]), Number(splitsOffsets[world + src])];
    if (count !== expected) fail(`${count} rows from rank ${src}, expected ${expected}`);
    if (offset !== start) fail(`rows from rank ${src} start at ${offset}, expected ${start}`);
    for (let i = 0; i < count; i++) {
      const row = Array.from(output.subarray((start + i) * 4, (start + i + 1) * 4));
      if (row.join() !== [src, me, i, step].join()) fail(`row ${start + i} is [${row}], expected [${[src, me, i, step]}]`);
    }
    received.push(count);
    start += count;
  }
  return received;
}

/** Typed views of bytes read back with comm.read (copied, so any byte offset is fine). */
export const int64s = (bytes: Uint8Array): BigInt64Array => new BigInt64Array(bytes.slice().buffer);
export const int32s = (bytes: Uint8Array): Int32Array => new Int32Array(bytes.slice().buffer);

/** Reads a finished call's result back, as exchange.ts does: the counts, then the rows they cover. */
export function readResult(comm: Comm, output: DeviceBuffer, outSplitsOffsets: DeviceBuffer): { splitsOffsets: BigInt64Array; rows: Int32Array } {
  const W = comm.worldSize;
  const splitsOffsets = int64s(comm.read(outSplitsOffsets, 0, 16 * W));
  const count = Number(splitsOffsets.subarray(0, W).reduce((a, b) => a + b, 0n));
  return { splitsOffsets, rows: int32s(comm.read(output, 0, count * ROW_BYTES)) };
}
