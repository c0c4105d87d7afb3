// `a2av bench --op moe-dispatch|moe-combine`: a token MoE group (createMoeGroup) timed per --tokens count.
// Its options are bench's (bench.ts defines them); here are the --tokens parser, the checks before the ranks start, and the run.
import type { MoeTokenResult } from '../bench/moe-tokens.js';
import { InvalidArgumentError } from 'commander';
import { MAX_EXPERTS_PER_RANK, type BackendName } from '../backends/backend.js';
import { counted, formatGBps, formatMicros } from '../bench/table.js';
import { backendsAndRanks, eachBackend } from './backends.js';
import { fail } from './exit.js';
import { listItems, once } from './options.js';
import { PartialResults, SweepProgress } from './sweep-progress.js';

/** bench --op values that time a token MoE group (src/bench/moe-tokens.ts), not a split sweep. */
export const MOE_TOKEN_OPS = ['moe-dispatch', 'moe-combine'] as const;
export type MoeTokenOp = (typeof MOE_TOKEN_OPS)[number];

/** What the token bench reads of `a2av bench`'s options. */
export interface MoeTokenFlags {
  backend?: BackendName[];
  ranks?: number;
  tokens?: number[];
  numExperts: number;
  topk: number;
  hidden: number;
  layout: 'expanded' | 'compact';
  seed: number;
  repeats: number;
  timeoutMs?: number;
  json?: boolean;
}

/** --tokens's parser: token counts per rank, ascending. */
export function countList(text: string): number[] {
  const items = listItems(text, 'token counts');
  // Digits only: Number() would also read 0x10, 1e3 and 2.0.
  const bad = items.find((t) => !/^\d+$/.test(t) || !Number.isSafeInteger(Number(t)) || Number(t) < 1);
  if (bad !== undefined) throw new InvalidArgumentError(`token counts are whole numbers >= 1, got '${bad}'`);
  return once(items.map(Number), 'token count').sort((a, b) => a - b);
}

/** The moe-* ops' action: bench.ts hands them on after refusing the options they do not take. */
export async function benchMoeTokens(flags: MoeTokenFlags, op: MoeTokenOp): Promise<void> {
  const { names, ranks } = await backendsAndRanks(flags);
  // As the ranks would refuse them, before they start (moe-tokens.ts checks the same).
  if (flags.numExperts % ranks !== 0) fail(`--num-experts ${flags.numExperts} is not a multiple of the ${ranks} ranks`);
  const perRank = flags.numExperts / ranks;
  if (perRank > MAX_EXPERTS_PER_RANK) {
    fail(`--num-experts ${flags.numExperts} over ${ranks} ranks is ${perRank} experts a rank, more than the ${MAX_EXPERTS_PER_RANK} a rank ` +
      'the MoE calls take (MAX_EXPERTS_PER_RANK): lower --num-experts, or raise --ranks');
  }
  if (flags.topk > flags.numExperts) fail(`--topk ${flags.topk} is more than the ${flags.numExperts} experts`);
  const tokens = flags.tokens ?? (names.includes('cpu') ? [1, 16, 128] : [1, 128, 4096]);
  const { formatMoeTokenTable, refuseCpuBuffer, runMoeTokenBench } = await import('../bench/moe-tokens.js');
  const write = (results: MoeTokenResult[], apart = false) =>
    process.stdout.write(flags.json ? JSON.stringify(results.length === 1 ? results[0] : results, null, 2) + '\n' : apart ? results.map((r) => formatMoeTokenTable([r])).join('') : formatMoeTokenTable(results));
  // A signal mid-sweep: the backends run and the token counts finished, each its own table.
  const partial = new PartialResults<MoeTokenResult>('token count', tokens.length, (results) => write(results, true));
  const results = await eachBackend(names, async (backend, label) => {
    const arg = { op, tokens, numExperts: flags.numExperts, topk: flags.topk, hidden: flags.hidden, layout: flags.layout, seed: flags.seed, repeats: flags.repeats };
    if (backend === 'cpu') refuseCpuBuffer(arg, ranks);
    const progress = new SweepProgress(`bench --op ${op}`, label, 'token count', partial.interrupted);
    progress.start(tokens.map((t) => counted(t, 'token')), `: ${tokens.join(', ')} token${tokens.length === 1 && tokens[0] === 1 ? '' : 's'} a rank, each checked then timed`);
    try {
      return partial.done(await runMoeTokenBench({ ...arg, backend, ranks, timeoutMs: flags.timeoutMs }, (r, soFar) => {
        partial.current = soFar;
        progress.finished(r.index, `${counted(r.row.tokens, 'token')}: ${formatMicros(r.row.timeUs)} µs, ${formatGBps(r.row.GBps)} GB/s, 1-D ${formatMicros(r.row.oneDUs)} µs, checked`);
      }));
    } finally {
      progress.stop();
    }
  });
  if (results.length === 0) return;
  write(results);
}
