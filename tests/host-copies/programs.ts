// Rank programs for tests/host-copies.test.ts: a rank's reads and writes of device memory while a
// peer's kernel, already running on the same GPU, waits for this rank's next call.
import { randomBytes } from 'node:crypto';
import type { Comm } from '../../src/backends/backend.js';

export interface Outcome {
  input: Uint8Array;
  output: Uint8Array;
  /** Rank 0: whether each write-and-read-back of `copyBytes` matched, and how long the three took (ms). */
  roundTrips: boolean[];
  copiesMs: number;
}

/**
 * Rank 1 queues an allToAllV and meets rank 0 at a host barrier: its kernel now spins until rank 0
 * calls. Rank 0 then writes fresh random bytes to a buffer and reads them back, three times, before
 * its own call: copies that queued behind the spinning kernel would hold rank 0 until rank 1's
 * call timed out.
 */
export async function copiesBesideAWaitingPeer(comm: Comm, arg: { rows: number; copyBytes: number }): Promise<Outcome> {
  const W = comm.worldSize;
  const rowBytes = 16;
  const chunk = arg.rows * rowBytes;
  const input = new Uint8Array(randomBytes(W * chunk));
  const inBuf = comm.alloc(W * chunk);
  const outBuf = await comm.allocSymmetric(W * chunk + 64);
  const inSplits = comm.alloc(8 * W);
  const outSplitsOffsets = comm.alloc(16 * W);
  comm.write(inBuf, input);
  comm.write(outBuf, new Uint8Array(W * chunk + 64).fill(0xa5));
  comm.write(inSplits, new BigInt64Array(W).fill(BigInt(arg.rows)));
  comm.write(outSplitsOffsets, BigInt64Array.from({ length: 2 * W }, (_, i) => (i < W ? BigInt(arg.rows) : BigInt((i - W) * arg.rows))));
  const scratch = comm.alloc(arg.copyBytes);
  await comm.barrier();
  const call = () => comm.allToAllV({ input: inBuf, output: outBuf, inSplits, outSplitsOffsets, rowBytes });
  const roundTrips: boolean[] = [];
  let copiesMs = 0;
  let handle;
  if (comm.rank !== 0) {
    handle = call();
    await comm.barrier();
  } else {
    await comm.barrier();
    const start = performance.now();
    for (let i = 0; i < 3; i++) {
      const bytes = new Uint8Array(randomBytes(arg.copyBytes));
      comm.write(scratch, bytes);
      roundTrips.push(Buffer.from(comm.read(scratch, 0, arg.copyBytes)).equals(Buffer.from(bytes)));
    }
    copiesMs = performance.now() - start;
    handle = call();
  }
  handle.wait();
  return { input, output: comm.read(outBuf, 0, W * chunk + 64), roundTrips, copiesMs };
}
