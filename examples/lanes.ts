// Two lanes: two independent exchanges in flight at once, as in a pipelined training step where the
// next batch's input exchange need not wait for this batch's. Each lane has its own stream, signal
// pad and counters, so neither call waits for the other; calls on one lane run in issue order.
//   node dist/examples/lanes.js [--backend cpu|cuda|nccl] [--ranks 4]
import { isMainThread } from 'node:worker_threads';
import { runRanks, type Comm, type Lane } from 'a2av';
import { checkReceived, inputRows, main, MAX_ROWS_PER_PEER, readResult, ROW_BYTES, splitsOf } from './common.js';

/** One exchange's buffers; each lane needs its own, since both calls are in flight together. */
async function buffers(comm: Comm) {
  const W = comm.worldSize;
  return {
    input: comm.alloc(W * MAX_ROWS_PER_PEER * ROW_BYTES),
    output: await comm.allocSymmetric(W * MAX_ROWS_PER_PEER * ROW_BYTES),
    inSplits: comm.alloc(8 * W),
    outSplitsOffsets: comm.alloc(16 * W),
  };
}
type Buffers = Awaited<ReturnType<typeof buffers>>;

export async function lanes(comm: Comm, arg: { rounds: number }): Promise<string> {
  const W = comm.worldSize;
  const me = comm.rank;
  const channels: { lane: Lane; bufs: Buffers }[] = [
    { lane: comm.lane(0), bufs: await buffers(comm) },
    { lane: comm.lane(1), bufs: await buffers(comm) },
  ];

  for (let round = 0; round < arg.rounds; round++) {
    // Different routing on each lane: steps 2·round and 2·round + 1.
    const handles = channels.map(({ lane, bufs }, i) => {
      const step = 2 * round + i;
      comm.write(bufs.input, inputRows(me, W, step));
      comm.write(bufs.inSplits, BigInt64Array.from(splitsOf(me, W, step), BigInt));
      return comm.allToAllV({ ...bufs, rowBytes: ROW_BYTES, lane, stream: lane.stream });
    });
    // Both are queued before either is waited for; waited in reverse, since the order does not matter.
    for (const i of [1, 0]) {
      handles[i].wait();
      const { splitsOffsets, rows } = readResult(comm, channels[i].bufs.output, channels[i].bufs.outSplitsOffsets);
      checkReceived(me, W, 2 * round + i, splitsOffsets, rows);
    }
  }
  return `rank ${me} (${comm.backend}): ${arg.rounds} rounds of two exchanges on lanes 0 and 1 at once, checked`;
}

// The worker threads import this module for `lanes`; only the main thread starts them.
if (isMainThread) {
  await main(async ({ backend, ranks }) => {
    const lines = await runRanks<{ rounds: number }, string>({ backend, ranks, lanes: 2 }, import.meta.url, 'lanes', { rounds: 3 });
    for (const line of lines) console.log(line);
  });
}
