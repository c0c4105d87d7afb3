// A short conformance run, for tools that slow every kernel down by orders of magnitude
// (compute-sanitizer): a few cases of the suite at small sizes, 1 to 4 ranks as threads of this one
// process, one line per case. Exit status 1 if any case fails.
//   node dist/tests/conformance/short-run.js [backend] [part]
// backend: default cuda; part: only the cases whose name contains it (e.g. moe).
import { randomInt } from 'node:crypto';
import type { BackendName } from '../../src/backends/backend.js';
import { TimeoutError } from '../../src/errors.js';
import { runRanks } from '../../src/world/threads.js';
import { caseArg, suite, type Case } from './suite.js';

/**
 * Kernels under a sanitizer run far slower than the suite's bound was chosen for. A timeout here
 * more likely means the tool kept the ranks' kernels from running side by side (each spins until
 * its peers arrive): the run then stops rather than wait that long for every case.
 */
const TIMEOUT_MS = 120_000;

interface Pick {
  fn: string;
  ranks: number;
  /** Of the suite's cases of this fn and W, the one whose name contains this (default: the first). */
  named?: string;
  /** Overrides of the suite's argument: fewer calls, smaller rows. */
  arg?: Record<string, unknown>;
  env?: Record<string, string>;
}

const picks: Pick[] = [
  ...[1, 2, 3, 4].map((ranks) => ({ fn: 'exchange', ranks, arg: { calls: 15, budget: 2048 } })),
  // Grid mode is its own set of kernels (kernels/a2av.cu), taken by default only by large calls.
  { fn: 'exchange', ranks: 2, arg: { calls: 10, budget: 2048 }, env: { A2AV_GRID_COPY: 'always' } },
  { fn: 'replay', ranks: 2, arg: { launches: 5, budget: 2048 } },
  // Refused calls must write nothing: memcheck sees any access outside the buffers.
  { fn: 'splitsErrors', ranks: 3 },
  { fn: 'lanes', ranks: 2, arg: { budget: 2048 } },
  // Each handle reads its own call's record from the lane's ring.
  { fn: 'ownOutcomes', ranks: 2, arg: { calls: 6 } },
  // allReduce: one-shot and, past ar_one_shot_bytes (1 MiB at W = 2, 682.5 KiB at W = 3), rounds of
  // reduce-scatter + all-gather; in place; misuse.
  { fn: 'allReduce', ranks: 2, arg: { counts: [0, 1, 7, 4099, 300_001] } },
  { fn: 'allReduce', ranks: 3, arg: { counts: [1, 4099, 300_001] } },
  // MoE: x_fused (one kernel, or three launches where the ranks share a GPU), then the token
  // group's steps around it, its gather kernels reading rows from x (rows of whole 16-byte words,
  // ranks on one GPU: the slice grid's, x_copy_slices_gather).
  { fn: 'moeExchange', ranks: 2, arg: { calls: 6, budget: 1024 } },
  { fn: 'moeTokens', ranks: 2, named: 'expanded', arg: { calls: 3 } },
  { fn: 'moeTokens', ranks: 2, named: 'compact', arg: { calls: 3 } },
  { fn: 'moeTokens', ranks: 4, named: 'rows of 14336 B', arg: { calls: 2 } },
  // y symmetric: the combine reads every rank's y in place (mt_combine_pull).
  { fn: 'moeTokens', ranks: 2, named: 'y symmetric', arg: { calls: 3 } },
  { fn: 'moeTokens', ranks: 3, named: 'y symmetric', arg: { calls: 3 } },
];

const backend = (process.argv[2] ?? 'cuda') as BackendName;
const part = process.argv[3];
const seed = process.env.A2AV_SEED !== undefined ? Number(process.env.A2AV_SEED) : randomInt(2 ** 31);
const cases = new URL('./cases.js', import.meta.url);
let failed = 0;
let passed = 0;

const chosen = picks.filter((p) => part === undefined || `${p.fn} ${p.named ?? ''}`.toLowerCase().includes(part.toLowerCase()));
if (chosen.length === 0) throw new Error(`no case of the short run is named with '${part}'`);
for (const pick of chosen) {
  const c: Case | undefined = suite.find((s) => s.fn === pick.fn && s.ranks === pick.ranks && (pick.named === undefined || s.name.includes(pick.named)));
  if (c === undefined) throw new Error(`the conformance suite has no case ${pick.fn} W=${pick.ranks}${pick.named ? ` '${pick.named}'` : ''}`);
  const name = `${backend} ${pick.fn}${pick.named ? ` ${pick.named}` : ''} W=${pick.ranks}${pick.env ? ` (${Object.entries(pick.env).map(([k, v]) => `${k}=${v}`).join(' ')})` : ''}`;
  const started = performance.now();
  const saved = Object.keys(pick.env ?? {}).map((k) => [k, process.env[k]] as const);
  Object.assign(process.env, pick.env); // rank threads copy the environment when they start
  try {
    await runRanks({ backend, ranks: c.ranks, timeoutMs: TIMEOUT_MS, lanes: c.lanes ?? 2 }, cases, c.fn, { ...caseArg(c, seed), ...pick.arg });
    passed++;
    console.log(`ok ${name} (${((performance.now() - started) / 1000).toFixed(1)} s)`);
  } catch (err) {
    failed++;
    console.log(`FAILED ${name}: ${(err as Error).message}`);
    if (err instanceof TimeoutError) {
      console.log('stopping: a peer never arrived (under a sanitizer: were the ranks\' kernels kept from running at once?)');
      break;
    }
  } finally {
    for (const [k, v] of saved) {
      if (v === undefined) delete process.env[k];
      else process.env[k] = v;
    }
  }
}
console.log(`short conformance run on ${backend}: ${passed} of ${chosen.length} cases passed, seed ${seed} (rerun: A2AV_SEED=${seed})`);
process.exitCode = failed > 0 ? 1 : 0;
