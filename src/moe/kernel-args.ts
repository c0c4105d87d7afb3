// The argument structs of kernels/moe-tokens.cu, field by field: every field is 8 bytes (a pointer
// or an i64), so field i sits at byte 8·i and the order is the whole layout.
// tests/moe-tokens.test.ts checks these lists against the structs in the .cu file.

import { ints, ptrs, type StructSpec } from '../jit/kernel-set.js';

export type { FieldKind } from '../jit/kernel-set.js';
/** A struct of kernels/moe-tokens.cu and the kernels taking it. */
export type TokenKernelSpec = StructSpec;

export const TOKEN_KERNELS = {
  route: {
    struct: 'RouteArgs',
    kernels: ['mt_route'],
    fields: [
      ...ptrs('topkIdx', 'numTokens', 'hist', 'local', 'starts', 'inSplits', 'fault', 'ticket', 'routeTokens'),
      ...ints('tokens', 'tokenCap', 'topk', 'idx64', 'experts', 'expertsPerRank', 'compact', 'buckets', 'chunkTokens'),
    ],
  },
  gather: {
    struct: 'GatherArgs',
    kernels: ['mt_gather'],
    fields: [
      ...ptrs('topkIdx', 'weights', 'x', 'send', 'sendMeta', 'slot', 'local', 'hist', 'routeTokens', 'oso', 'rowOf'),
      ...ints('place', 'topk', 'idx64', 'experts', 'expertsPerRank', 'compact', 'buckets', 'chunkTokens', 'rowBytes', 'metaBytes'),
    ],
  },
  routeGather: {
    struct: 'RouteGatherArgs',
    kernels: ['mt_route_gather'],
    fields: [
      ...ptrs('topkIdx', 'numTokens', 'inSplits', 'routeTokens', 'weights', 'x', 'send', 'sendMeta', 'slot', 'oso', 'rowOf'),
      ...ints('tokens', 'tokenCap', 'topk', 'idx64', 'experts', 'expertsPerRank', 'compact', 'buckets', 'rowBytes', 'metaBytes'),
    ],
  },
  layout: {
    struct: 'LayoutArgs',
    kernels: ['mt_dispatch_layout', 'mt_dispatch_unpack'],
    fields: [
      ...ptrs('oso', 'recvX', 'recvMeta', 'recvIdx', 'recvWeights', 'counts', 'offsets', 'numRecvRows'),
      ...ints('world', 'expertsPerRank', 'compact', 'align', 'rowBytes', 'topk', 'idx64', 'metaBytes'),
    ],
  },
  reduce: {
    struct: 'ReduceArgs',
    kernels: ['mt_combine_reduce', 'mt_combine_pull'],
    fields: [
      ...ptrs('gate', 'recv', 'slot', 'routeTokens', 'weights', 'bias', 'out', 'ticket'),
      ...ints('topk', 'hidden', 'dtype', 'buckets'),
      ...ptrs('yPeers', 'osoPeers', 'inSplits'),
      ...ints('world', 'rank', 'exchangeExperts'),
    ],
  },
} satisfies Record<string, TokenKernelSpec>;

export type TokenKernelName = keyof typeof TOKEN_KERNELS;

/** Threads a block (kernels/moe-tokens.cu MT_THREADS) and a gathered row's threads (MT_GROUP). */
export const THREADS = 256;
export const GROUP = 32;
/** Entries (tokenCap x topk) and buckets mt_route_gather takes at most (MT_SMALL_ENTRIES, MT_SMALL_BUCKETS). */
export const SMALL_ENTRIES = 2048;
export const SMALL_BUCKETS = 512;
/** Buckets mt_combine_pull stages a block (MT_PULL_BUCKETS): a group with more combines through the exchange's copy. */
export const PULL_BUCKETS = 1024;
