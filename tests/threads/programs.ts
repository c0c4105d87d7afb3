// Rank programs for tests/threads.test.ts (runRanks itself, on the cpu backend).
import type { Comm } from '../../src/backends/backend.js';
import { SplitsError, TimeoutError } from '../../src/errors.js';
import type { RankContext } from '../../src/world/ranks.js';

export async function echo(comm: Comm, arg: { tag: string }, ctx: RankContext): Promise<{ rank: number; world: number; tag: string }> {
  ctx.report({ rank: comm.rank, step: 'started' });
  await comm.barrier();
  return { rank: comm.rank, world: comm.worldSize, tag: arg.tag };
}

/** Rank `arg.failing` throws a SplitsError; the others wait at a barrier that never completes. */
export async function oneFails(comm: Comm, arg: { failing: number }): Promise<void> {
  if (comm.rank === arg.failing) throw new SplitsError({ problem: 'output-overflow', rank: 2, peer: 1, needed: 12n, available: 10n, reportedBy: comm.rank });
  await comm.barrier();
}

/** Rank 1 never calls; rank 0's call times out, and after that its comm refuses more work. */
export async function abortsAfterTimeout(comm: Comm): Promise<string> {
  const W = comm.worldSize;
  const out = await comm.allocSymmetric(64);
  const args = { input: comm.alloc(64), output: out, inSplits: comm.alloc(8 * W), outSplitsOffsets: comm.alloc(16 * W), rowBytes: 8 };
  // Open, not closed, while the others wait: a closed rank is found gone at once.
  if (comm.rank === 1) return new Promise((resolve) => setTimeout(() => resolve('absent'), 2 * 300));
  const h = comm.allToAllV(args);
  try {
    h.wait();
  } catch (err) {
    try {
      comm.allToAllV(args);
    } catch (again) {
      return `${(err as Error).name} then ${(again as Error).name}`;
    }
    return `${(err as Error).name} then nothing`;
  }
  return 'no timeout';
}

/** Rank 0 throws the TimeoutError its own wait produced, so the caller sees it rebuilt. */
export async function throwsTimeout(comm: Comm): Promise<void> {
  const out = await comm.allocSymmetric(64);
  const W = comm.worldSize;
  // Rank 1 stays open past the timeout: one that had closed would be found gone at once.
  if (comm.rank === 1) return void (await new Promise((resolve) => setTimeout(resolve, 2 * 300)));
  comm.allToAllV({ input: comm.alloc(64), output: out, inSplits: comm.alloc(8 * W), outSplitsOffsets: comm.alloc(16 * W), rowBytes: 8 }).wait();
}

/** Calls timeLoop with lead-in calls; returns how often fn ran. */
export async function countsLeadIn(comm: Comm, arg: { iters: number; leadIn: number }): Promise<number> {
  let calls = 0;
  const ms = comm.timeLoop(comm.lane(0).stream, arg.iters, () => void calls++, arg.leadIn);
  if (!(ms >= 0)) throw new Error(`timeLoop returned ${ms}`);
  return calls;
}

/**
 * Rank W-1 comes to allocSymmetric and rank 0 to a barrier `lateMs` after the others, then rank 1
 * misses a collective: the others return what ended their wait in it and how long it took.
 */
export async function lateSetUp(comm: Comm, arg: { lateMs: number }): Promise<{ missingRank: number; waitedMs: number } | 'absent'> {
  const W = comm.worldSize;
  const late = () => new Promise((resolve) => setTimeout(resolve, arg.lateMs));
  if (comm.rank === W - 1) await late();
  const out = await comm.allocSymmetric(8 * W);
  if (comm.rank === 0) await late();
  await comm.barrier();
  // Open, not closed, while the others wait: a closed rank is found gone at once.
  if (comm.rank === 1) return new Promise((resolve) => setTimeout(() => resolve('absent'), arg.lateMs));
  const inSplits = comm.alloc(8 * W);
  comm.write(inSplits, new BigInt64Array(W).fill(1n));
  const started = performance.now();
  try {
    comm.allToAllV({ input: comm.alloc(8 * W), output: out, inSplits, outSplitsOffsets: comm.alloc(16 * W), rowBytes: 8 }).wait();
  } catch (err) {
    if (err instanceof TimeoutError) return { missingRank: err.missingRank, waitedMs: performance.now() - started };
    throw err;
  }
  throw new Error('the call with rank 1 absent returned');
}

/** Returns a function, which cannot be cloned back to the main thread. */
export async function returnsFunction(): Promise<() => number> {
  return () => 1;
}

/** Reports a function, which cannot be cloned to onReport. */
export async function reportsFunction(comm: Comm, _arg: unknown, ctx: RankContext): Promise<void> {
  ctx.report(() => 1);
}
