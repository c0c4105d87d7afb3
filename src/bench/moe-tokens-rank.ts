// The rank program of a2av bench --op moe-dispatch|moe-combine as threads (runRanks loads it in each rank's worker).
import type { Comm } from '../backends/backend.js';
import type { RankContext } from '../world/ranks.js';
import { moeTokenSweep, type MoeTokenArg, type MoeTokenRow } from './moe-tokens.js';

export async function moeTokenRank(comm: Comm, arg: MoeTokenArg, ctx: RankContext): Promise<{ rows: MoeTokenRow[]; device: string }> {
  return { rows: await moeTokenSweep(comm, arg, ctx), device: comm.deviceName };
}
