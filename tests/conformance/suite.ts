// The conformance suite's cases: which rank program (tests/conformance/cases.ts) runs on how many
// ranks with what argument. Run as threads by tests/conformance.test.ts on every backend, and as
// launched processes, one per GPU, by tests/multi-gpu/conformance-rank.ts.
import type { BackendName } from '../../src/backends/backend.js';
import { moeSuite } from './moe-suite.js';
import { moeTokenSuite } from './moe-token-suite.js';

export const TIMEOUT_CASE_MS = 300;

export interface Case {
  name: string;
  fn: string;
  ranks: number;
  arg: Record<string, unknown>;
  timeoutMs?: number;
  lanes?: number;
  /** A case for one backend only, and why. */
  only?: { backend: BackendName; why: string };
}

export const suite: Case[] = [
  ...[1, 2, 3, 4, 8].map((W) => ({
    name: `exchange W=${W}: random, sparse, zero, all-to-one and self splits, rows of 1 B to 16 KiB`,
    fn: 'exchange',
    ranks: W,
    arg: { calls: W === 8 ? 20 : 45, budget: W === 8 ? 4096 : 16384 },
  })),
  ...[2, 3].map((W) => ({ name: `graph replay W=${W}: new splits in the same buffers`, fn: 'replay', ranks: W, arg: { launches: 10, budget: 8192 } })),
  ...[1, 3, 4].map((W) => ({ name: `splits errors W=${W}: named error, nothing written, lane still usable`, fn: 'splitsErrors', ranks: W, arg: {} })),
  ...[1, 2, 3].map((W) => ({
    name: `own outcomes W=${W}: 9 calls queued, every third refused, handles waited in order, in reverse, twice and not at all`,
    fn: 'ownOutcomes',
    ranks: W,
    arg: { calls: 9 },
  })),
  {
    name: `timeout W=3: a rank that never calls is named (${TIMEOUT_CASE_MS} ms)`,
    fn: 'timeout',
    ranks: 3,
    arg: { absent: -1, timeoutMs: TIMEOUT_CASE_MS },
    timeoutMs: TIMEOUT_CASE_MS,
  },
  ...(['barrier', 'allocSymmetric'] as const).map((first) => ({
    name: `set-up timeout W=3: a rank that misses ${first}() is named, and the communicator is ended (${TIMEOUT_CASE_MS} ms; cpu: its 10 s set-up floor)`,
    fn: 'setUpTimeout',
    ranks: 3,
    arg: { absent: -1, timeoutMs: TIMEOUT_CASE_MS, first },
    timeoutMs: TIMEOUT_CASE_MS,
  })),
  {
    name: `set-up timeout W=3: barrier({ timeoutMs: ${TIMEOUT_CASE_MS} }) under a ${4 * TIMEOUT_CASE_MS} ms communicator timeout ends at its own bound, naming the rank that missed it; bad options refused`,
    fn: 'setUpTimeout',
    ranks: 3,
    arg: { absent: -1, timeoutMs: TIMEOUT_CASE_MS, first: 'bounded barrier' },
    timeoutMs: 4 * TIMEOUT_CASE_MS,
  },
  ...[2, 3].map((W) => ({ name: `lanes W=${W}: a second lane works while the first holds an error`, fn: 'lanes', ranks: W, arg: { budget: 4096 } })),
  // W = 3 puts two ranks on one GPU where two are visible: the grids of both lanes of both exceed it.
  ...[2, 3].map((W) => ({ name: `lanes W=${W}: large calls on both lanes at once, each grid all its lane may hold`, fn: 'lanesLarge', ranks: W, arg: { budget: 16 << 20, rounds: 3 } })),
  ...[2, 3].map((W) => ({
    name: `lanes crossed W=${W}: ranks issue their two lanes' calls in different orders, small and large calls`,
    fn: 'lanesCrossed',
    ranks: W,
    arg: { budget: 1 << 20, rounds: 4 },
    only: { backend: 'cuda' as const, why: 'cpu runs a call when it is made and nccl waits on the host for its peers\' splits: there ranks issue calls across lanes in one order (README, "Handles and ordering")' },
  })),
  { name: 'usage W=2: host-side misuse throws UsageError at once', fn: 'usage', ranks: 2, arg: {} },
  ...[3, 4].map((W) => ({ name: `allocSymmetric sizes W=${W}: ranks asking for different sizes are all refused, naming every rank's; the next allocation and call work`, fn: 'symmetricSizes', ranks: W, arg: {} })),
  { name: 'caller stream W=2: a call on the caller\'s stream runs after the copies queued there, launched early or not', fn: 'callerStream', ranks: 2, arg: { calls: 6, budget: 4096 } },
  { name: 'closed W=2: every call after close() throws ClosedError; close() again is a no-op', fn: 'closedCalls', ranks: 2, arg: {} },
  { name: 'copy offsets W=1: comm.copy moves bytes between offsets, within one buffer too; ranges past a buffer or overlapping refused, nothing moved', fn: 'copyOffsets', ranks: 1, arg: {} },
  { name: 'capture refused W=1: nccl cannot replay a call with new splits, so capture() throws UsageError', fn: 'captureRefused', ranks: 1, arg: {} },
  ...moeSuite,
  ...moeTokenSuite,
  ...[1, 2, 3, 4].map((W) => ({
    name: `allReduce W=${W}: f32 and bf16, counts 0, 1, 7, 4099 and ${W <= 2 ? '1M (4 MiB of f32)' : '300k'}, in place and not, canaries, misuse`,
    fn: 'allReduce',
    ranks: W,
    arg: { counts: [0, 1, 7, 4099, W <= 2 ? 1_000_003 : 300_007] },
  })),
  ...[2, 3].map((W) => ({ name: `allReduce lanes W=${W}: both lanes in flight, waited in reverse`, fn: 'allReduceLanes', ranks: W, arg: { rounds: 6, maxCount: 50_001 } })),
  {
    // On cuda: 1.5M f32 is 23 rounds of the reduce-scatter + all-gather path at W = 8, the last one partial.
    name: 'allReduce W=8: f32 and bf16, counts 1, 4099 and 1.5M, in place and not',
    fn: 'allReduce',
    ranks: 8,
    arg: { counts: [1, 4099, 1_500_007] },
    only: { backend: 'cuda', why: 'W=8 on one GPU: too many threads for CI\'s two cores on cpu, too many GPUs for nccl' },
  },
  ...[1, 3].map((W) => ({
    name: `allReduce replay W=${W}: a one-shot and a larger call in one graph, new inputs each launch, direct calls between`,
    fn: 'allReduceReplay',
    ranks: W,
    arg: { launches: 6, counts: [1001, 1_300_007] },
  })),
  ...[2, 3].map((W) => ({
    name: `allReduce mismatch W=${W}: another count (on either path), dtype or output is refused on every rank, nothing written`,
    fn: 'allReduceMismatch',
    ranks: W,
    arg: { large: 1_300_007 },
  })),
  ...[2, 3].map((W) => ({
    name: `allReduce beside an all-to-all call W=${W}: allToAllV or allToAllV2d on one rank while the others allReduce is refused on every rank as a mismatch of kind, nothing written`,
    fn: 'allReduceBeside',
    ranks: W,
    arg: {},
    only: { backend: 'cpu' as const, why: 'cuda: allReduce and the all-to-all calls wait in packets of their own, so such ranks end in TimeoutError (README); nccl: NCCL does not compare the ranks\' calls' },
  })),
  {
    name: `allReduce timeout W=3: a rank that never calls is named (${TIMEOUT_CASE_MS} ms)`,
    fn: 'allReduceTimeout',
    ranks: 3,
    arg: { absent: -1, timeoutMs: TIMEOUT_CASE_MS },
    timeoutMs: TIMEOUT_CASE_MS,
  },
];

