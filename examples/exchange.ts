// The rank program of threads.ts and launch.ts: every rank runs it (SPMD), with its communicator.
// Each step writes this rank's rows and splits, exchanges them, reads back what arrived and checks it.
import type { Comm } from 'a2av';
import { checkReceived, inputRows, int32s, int64s, MAX_ROWS_PER_PEER, ROW_BYTES, splitsOf } from './common.js';

export async function exchange(comm: Comm, arg: { steps: number }): Promise<string> {
  const W = comm.worldSize;
  const me = comm.rank;
  const input = comm.alloc(W * MAX_ROWS_PER_PEER * ROW_BYTES); // any buffer of this rank
  const output = await comm.allocSymmetric(W * MAX_ROWS_PER_PEER * ROW_BYTES); // collective: peers write into it
  const inSplits = comm.alloc(8 * W); // int64[W]: rows to each peer
  const outSplitsOffsets = comm.alloc(16 * W); // int64[2][W]: rows from each source, where they start

  let last = '';
  for (let step = 0; step < arg.steps; step++) {
    // In: in a model a router kernel writes these on the device; here the host writes them.
    const splits = splitsOf(me, W, step);
    comm.write(input, inputRows(me, W, step));
    comm.write(inSplits, BigInt64Array.from(splits, BigInt));

    const done = comm.allToAllV({ input, output, inSplits, outSplitsOffsets, rowBytes: ROW_BYTES });
    done.wait(); // the host waits; done.waitOn(stream) would order a stream after it instead

    // Out: the counts first, then exactly the rows that arrived.
    const splitsOffsets = int64s(comm.read(outSplitsOffsets, 0, 16 * W));
    const rows = splitsOffsets.subarray(0, W).reduce((a, b) => a + b, 0n);
    const received = checkReceived(me, W, step, splitsOffsets, int32s(comm.read(output, 0, Number(rows) * ROW_BYTES)));
    last = `sent [${splits}] rows, received [${received}] at offsets [${splitsOffsets.subarray(W)}]`;
  }
  return `rank ${me} (${comm.backend}): ${arg.steps} steps checked; the last ${last}`;
}
