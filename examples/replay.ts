// Graph replay with new splits: capture one allToAllV, then for every step write new rows and
// splits into the same buffers and launch the capture again. The splits are read on the device when
// the replay runs, so one capture serves every routing. On cuda the capture is a CUDA graph; on cpu
// a replay calls the captured function again; nccl cannot capture (it needs the splits on the host).
//   node dist/examples/replay.js [--backend cpu|cuda] [--ranks 4]
import { isMainThread } from 'node:worker_threads';
import { runRanks, type Comm } from 'a2av';
import { checkReceived, inputRows, main, MAX_ROWS_PER_PEER, readResult, ROW_BYTES, splitsOf } from './common.js';

export async function replay(comm: Comm, arg: { steps: number }): Promise<string> {
  const W = comm.worldSize;
  const me = comm.rank;
  const input = comm.alloc(W * MAX_ROWS_PER_PEER * ROW_BYTES);
  const output = await comm.allocSymmetric(W * MAX_ROWS_PER_PEER * ROW_BYTES);
  const inSplits = comm.alloc(8 * W);
  const outSplitsOffsets = comm.alloc(16 * W);
  const lane = comm.lane(0);

  // Nothing runs yet: the call is recorded, with its buffers (not their contents).
  const graph = comm.capture(lane.stream, () => {
    comm.allToAllV({ input, output, inSplits, outSplitsOffsets, rowBytes: ROW_BYTES, lane, stream: lane.stream });
  });
  try {
    // Every rank captures before any launches: on cuda, capturing instantiates a CUDA graph, which
    // can wait for the kernels on the GPU, and a replay launched first waits there for this rank.
    await comm.barrier();
    for (let step = 0; step < arg.steps; step++) {
      // The previous replay has been waited for, so these writes cannot overtake it.
      comm.write(input, inputRows(me, W, step));
      comm.write(inSplits, BigInt64Array.from(splitsOf(me, W, step), BigInt));
      graph.launch().wait(); // throws the replayed call's error, if it was refused
      const { splitsOffsets, rows } = readResult(comm, output, outSplitsOffsets);
      checkReceived(me, W, step, splitsOffsets, rows);
    }
  } finally {
    graph.close();
  }
  return `rank ${me} (${comm.backend}): ${arg.steps} replays of one capture, each with new splits, checked`;
}

// The worker threads import this module for `replay`; only the main thread starts them.
if (isMainThread) {
  await main(async ({ backend, ranks }) => {
    const lines = await runRanks<{ steps: number }, string>({ backend, ranks }, import.meta.url, 'replay', { steps: 4 });
    for (const line of lines) console.log(line);
  });
}
