// Rank programs for what only the nccl backend does: refuse graph capture (a replay would move the
// captured call's sizes, whatever the split buffers hold by then), and keep working after it.
import type { Comm } from '../../src/backends/backend.js';
import { expectUsageError } from './expect.js';
import { Exchange, maxRowsFor, sizesFor } from './harness.js';
import { makeSplits, Rng } from './reference.js';

export async function captureRefused(comm: Comm, arg: { seed: number }): Promise<number> {
  const W = comm.worldSize;
  const ex = await Exchange.create(comm, sizesFor(W, 4096));
  let ran = false;
  expectUsageError(() => comm.capture(comm.lane(0).stream, () => void (ran = true)), 'capture() on nccl');
  if (ran) throw new Error('capture() ran the function it refused to capture');
  const rowBytes = 13;
  const S = makeSplits(new Rng(arg.seed, 6000), W, 'random', maxRowsFor(4096, rowBytes));
  ex.prepare(arg.seed, 6000, S, rowBytes);
  ex.call(rowBytes).wait();
  ex.verify(arg.seed, 6000, S, rowBytes, 'call after a refused capture');
  return 1;
}
