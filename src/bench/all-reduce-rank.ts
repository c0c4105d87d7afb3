// The rank program of a2av bench allreduce as threads (runRanks loads it in each rank's worker).
import type { Comm } from '../backends/backend.js';
import type { RankContext } from '../world/ranks.js';
import { allReduceSweep, type AllReduceBenchArg, type AllReduceRow } from './all-reduce.js';

export async function allReduceRank(comm: Comm, arg: AllReduceBenchArg, ctx: RankContext): Promise<{ rows: AllReduceRow[]; device: string }> {
  return { rows: await allReduceSweep(comm, arg, ctx), device: comm.deviceName };
}