/** Cases that only make sense on some backends, and why the others skip them. */
export function notFor(backend: BackendName, c: Case): string | undefined {
  if ((c.fn === 'replay' || c.fn === 'moeReplay' || c.fn === 'moePlanReplay' || c.fn === 'allReduceReplay' || c.fn === 'moeTokenReplay' || c.fn === 'moeTokenReplayErrors') && backend === 'nccl') return 'nccl cannot capture (NCCL needs the splits on the host); "capture refused" checks that it says so';
  if (c.fn === 'captureRefused' && backend !== 'nccl') return 'only nccl refuses capture';
  if (c.fn === 'allReduceMismatch' && backend === 'nccl') return 'nccl sums what it is given: NCCL does not compare the ranks\' allReduce calls';
  if (c.only !== undefined && c.only.backend !== backend) return c.only.why;
  return undefined;
}

/** The argument a case's rank program gets: the suite's, the run's seed, and the absent rank of the timeout case. */
export function caseArg(c: Case, seed: number): Record<string, unknown> {
  const arg: Record<string, unknown> = { ...c.arg, seed };
  if (c.fn === 'timeout' || c.fn === 'setUpTimeout' || c.fn === 'allReduceTimeout' || c.fn === 'moeTokenTimeout') arg.absent = seed % c.ranks;
  return arg;
}
