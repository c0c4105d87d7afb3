// A call given the caller's stream runs after the work queued on it, even where the call's kernel
// is launched early (programmatic dependent launch) on its lane after a kernel of the lane's own.
// Whether the driver keeps an event wait between them as a full dependency decides it: here the
// caller's stream is kept busy by a long copy, then the call's input and splits are copied in on it.
import type { Comm } from '../../src/backends/backend.js';
import { Exchange, maxRowsFor, sizesFor } from './harness.js';
import { makeSplits, Rng } from './reference.js';

export interface CallerStreamArg {
  seed: number;
  calls: number;
  /** Bytes per (sender, receiver) pair at most: small, so the call is launched early on cuda. */
  budget: number;
}

export async function callerStream(comm: Comm, arg: CallerStreamArg): Promise<number> {
  const W = comm.worldSize;
  const rowBytes = 64;
  const sizes = sizesFor(W, arg.budget);
  const ex = await Exchange.create(comm, sizes);
  // Where the next call's input and splits are written first (its output is never read).
  const staged = await Exchange.create(comm, sizes);
  // A previous kernel on lane 0 (a call of no rows), so that the call has one to be launched early after.
  const before = await Exchange.create(comm, sizesFor(W, rowBytes));
  before.writeSplits(new Array<number>(W).fill(0));
  // The copy that holds the caller's stream for a while (hundreds of µs on a GPU; cpu copies at once).
  const slow = comm.backend === 'cpu' ? 4096 : 1 << 30;
  const from = comm.alloc(slow);
  const to = comm.alloc(slow);
  const caller = comm.lane(1).stream;
  const rows = maxRowsFor(arg.budget, rowBytes);
  for (let call = 0; call < arg.calls; call++) {
    // The call's buffers hold the previous call's rows and splits, valid ones: read too early, they
    // give a well-formed exchange of the wrong rows.
    const old = makeSplits(new Rng(arg.seed, 2 * call), W, 'random', rows);
    ex.prepare(arg.seed, 1000 + call, old, rowBytes);
    const next = makeSplits(new Rng(arg.seed, 2 * call + 1), W, 'random', rows);
    staged.prepare(arg.seed, call, next, rowBytes);
    before.call(rowBytes);
    comm.copy(to, from, slow, caller);
    comm.copy(ex.input, staged.input, staged.input.bytes, caller);
    comm.copy(ex.inSplits, staged.inSplits, 8 * W, caller);
    comm.allToAllV({ input: ex.input, output: ex.output, inSplits: ex.inSplits, outSplitsOffsets: ex.outSplitsOffsets, rowBytes, stream: caller }).wait();
    ex.verify(arg.seed, call, next, rowBytes, `call ${call}: input and splits copied in on the caller's stream behind a ${slow}-byte copy`);
    await comm.barrier();
  }
  for (const b of [from, to]) comm.free(b);
  return arg.calls;
}
