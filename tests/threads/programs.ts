// Rank programs for tests/threads.test.ts (runRanks itself, on the cpu backend).
import type { Comm } from '../../src/backends/backend.js';
import { SplitsError } from '../../src/errors.js';
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
  if (comm.rank === 1) return 'absent';
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
  if (comm.rank === 1) return;
  comm.allToAllV({ input: comm.alloc(64), output: out, inSplits: comm.alloc(8 * W), outSplitsOffsets: comm.alloc(16 * W), rowBytes: 8 }).wait();
}

/** Calls timeLoop with lead-in calls; returns how often fn ran. */
export async function countsLeadIn(comm: Comm, arg: { iters: number; leadIn: number }): Promise<number> {
  let calls = 0;
  const ms = comm.timeLoop(comm.lane(0).stream, arg.iters, () => void calls++, arg.leadIn);
  if (!(ms >= 0)) throw new Error(`timeLoop returned ${ms}`);
  return calls;
}
