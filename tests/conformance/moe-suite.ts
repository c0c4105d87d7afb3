// The conformance suite's MoE cases (dispatch, combine, exchange plans): which rank program of
// tests/conformance/cases.ts runs on how many ranks with what argument. W stays at 8 or less for
// threads on CI's two cores; one cpu case takes W = 72 (one NVLink domain), and one cuda case W = 16
// on one GPU.
import type { Case } from './suite.js';

const MOE_FNS = new Set(['moeExchange', 'moeReplay', 'moeLanes', 'moeErrors', 'moeMismatch', 'moePlans', 'planRefusals', 'moePlanReplay', 'moeUsage']);
export const isMoeCase = (c: Case): boolean => MOE_FNS.has(c.fn);

export const moeSuite: Case[] = [
  ...[1, 2, 3, 4, 8].map((W) => ({
    name: `MoE dispatch + combine W=${W}: E = 8, majorAlign 1, 8 and 16, splits in [0, 10), zero rows for an expert, a rank or all, all to one expert, rows of 1 B to 14 KiB`,
    fn: 'moeExchange',
    ranks: W,
    arg: { calls: W === 8 ? 9 : 18, experts: [8], aligns: [1, 8, 16], maxRows: 9, budget: 4096 },
  })),
  {
    name: 'MoE dispatch + combine W=4: E = 1, 16, 64 and 256',
    fn: 'moeExchange',
    ranks: 4,
    arg: { calls: 8, experts: [1, 16, 64, 256], aligns: [1, 4], maxRows: 2, budget: 1024, rowSizes: [1, 7, 48, 1000] },
  },
  {
    // E = 256 here takes a minute on two cores: every cpu rank judges the whole W·W·E matrix.
    name: 'MoE dispatch + combine W=72 (one NVLink domain), E=8, 0 or 1 rows per expert',
    fn: 'moeExchange',
    ranks: 72,
    arg: { calls: 2, experts: [8], aligns: [1, 8], maxRows: 1, budget: 16, rowSizes: [3, 16] },
    only: { backend: 'cpu', why: 'W=72: ranks as threads of the cpu backend' },
    timeoutMs: 60_000,
  },
  {
    name: 'MoE dispatch + combine W=16 on one GPU: E = 16 and 64',
    fn: 'moeExchange',
    ranks: 16,
    arg: { calls: 6, experts: [16, 64], aligns: [1, 8], maxRows: 4, budget: 4096 },
    only: { backend: 'cuda', why: 'W=16 on one GPU: too many threads for CI\'s two cores on cpu, too many GPUs for nccl' },
  },
  ...[1, 2, 3].map((W) => ({ name: `exchange plans W=${W}: a dispatch plan and its combine plan, each reused for three payloads; moves that disagree`, fn: 'moePlans', ranks: W, arg: { experts: 8, align: 8, maxRows: 3 } })),
  ...[2, 3].map((W) => ({ name: `exchange plans W=${W}: a 1-D plan reused for three payloads; refused plans move nothing`, fn: 'planRefusals', ranks: W, arg: { experts: 4, align: 4, maxRows: 3 } })),
  ...[2, 3].map((W) => ({ name: `MoE graph replay W=${W}: dispatch + combine with new splits`, fn: 'moeReplay', ranks: W, arg: { launches: 7, experts: 8, align: 8, maxRows: 4 } })),
  ...[1, 2, 3].map((W) => ({ name: `exchange plans in a graph W=${W}: a dispatch plan moving two payloads and its combine plan, captured, launched with new splits; close() inside refused`, fn: 'moePlanReplay', ranks: W, arg: { launches: 4, experts: 8, align: 4, maxRows: 4 } })),
  ...[1, 3, 4].map((W) => ({ name: `MoE splits errors W=${W}: every rule, exact fields (with expert), nothing written`, fn: 'moeErrors', ranks: W, arg: {} })),
  ...[2, 3].map((W) => ({ name: `MoE mismatch W=${W}: kind, row size, output, E or majorAlign differ on one rank`, fn: 'moeMismatch', ranks: W, arg: {} })),
  ...[2, 3].map((W) => ({ name: `MoE lanes W=${W}: one lane dispatches while the other combines`, fn: 'moeLanes', ranks: W, arg: { rounds: 4, experts: 8, align: 4, maxRows: 4 } })),
  { name: 'MoE usage W=2: host-side misuse of the MoE calls and plans throws UsageError at once', fn: 'moeUsage', ranks: 2, arg: {} },
];
