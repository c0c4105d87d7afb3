// The conformance suite's cases for the token-level MoE group (src/moe/): which rank program of
// tests/conformance/cases.ts runs on how many ranks with what argument. Small on cpu (CI's two
// cores run the group's loops in every rank thread); one cuda case at W = 8 on one GPU with
// DeepSeek-V3's routing shape (256 experts, top-8), fewer tokens and a narrower row.
import type { Case } from './suite.js';

const job = (layout: 'expanded' | 'compact', experts: number, topk: number, maxTokens: number, align: number, rowBytes: number, hidden: number, calls: number) => ({
  layout,
  experts,
  topk,
  maxTokens,
  align,
  rowBytes,
  hidden,
  calls,
});

export const TOKEN_TIMEOUT_MS = 300;

export const moeTokenSuite: Case[] = [
  ...([
    [1, job('expanded', 4, 2, 9, 1, 16, 3, 5)],
    [2, job('expanded', 3, 3, 12, 4, 7, 5, 5)],
    [3, job('expanded', 2, 4, 10, 8, 40, 2, 5)],
    [4, job('expanded', 2, 3, 8, 2, 1, 3, 5)],
    // DeepSeek-V3's row (7168 bf16): every 4 KiB span of the copy's index inside one row or across two.
    [4, job('expanded', 4, 3, 24, 1, 14336, 3, 3)],
    // Rows out past 4 MiB a rank: on one GPU the dispatch takes three launches, not x_fused (moe/group.ts).
    [4, job('expanded', 4, 3, 100, 1, 14336, 3, 2)],
  ] as const).map(([W, arg]) => ({
    name: `MoE tokens W=${W}, expanded: E=${arg.experts}, top-${arg.topk}, up to ${arg.maxTokens} tokens, alignment ${arg.align}, rows of ${arg.rowBytes} B; counts, layout, weights, repeat, route reuse, combine bf16/f32/f16 with and without weights and bias`,
    fn: 'moeTokens',
    ranks: W,
    arg,
  })),
  ...([
    [2, job('compact', 3, 4, 12, 1, 24, 4, 5)],
    [3, job('compact', 2, 3, 10, 1, 5, 3, 5)],
    [4, job('compact', 2, 2, 8, 1, 1000, 2, 4)],
    [4, job('compact', 2, 3, 100, 1, 14336, 3, 2)],
  ] as const).map(([W, arg]) => ({
    name: `MoE tokens W=${W}, compact: E=${arg.experts}, top-${arg.topk}, up to ${arg.maxTokens} tokens, rows of ${arg.rowBytes} B; ids and weights per received token, combine over ranks`,
    fn: 'moeTokens',
    ranks: W,
    arg,
  })),
  {
    name: 'MoE tokens W=8 on one GPU: 256 experts, top-8, up to 48 tokens, alignment 16, rows of 1 KiB',
    fn: 'moeTokens',
    ranks: 8,
    arg: job('expanded', 32, 8, 48, 16, 1024, 32, 4),
    only: { backend: 'cuda', why: 'W=8 on one GPU: too many threads for CI\'s two cores on cpu, too many GPUs for nccl' },
  },
  {
    name: 'MoE tokens W=8 on one GPU, compact: 256 experts, top-8',
    fn: 'moeTokens',
    ranks: 8,
    arg: job('compact', 32, 8, 48, 1, 1024, 32, 4),
    only: { backend: 'cuda', why: 'W=8 on one GPU: too many threads for CI\'s two cores on cpu, too many GPUs for nccl' },
  },
  // Past x_fused at W = 8 on one GPU (rows out past 4 MiB a rank): each x row read once for all its
  // send rows (x_copy_scatter), top-8 in two batches of the table.
  ...(['expanded', 'compact'] as const).map((layout) => ({
    name: `MoE tokens W=8 on one GPU, ${layout}, rows of 14336 B past x_fused: 256 experts, top-8, up to 100 tokens`,
    fn: 'moeTokens',
    ranks: 8,
    arg: job(layout, 32, 8, 100, layout === 'expanded' ? 4 : 1, 14336, 8, 2),
    only: { backend: 'cuda' as const, why: 'W=8 on one GPU: too many threads for CI\'s two cores on cpu, too many GPUs for nccl' },
  })),
  // y in symmetric memory: on cuda with every rank on one GPU each combine reads the expert outputs where they lie.
  ...([
    [1, job('expanded', 4, 2, 9, 1, 16, 3, 5)],
    [2, job('expanded', 3, 3, 12, 4, 7, 5, 5)],
    [3, job('compact', 2, 3, 10, 1, 5, 3, 5)],
  ] as const).map(([W, arg]) => ({
    name: `MoE tokens W=${W}, ${arg.layout}, y symmetric (on one GPU the combine reads it in place): E=${arg.experts}, top-${arg.topk}, up to ${arg.maxTokens} tokens`,
    fn: 'moeTokens',
    ranks: W,
    arg: { ...arg, symmetricY: true },
  })),
  ...(['expanded', 'compact'] as const).map((layout) => ({
    name: `MoE tokens W=8 on one GPU, ${layout}, y symmetric (on one GPU the combine reads it in place): 256 experts, top-8`,
    fn: 'moeTokens',
    ranks: 8,
    arg: { ...job(layout, 32, 8, 48, layout === 'expanded' ? 16 : 1, 1024, 32, 4), symmetricY: true },
    only: { backend: 'cuda' as const, why: 'W=8 on one GPU: too many threads for CI\'s two cores on cpu, too many GPUs for nccl' },
  })),
  { name: 'MoE tokens graph replay W=2, expanded: new ids, rows and device token count each launch', fn: 'moeTokenReplay', ranks: 2, arg: job('expanded', 3, 2, 8, 4, 12, 3, 5) },
  // Rows out past 4 MiB: on one GPU the replayed dispatch reads each x row once (x_copy_scatter) up to the device count.
  ...(['expanded', 'compact'] as const).map((layout) => ({
    name: `MoE tokens graph replay W=2, ${layout}, rows of 14336 B past x_fused: new ids, rows and device token count each launch`,
    fn: 'moeTokenReplay',
    ranks: 2,
    arg: job(layout, 4, 3, 100, layout === 'expanded' ? 4 : 1, 14336, 3, 3),
  })),
  { name: 'MoE tokens graph replay W=2, expanded, y symmetric (on one GPU the combine reads it in place)', fn: 'moeTokenReplay', ranks: 2, arg: { ...job('expanded', 3, 2, 8, 4, 12, 3, 5), symmetricY: true } },
  { name: 'MoE tokens graph replay W=3, compact: new ids, rows and device token count each launch', fn: 'moeTokenReplay', ranks: 3, arg: job('compact', 2, 3, 6, 1, 9, 2, 5) },
  // A replay's refusal in the group's terms, as an eager dispatch's (not the exchange's stand-in split).
  ...([
    [2, job('expanded', 3, 2, 8, 4, 12, 3, 0)],
    [3, job('compact', 2, 3, 6, 1, 9, 2, 0)],
  ] as const).map(([W, arg]) => ({
    name: `MoE tokens errors in a graph replay W=${W}, ${arg.layout}: a bad id and a device count past the buffers named (MoeRoutingError, no stand-in cause), nothing written, the next replay goes through`,
    fn: 'moeTokenReplayErrors',
    ranks: W,
    arg,
  })),
  ...([
    [1, job('expanded', 3, 2, 6, 2, 8, 2, 0)],
    [2, job('expanded', 2, 3, 6, 4, 17, 3, 0)],
    [3, job('compact', 2, 2, 6, 1, 8, 2, 0)],
  ] as const).map(([W, arg]) => ({
    name: `MoE tokens errors W=${W}, ${arg.layout}: every token to one expert refused (MoeCapacityError naming it), bad ids and device counts (MoeRoutingError), nothing written; misuse throws UsageError`,
    fn: 'moeTokenErrors',
    ranks: W,
    arg,
  })),
  {
    name: `MoE tokens timeout W=3: a rank that never dispatches is named (${TOKEN_TIMEOUT_MS} ms)`,
    fn: 'moeTokenTimeout',
    ranks: 3,
    arg: { ...job('compact', 2, 2, 4, 1, 8, 2, 0), absent: -1, timeoutMs: TOKEN_TIMEOUT_MS },
    timeoutMs: TOKEN_TIMEOUT_MS,
  },
];
