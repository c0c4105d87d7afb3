// Token-level MoE around the 2-D exchange (src/moe/): the routing of top-k expert ids into the
// dispatch's rank-major order, the gather of rows into that order, the layout of what a rank
// received, and combine's weighted reduction. src/moe/host-compute.ts computes the same bits on
// the host (the cpu backend), so the two are one definition:
//   - routing is a stable counting sort: within a bucket (expanded: an expert; compact: a rank),
//     entries keep (token, k) order, so the same topkIdx always gives the same layout;
//   - a rejected call writes nothing: the exchange leaves its outSplitsOffsets as it was, -1 before
//     each call (mt_gather sets the dispatch's, the previous mt_combine_reduce or the group's
//     set-up the combine's: no memset of their own), and every kernel after the exchange reads
//     them first;
//   - a call's work follows its tokens, not the group's capacity: a dispatch is mt_route (counts
//     and their scan in one launch: its last block scans), mt_gather, the exchange, then
//     mt_dispatch_layout; a combine the exchange, then mt_combine_reduce. A new routing of at most
//     MT_SMALL_ENTRIES entries routes and gathers in one block instead (mt_route_gather);
//   - combine sums in top-k order in f32 with separate multiply and add (__fmul_rn, __fadd_rn: no
//     FMA contraction, which the host cannot reproduce), rounding once to the output type.
// Each kernel takes one struct of 8-byte fields, mirrored field by field in src/moe/kernel-args.ts
// (tests/moe-tokens.test.ts compares the names).
#include "probe-clocks.cuh"

typedef unsigned char u8;
typedef unsigned int u32;
typedef long long i64;
typedef unsigned long long u64;

#define MT_THREADS 256
// Threads that move one (token, k) row in mt_gather, at least.
#define MT_GROUP 32
// The splits a bad routing leaves at inSplits[0], so that every rank refuses the call
// (src/moe/errors.ts decodes them): -1 - entry for a bad expert id, this for a bad token count.
#define MT_BAD_TOKEN_COUNT (-(1ll << 40))
#define MT_DTYPE_F32 0
#define MT_DTYPE_BF16 1
#define MT_DTYPE_F16 2

struct RouteArgs {
  u64 topkIdx;      // int32 or int64 [tokenCap][topk]
  u64 numTokens;    // int64 [1] read when the call runs; 0: `tokens` is the count
  u64 hist;         // int32 [chunks][buckets]: each chunk's count per bucket, then where its entries start
  u64 local;        // int32 [tokenCap][topk]: an entry's rank among its chunk's entries of its bucket; -1 none
  u64 starts;       // int64 [buckets]: where each bucket starts in the send order
  u64 inSplits;     // int64 [buckets]: the exchange's splits
  u64 fault;        // u64 [1], zero between calls: 2^62 - the lowest bad entry, 0 when none
  u64 ticket;       // u64 [1], zero between calls: the chunks done so far
  u64 routeTokens;  // int64 [1]: the token count the route was built with
  i64 tokens;
  i64 tokenCap;
  i64 topk;
  i64 idx64;
  i64 experts;          // every rank's experts together
  i64 expertsPerRank;
  i64 compact;
  i64 buckets;
  i64 chunkTokens;
};
static_assert(sizeof(RouteArgs) == 18 * 8, "RouteArgs: 8-byte fields");

struct GatherArgs {
  u64 topkIdx;
  u64 weights;      // f32 [tokenCap][topk], or 0
  u64 x;            // [tokenCap][rowBytes]
  u64 send;         // [sendRows][rowBytes]
  u64 sendMeta;     // [sendRows][metaBytes], or 0
  u64 slot;         // int32 [tokenCap][topk]: the send row of each entry, -1 none
  u64 local;
  u64 hist;
  u64 routeTokens;
  u64 oso;          // int64 [2][buckets]: the exchange's outSplitsOffsets, set to -1 here
  u64 rowOf;        // int32 [sendRows]: each send row's token, written instead of copying the row (cuda: the exchange reads x through it), or 0
  i64 place;        // 1: work out the slots (a new route); 0: read them (a route reused)
  i64 topk;
  i64 idx64;
  i64 experts;
  i64 expertsPerRank;
  i64 compact;
  i64 buckets;
  i64 chunkTokens;
  i64 rowBytes;
  i64 metaBytes;
};
static_assert(sizeof(GatherArgs) == 21 * 8, "GatherArgs: 8-byte fields");

// mt_route_gather's: RouteArgs' fields that it reads, then GatherArgs'.
struct RouteGatherArgs {
  u64 topkIdx;
  u64 numTokens;
  u64 inSplits;
  u64 routeTokens;
  u64 weights;
  u64 x;
  u64 send;
  u64 sendMeta;
  u64 slot;
  u64 oso;
  u64 rowOf;
  i64 tokens;
  i64 tokenCap;
  i64 topk;
  i64 idx64;
  i64 experts;
  i64 expertsPerRank;
  i64 compact;
  i64 buckets;
  i64 rowBytes;
  i64 metaBytes;
};
static_assert(sizeof(RouteGatherArgs) == 21 * 8, "RouteGatherArgs: 8-byte fields");

struct LayoutArgs {
  u64 oso;          // int64 [2][buckets]: the dispatch's outSplitsOffsets; -1 when refused
  u64 recvX;        // [recvRows][rowBytes]
  u64 recvMeta;     // [recvRows][metaBytes]
  u64 recvIdx;      // compact: int32 or int64 [rows][topk], or 0
  u64 recvWeights;  // expanded: f32 [rows]; compact: f32 [rows][topk]; or 0
  u64 counts;       // int64 [expertsPerRank]
  u64 offsets;      // expanded: int64 [expertsPerRank], or 0
  u64 numRecvRows;  // int64 [1]: the rows of recvX written, from row 0; or 0
  i64 world;
  i64 expertsPerRank;
  i64 compact;
  i64 align;
  i64 rowBytes;
  i64 topk;
  i64 idx64;
  i64 metaBytes;
};
static_assert(sizeof(LayoutArgs) == 16 * 8, "LayoutArgs: 8-byte fields");

struct ReduceArgs {
  u64 gate;         // int64 [2][buckets]: combine's outSplitsOffsets; -1 when refused, and set to -1 again here
  u64 recv;         // [sendRows][hidden] of dtype: the rows back, in send order
  u64 slot;
  u64 routeTokens;
  u64 weights;      // f32 [tokenCap][topk], or 0
  u64 bias;         // [tokenCap][hidden] of dtype, or 0
  u64 out;          // [tokenCap][hidden] of dtype
  u64 ticket;       // u64 [1], zero between calls: the blocks done so far
  i64 topk;
  i64 hidden;
  i64 dtype;
  i64 buckets;
  // mt_combine_pull only: the terms read where the experts left them.
  u64 yPeers;       // u64 [world]: every rank's y (symmetric), rows in its recvX's places
  u64 osoPeers;     // u64 [world]: every rank's routeOso (symmetric): where my chunks landed in its recvX
  u64 inSplits;     // int64 [buckets]: the rows each bucket sent (the dispatch's splits), in send order
  i64 world;
  i64 rank;
  i64 exchangeExperts;  // the exchange's experts a rank (1: compact)
};
static_assert(sizeof(ReduceArgs) == 18 * 8, "ReduceArgs: 8-byte fields");

// The last block of a grid to get here (after the block's writes): every block's writes are then
// visible to it, if it reads them past L1 (__ldcg). Every thread of the block calls it.
__device__ __forceinline__ bool mt_last_block(u64 ticket, u64 blocks) {
  __shared__ int last;
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) last = atomicAdd((u64*)ticket, 1ull) == blocks - 1;
  __syncthreads();
  return last != 0;
}

// Running sums across the block (`threads` of them) of each thread's v, left in part[0, threads)
// (part[threads - 1] is the total); returns the sum of the threads before this one. Every thread of
// the block calls it.
template <class T>
__device__ __forceinline__ T mt_block_scan(T* part, T v, int threads) {
  const int tid = threadIdx.x;
  part[tid] = v;
  __syncthreads();
  for (int d = 1; d < threads; d *= 2) {
    const T add = tid >= d ? part[tid - d] : 0;
    __syncthreads();
    part[tid] += add;
    __syncthreads();
  }
  return part[tid] - v;
}

// --- routing ------------------------------------------------------------------------------------

__device__ __forceinline__ i64 mt_idx(u64 topkIdx, i64 i, i64 idx64) {
  return idx64 ? ((const i64*)topkIdx)[i] : (i64)((const int*)topkIdx)[i];
}

// The call's token count, or -1 when it is outside [0, tokenCap].
__device__ __forceinline__ i64 mt_tokens(u64 numTokens, i64 tokens, i64 tokenCap) {
  const i64 t = numTokens ? *(const i64*)numTokens : tokens;
  return t < 0 || t > tokenCap ? -1 : t;
}

// The bucket of entry (t, k): expanded, its expert (the rank-major index rank·E + e); compact, its
// rank, for the first k of the token that goes there. -1: nowhere; -2: not an expert id.
__device__ i64 mt_bucket(u64 topkIdx, i64 t, i64 k, i64 K, i64 idx64, i64 N, i64 E, i64 compact) {
  const i64 id = mt_idx(topkIdx, t * K + k, idx64);
  if (id == -1) return -1;
  if (id < -1 || id >= N) return -2;
  if (!compact) return id;
  for (i64 j = 0; j < k; j++) {
    const i64 o = mt_idx(topkIdx, t * K + j, idx64);
    if (o >= 0 && o < N && o / E == id / E) return -1;
  }
  return id / E;
}

// Values a thread of mt_route's scan holds at once: its loads go out together (one L2 round trip
// per batch, not per value).
#define MT_SCAN_BATCH 16

// The last block of mt_route: an exclusive scan of the chunks' counts in bucket-major order
// (bucket 0's chunks in order, then bucket 1's, ...), so each (chunk, bucket) count becomes where
// its entries start in the send order; the buckets' totals are the splits.
__device__ void mt_route_scan(const RouteArgs& p, i64 chunks, i64 T) {
  __shared__ i64 part[MT_THREADS];
  const int tid = threadIdx.x, nt = blockDim.x;
  // 32-bit indices (chunks x buckets <= SCAN_BUDGET in src/moe/shape.ts), stepped rather than
  // divided: count q is (bucket q / C, chunk q % C), at hist[chunk · NB + bucket], and a 64-bit
  // division or remainder a count took about 13 µs of a 4096-token routing.
  const int NB = (int)p.buckets, C = (int)chunks, M = NB * C;
  int* hist = (int*)p.hist;
  i64* starts = (i64*)p.starts;
  i64* splits = (i64*)p.inSplits;
  const int seg = (M + nt - 1) / nt, lo = tid * seg < M ? tid * seg : M, hi = lo + seg < M ? lo + seg : M;
  // Where count lo sits, and the step to the next count's place.
  const int chunk0 = lo % C, bucket0 = lo / C;
  int c[MT_SCAN_BATCH];
  i64 sum = 0;
  for (int q0 = lo, chunk = chunk0, bucket = bucket0; q0 < hi; q0 += MT_SCAN_BATCH) {
#pragma unroll
    for (int j = 0; j < MT_SCAN_BATCH; j++) {
      c[j] = q0 + j < hi ? __ldcg(hist + chunk * NB + bucket) : 0;
      if (++chunk == C) chunk = 0, bucket++;
    }
#pragma unroll
    for (int j = 0; j < MT_SCAN_BATCH; j++) sum += c[j];
  }
  i64 run = mt_block_scan(part, sum, nt);
  const i64 total = part[nt - 1];
  for (int q0 = lo, chunk = chunk0, bucket = bucket0; q0 < hi; q0 += MT_SCAN_BATCH) {
    int at[MT_SCAN_BATCH];
#pragma unroll
    for (int j = 0; j < MT_SCAN_BATCH; j++) {
      at[j] = chunk * NB + bucket;
      c[j] = q0 + j < hi ? __ldcg(hist + at[j]) : 0;
      if (++chunk == C) chunk = 0, bucket++;
    }
#pragma unroll
    for (int j = 0; j < MT_SCAN_BATCH; j++) {
      if (q0 + j >= hi) break;
      hist[at[j]] = (int)run;
      if (at[j] < NB) starts[at[j]] = run;
      run += c[j];
    }
  }
  __syncthreads();
  for (i64 b = tid; b < NB; b += nt) splits[b] = (b + 1 < NB ? starts[b + 1] : total) - starts[b];
  __syncthreads();
  if (tid == 0) {
    const u64 fault = __ldcg((const u64*)p.fault);
    if (T < 0) splits[0] = MT_BAD_TOKEN_COUNT;
    else if (fault != 0) splits[0] = -1 - (i64)((1ull << 62) - fault);
    *(i64*)p.routeTokens = T < 0 ? 0 : T;
    *(u64*)p.fault = 0;
    *(u64*)p.ticket = 0;
  }
}

// The routing, a stable counting sort of the entries (t, k) by bucket. One block per chunk of
// chunkTokens tokens (blocks past the call's tokens leave at once): each tile of MT_THREADS entries
// in order, every entry's rank among the tile's entries of its bucket (a scan of the tile in shared
// memory: no atomics, so the order is the entries'), plus the chunk's count so far. The last chunk
// done scans every chunk's counts (mt_route_scan). A bad id or token count becomes a negative
// split, which every rank's exchange refuses.
extern "C" __global__ void __launch_bounds__(MT_THREADS) mt_route(const RouteArgs p) {
  __shared__ int bk[MT_THREADS];
  __shared__ u64 bad;
  const int tid = threadIdx.x, nt = blockDim.x;
  const i64 T = mt_tokens(p.numTokens, p.tokens, p.tokenCap), K = p.topk, NB = p.buckets;
  const i64 n = T < 0 ? 0 : T, C = n == 0 ? 1 : (n + p.chunkTokens - 1) / p.chunkTokens;
  const i64 j = blockIdx.x;
  if (j >= C) return;
  int* row = (int*)p.hist + j * NB;
  int* local = (int*)p.local;
  for (i64 b = tid; b < NB; b += nt) row[b] = 0;
  if (tid == 0) bad = 0;
  __syncthreads();
  const i64 end = (n < (j + 1) * p.chunkTokens ? n : (j + 1) * p.chunkTokens) * K;
  for (i64 g0 = j * p.chunkTokens * K; g0 < end; g0 += nt) {
    const i64 g = g0 + tid, m = end - g0 < nt ? end - g0 : nt;
    const i64 b = g < end ? mt_bucket(p.topkIdx, g / K, g % K, K, p.idx64, p.experts, p.expertsPerRank, p.compact) : -1;
    if (b == -2) atomicMax(&bad, (1ull << 62) - (u64)g);
    bk[tid] = (int)b;
    __syncthreads();
    int rank = 0, count = 0;
    if (b >= 0) {
      // A probe (A2AV_PROBE_ROUTE_UNROLL): 16 of the tile's loads in flight at once rather than one,
      // as the one-block routing's rank loop gained from (docs/perf.md "Prepared").
#ifdef A2AV_PROBE_ROUTE_UNROLL
#pragma unroll 16
#endif
      for (int i = 0; i < m; i++) {
        const bool same = bk[i] == (int)b;
        count += same;
        rank += same && i < tid;
      }
      local[g] = row[b] + rank;
    } else if (g < end) {
      local[g] = -1;
    }
    __syncthreads();
    if (b >= 0 && rank == 0) row[b] += count;
    __syncthreads();
  }
  if (tid == 0 && bad != 0) atomicMax((u64*)p.fault, bad);
  if (mt_last_block(p.ticket, (u64)C)) mt_route_scan(p, C, T);
}

// --- gather -------------------------------------------------------------------------------------

// `bytes` from src to dst by `lanes` threads: 16-byte words where both ends and the size allow,
// four loads in flight before their stores.
__device__ __forceinline__ void mt_copy_row(u8* dst, const u8* src, i64 bytes, int lane, int lanes) {
  if ((((u64)dst | (u64)src | (u64)bytes) & 15) == 0) {
    const uint4* s = (const uint4*)src;
    uint4* d = (uint4*)dst;
    const i64 words = bytes / 16;
    i64 i = lane;
    for (; i + 3 * lanes < words; i += 4 * lanes) {
      const uint4 a = s[i], b = s[i + lanes], c = s[i + 2 * lanes], e = s[i + 3 * lanes];
      d[i] = a;
      d[i + lanes] = b;
      d[i + 2 * lanes] = c;
      d[i + 3 * lanes] = e;
    }
    for (; i < words; i += lanes) d[i] = s[i];
  } else if ((((u64)dst | (u64)src | (u64)bytes) & 3) == 0) {
    for (i64 i = lane; i < bytes / 4; i += lanes) ((u32*)dst)[i] = ((const u32*)src)[i];
  } else {
    for (i64 i = lane; i < bytes; i += lanes) dst[i] = src[i];
  }
}

// A group of threads per entry (t, k), the grid striding over the call's entries: its send row (a
// new route: where its chunk's entries of its bucket start + its rank among them), its x row
// there, and its metadata: expanded, the entry's weight; compact, the token's local expert ids on
// that rank (-1 elsewhere) and their weights (0 elsewhere). A group is MT_GROUP threads, or up to
// a block where the grid has threads to spare (a few tokens: a row's round trips to memory are its
// copy's latency); one thread where the row is not copied but named (rowOf). Block 0 first sets the exchange's outSplitsOffsets to -1 (the gate of every
// kernel after it), which saves a memset before it.
extern "C" __global__ void __launch_bounds__(MT_THREADS) mt_gather(const GatherArgs p) {
  const i64 K = p.topk, E = p.expertsPerRank;
  if (blockIdx.x == 0)
    for (i64 i = threadIdx.x; i < 2 * p.buckets; i += blockDim.x) ((i64*)p.oso)[i] = -1;
  const i64 n = *(const i64*)p.routeTokens * K, threads = (i64)gridDim.x * blockDim.x;
  // Writing a row's number (rowOf) is one thread's work: a group there left 31 threads in 32 idle
  // and each thread eight entries in turn, four round trips each, at 4096 tokens (docs/perf.md).
  int lanes = p.rowOf ? 1 : MT_GROUP;
  while (!p.rowOf && 2 * lanes <= (int)blockDim.x && 2 * lanes * n <= threads) lanes *= 2;
  const int lane = threadIdx.x & (lanes - 1);
  int* slot = (int*)p.slot;
  const float* w = (const float*)p.weights;
  const i64 groups = threads / lanes;
  for (i64 g = ((i64)blockIdx.x * blockDim.x + threadIdx.x) / lanes; g < n; g += groups) {
    const i64 t = g / K;
    i64 pos;
    if (p.place) {
      const int l = ((const int*)p.local)[g];
      if (l < 0) {
        if (lane == 0) slot[g] = -1;
        continue;
      }
      const i64 id = mt_idx(p.topkIdx, g, p.idx64);
      const i64 b = p.compact ? id / E : id;
      pos = ((const int*)p.hist)[(t / p.chunkTokens) * p.buckets + b] + l;
      if (lane == 0) slot[g] = (int)pos;
    } else {
      pos = slot[g];
      if (pos < 0) continue;
    }
    if (p.rowOf) {
      if (lane == 0) ((int*)p.rowOf)[pos] = (int)t;
    } else {
      mt_copy_row((u8*)p.send + pos * p.rowBytes, (const u8*)p.x + t * p.rowBytes, p.rowBytes, lane, lanes);
    }
    if (!p.sendMeta) continue;
    u8* meta = (u8*)p.sendMeta + pos * p.metaBytes;
    if (!p.compact) {
      if (lane == 0) *(float*)meta = w ? w[g] : 0.f;
      continue;
    }
    const i64 id = mt_idx(p.topkIdx, g, p.idx64);
    const i64 dst = id >= 0 && id < p.experts ? id / E : -1;
    for (i64 k = lane; k < K; k += lanes) {
      const i64 o = mt_idx(p.topkIdx, t * K + k, p.idx64);
      const bool here = dst >= 0 && o >= 0 && o < p.experts && o / E == dst;
      ((int*)meta)[k] = here ? (int)(o - dst * E) : -1;
      ((float*)meta)[K + k] = here && w ? w[t * K + k] : 0.f;
    }
  }
}

// --- a small routing in one block ---------------------------------------------------------------

// Entries (token, k) mt_route_gather takes at most (128 tokens of top-8 fit twice over), and
// buckets (its warps' counts are in shared memory: 8 x 512 ints).
#define MT_SMALL_ENTRIES 2048
#define MT_SMALL_BUCKETS 512
#define MT_WARPS (MT_THREADS / 32)

#ifdef A2AV_PROBE_CLOCKS
__device__ unsigned mt_rg_launches;
#endif

// The routing and the gather of a new routing of at most MT_SMALL_ENTRIES entries (tokenCap ·
// topk) and MT_SMALL_BUCKETS buckets, in one block, for the latency of small calls: mt_route then
// mt_gather wait on global memory a dozen times one after another (9.6 µs of a one-token dispatch
// on two H200s, 18 µs at 128 tokens). Every load goes out at once (the count, every entry the
// call's buffers hold, their weights); the rest is in shared memory, the same stable counting sort
// as mt_route's with a warp in place of its chunks: warp w ranks the entries of its slice of the
// call's entries, 32 at a time in order, and counts them per bucket; a scan of the counts, bucket
// by bucket and warp by warp, gives where each warp's entries of a bucket start. (A bitonic sort of
// (bucket, entry) keys took 15,500 cycles at 128 tokens, 280 a stage.) Writes only what the steps
// after it read: inSplits, the slots, rowOf (or the rows, where the host allows a copy: few bytes),
// the metadata, routeTokens, and the exchange's outSplitsOffsets set to -1. Bad ids and counts as
// mt_route leaves them. Launched with MT_THREADS threads.
extern "C" __global__ void __launch_bounds__(MT_THREADS) mt_route_gather(const RouteGatherArgs p) {
  __shared__ int ids[MT_SMALL_ENTRIES];   // expert ids; -1 none, -2 not an id
  __shared__ float wt[MT_SMALL_ENTRIES];
  __shared__ int place[MT_SMALL_ENTRIES]; // bucket << 16 | rank among its warp's entries of it; -1 nowhere
  __shared__ int count[MT_WARPS][MT_SMALL_BUCKETS];  // then where each warp's entries of a bucket start
  __shared__ int part[MT_THREADS];
  __shared__ u64 bad;
  PROBE_CLOCKS;
  PROBE_CLOCK(0);
  const int tid = threadIdx.x, lane = tid & 31, warp = tid / 32;
  // Everything here fits 32 bits (entries <= MT_SMALL_ENTRIES): no 64-bit divisions.
  const int K = (int)p.topk, NB = (int)p.buckets, E = (int)p.expertsPerRank, cap = (int)(p.tokenCap * p.topk);
  const i64 N = p.experts;
  const float* w = (const float*)p.weights;
  // Every load at once: a thread's entries in registers first (storing each before the next load
  // waited a round trip per entry).
  const i64 T = mt_tokens(p.numTokens, p.tokens, p.tokenCap);
  i64 idv[MT_SMALL_ENTRIES / MT_THREADS];
  float wv[MT_SMALL_ENTRIES / MT_THREADS];
#pragma unroll
  for (int j = 0; j < MT_SMALL_ENTRIES / MT_THREADS; j++) {
    const int g = tid + j * MT_THREADS;
    idv[j] = g < cap ? mt_idx(p.topkIdx, g, p.idx64) : -1;
    wv[j] = w && g < cap ? w[g] : 0.f;
  }
#pragma unroll
  for (int j = 0; j < MT_SMALL_ENTRIES / MT_THREADS; j++) {
    const int g = tid + j * MT_THREADS;
    if (g >= cap) break;
    ids[g] = idv[j] >= -1 && idv[j] < N ? (int)idv[j] : -2;
    wt[g] = wv[j];
  }
  for (int i = tid; i < 2 * NB; i += MT_THREADS) ((i64*)p.oso)[i] = -1;
  for (int i = tid; i < MT_WARPS * MT_SMALL_BUCKETS; i += MT_THREADS) (&count[0][0])[i] = 0;
  if (tid == 0) bad = 0;
  __syncthreads();
  PROBE_CLOCK(1);
  const int n = T < 0 ? 0 : (int)T * K;
  // Each entry's bucket (compact: its rank, for the first of the token's ids on that rank).
  int* slot = (int*)p.slot;
  for (int g = tid; g < n; g += MT_THREADS) {
    const int id = ids[g];
    int b = id;
    if (id == -2) atomicMax(&bad, (1ull << 62) - (u64)g);
    if (id >= 0 && p.compact) {
      b = id / E;
      // An earlier id of the token on rank b (a range test: a division a test was slow).
      for (int j = g - g % K, lo = b * E, hi = lo + E; j < g; j++)
        if (ids[j] >= lo && ids[j] < hi) b = -1;
    }
    place[g] = b < 0 ? -1 : b << 16;
    if (b < 0) slot[g] = -1;
  }
  __syncthreads();
  PROBE_CLOCK(2);
  // Warp w ranks the entries of its slice, 32 at a time in order (the same number of rounds in
  // every warp: the host emulation's __syncwarp is the block's barrier).
  const int slice = (n + MT_WARPS * 32 - 1) / (MT_WARPS * 32) * 32;
  for (int r = 0; r < slice; r += 32) {
    const int base = warp * slice + r, g = base + lane;
    const int b = g < n && place[g] >= 0 ? place[g] >> 16 : -1;
    // The lanes of the same bucket (an unrolled compare of the 32 took 4,400 cycles at 128 tokens).
    const unsigned peers = __match_any_sync(0xffffffffu, b);
    const int rank = __popc(peers & ((1u << lane) - 1)), same = __popc(peers);
    const int at = b >= 0 ? count[warp][b] + rank : 0;
    __syncwarp();
    if (b >= 0) place[g] = b << 16 | at;
    if (b >= 0 && rank == 0) count[warp][b] += same;
    __syncwarp();
  }
  __syncthreads();
  PROBE_CLOCK(3);
  // Buckets' totals (a thread's run of consecutive buckets), their scan across threads, then each
  // warp's start within its bucket.
  const int per = (NB + MT_THREADS - 1) / MT_THREADS, b0 = tid * per < NB ? tid * per : NB, b1 = b0 + per < NB ? b0 + per : NB;
  int mine = 0;
  for (int b = b0; b < b1; b++)
    for (int v = 0; v < MT_WARPS; v++) mine += count[v][b];
  int run = mt_block_scan(part, mine, MT_THREADS);
  for (int b = b0; b < b1; b++) {
    i64 split = 0;
    for (int v = 0; v < MT_WARPS; v++) {
      const int c = count[v][b];
      count[v][b] = run;
      run += c;
      split += c;
    }
    if (b == 0 && T < 0) split = MT_BAD_TOKEN_COUNT;
    else if (b == 0 && bad != 0) split = -1 - (i64)((1ull << 62) - bad);
    ((i64*)p.inSplits)[b] = split;
  }
  if (tid == 0) *(i64*)p.routeTokens = T < 0 ? 0 : T;
  __syncthreads();
  PROBE_CLOCK(4);
  // Each entry's send row: where its warp's entries of its bucket start, plus its rank there.
  for (int g = tid; g < n; g += MT_THREADS) {
    const int pl = place[g];
    if (pl < 0) continue;
    const int i = count[g / slice][pl >> 16] + (pl & 0xffff), t = g / K;
    slot[g] = i;
    if (p.rowOf) ((int*)p.rowOf)[i] = t;
    if (p.sendMeta && !p.compact) *(float*)((u8*)p.sendMeta + (i64)i * p.metaBytes) = w ? wt[g] : 0.f;
  }
  // Compact metadata: the token's local ids on the row's rank and their weights, a thread per
  // (entry, k). Clocks at 128 tokens, DeepSeek-V3's shape on 2 ranks (H200): a thread a row 10,900
  // cycles, this 16,700, a group of K lanes a row 24,300; the dispatch took 41.5, 40.6 and 42.6 µs.
  if (p.sendMeta && p.compact) {
    for (int q = tid; q < n * K; q += MT_THREADS) {
      const int g = q / K, j = q - g * K, pl = place[g];
      if (pl < 0) continue;
      const int dst = pl >> 16, i = count[g / slice][dst] + (pl & 0xffff), o = ids[(g - g % K) + j];
      const bool here = o >= dst * E && o < dst * E + E;
      u8* meta = (u8*)p.sendMeta + (i64)i * p.metaBytes;
      ((int*)meta)[j] = here ? o - dst * E : -1;
      ((float*)meta)[K + j] = here && w ? wt[(g - g % K) + j] : 0.f;
    }
  }
  PROBE_CLOCK(5);
#ifdef A2AV_PROBE_CLOCKS
  if (PROBE_CLOCKS_DUE(mt_rg_launches))
    printf("mt_route_gather n=%d buckets=%d compact=%d cycles: loads %lld buckets %lld ranks %lld scan %lld writes %lld\n", n, NB, (int)p.compact,
           PROBE_CYCLES(1), PROBE_CYCLES(2), PROBE_CYCLES(3), PROBE_CYCLES(4), PROBE_CYCLES(5));
#endif
  if (p.rowOf) return;
  // The rows themselves (the host picks this kernel for a copy of a few rows only): a warp each.
  for (int g = warp; g < n; g += MT_WARPS) {
    const int pl = place[g];
    if (pl < 0) continue;
    const int i = count[g / slice][pl >> 16] + (pl & 0xffff);
    mt_copy_row((u8*)p.send + (i64)i * p.rowBytes, (const u8*)p.x + (i64)(g / K) * p.rowBytes, p.rowBytes, lane, 32);
  }
}

// --- what a rank received -----------------------------------------------------------------------

// `bytes` zeros at dst by `lanes` threads: 16-byte words between the unaligned ends (an empty
// expert's padding row is 14 KiB in DeepSeek-V3's shape, and most experts are empty at 1 token).
__device__ void mt_zero(u8* dst, i64 bytes, int lane, int lanes) {
  const i64 head = ((16 - ((u64)dst & 15)) & 15) < bytes ? ((16 - ((u64)dst & 15)) & 15) : bytes;
  const i64 words = (bytes - head) / 16;
  for (i64 i = lane; i < head; i += lanes) dst[i] = 0;
  uint4 zero;
  zero.x = zero.y = zero.z = zero.w = 0;
  for (i64 i = lane; i < words; i += lanes) ((uint4*)(dst + head))[i] = zero;
  for (i64 i = head + 16 * words + lane; i < bytes; i += lanes) dst[i] = 0;
}

// Expanded: one block per local expert: its count and start, its padding rows zeroed, its rows'
// weights (padding 0). Compact: the counts zeroed for mt_dispatch_unpack. Both: the rows written.
extern "C" __global__ void __launch_bounds__(MT_THREADS) mt_dispatch_layout(const LayoutArgs p) {
  const i64* oso = (const i64*)p.oso;
  if (oso[0] < 0) return;
  const i64 W = p.world, E = p.expertsPerRank;
  i64* counts = (i64*)p.counts;
  if (p.compact) {
    for (i64 e = threadIdx.x; e < E; e += blockDim.x) counts[e] = 0;
    if (p.numRecvRows && threadIdx.x == 0) {
      i64 rows = 0;
      for (i64 src = 0; src < W; src++) rows += oso[src];
      *(i64*)p.numRecvRows = rows;
    }
    return;
  }
  const i64 e = blockIdx.x;
  i64 cnt = 0;
  for (i64 src = 0; src < W; src++) cnt += oso[e * W + src];
  const i64 start = oso[W * E + e * W];
  const i64 span = cnt == 0 ? p.align : (cnt + p.align - 1) / p.align * p.align;
  if (threadIdx.x == 0) {
    counts[e] = cnt;
    if (p.offsets) ((i64*)p.offsets)[e] = start;
    // Experts' blocks follow one another: the last one's end is the end of what was written.
    if (p.numRecvRows && e == E - 1) *(i64*)p.numRecvRows = start + span;
  }
  mt_zero((u8*)p.recvX + (start + cnt) * p.rowBytes, (span - cnt) * p.rowBytes, threadIdx.x, blockDim.x);
  if (!p.recvWeights) return;
  float* rw = (float*)p.recvWeights + start;
  const u8* meta = (const u8*)p.recvMeta + start * p.metaBytes;
  for (i64 r = threadIdx.x; r < span; r += blockDim.x) rw[r] = r < cnt ? *(const float*)(meta + r * p.metaBytes) : 0.f;
}

// Compact: every received token's local expert ids and weights out of its metadata row, and the
// count of tokens per local expert (integer atomics: the same counts in any order). A block counts
// in shared memory and adds its counts once: the counts are E words hit by every received row, and
// while the other ranks on the GPU still copy, atomics on them wait behind that traffic (at W = 8
// on one H200, 4096 tokens, this step cost 60 µs of a dispatch against 4 µs alone; docs/perf.md).
#define MT_UNPACK_EXPERTS 1024
extern "C" __global__ void __launch_bounds__(MT_THREADS) mt_dispatch_unpack(const LayoutArgs p) {
  __shared__ unsigned count[MT_UNPACK_EXPERTS];
  const i64* oso = (const i64*)p.oso;
  if (oso[0] < 0) return;
  const i64 K = p.topk, E = p.expertsPerRank;
  const bool local = E <= MT_UNPACK_EXPERTS;
  if (local)
    for (i64 e = threadIdx.x; e < E; e += blockDim.x) count[e] = 0;
  __syncthreads();
  i64 rows = 0;
  for (i64 src = 0; src < p.world; src++) rows += oso[src];
  for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < rows * K; i += (i64)gridDim.x * blockDim.x) {
    const u8* meta = (const u8*)p.recvMeta + (i / K) * p.metaBytes;
    const int id = ((const int*)meta)[i % K];
    if (p.recvIdx) {
      if (p.idx64) ((i64*)p.recvIdx)[i] = id;
      else ((int*)p.recvIdx)[i] = id;
    }
    if (p.recvWeights) ((float*)p.recvWeights)[i] = ((const float*)meta)[K + i % K];
#ifndef A2AV_PROBE_UNPACK_NO_COUNT  // a probe: the step without its counts (wrong counts)
    if (id >= 0 && id < E) {
      if (local) atomicAdd(count + id, 1u);
      else atomicAdd((u64*)p.counts + id, 1ull);
    }
#endif
  }
  if (!local) return;
  __syncthreads();
  for (i64 e = threadIdx.x; e < E; e += blockDim.x)
    if (count[e] != 0) atomicAdd((u64*)p.counts + e, (u64)count[e]);
}

// --- combine ------------------------------------------------------------------------------------

// bf16 bits of an f32 (src/collectives/reduce.ts f32BitsToBf16): nearest-even, a NaN kept quiet.
__device__ __forceinline__ u32 mt_bf16_round(float f) {
  const u32 bits = __float_as_uint(f);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return (bits >> 16) | 0x40u;
  return (bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16;
}

// f16 bits of an f32 (src/moe/dtype.ts f32ToF16Bits): nearest-even, overflow to infinity,
// subnormals rounded at 2^-24, a NaN kept quiet.
__device__ __forceinline__ u32 mt_f16_round(float f) {
  const u32 bits = __float_as_uint(f);
  const u32 sign = (bits >> 16) & 0x8000u, a = bits & 0x7fffffffu;
  if (a > 0x7f800000u) return sign | 0x7e00u;
  if (a >= 0x477ff000u) return sign | 0x7c00u;
  if (a >= 0x38800000u) return sign | ((a + 0xfffu + ((a >> 13) & 1u) - 0x38000000u) >> 13);
  const u32 s = 126u - (a >> 23);
  if (s > 24u) return sign;
  const u32 m = (a & 0x7fffffu) | 0x800000u, q = m >> s, rem = m & ((1u << s) - 1u), half = 1u << (s - 1u);
  return sign | (q + (rem > half || (rem == half && (q & 1u)) ? 1u : 0u));
}

__device__ __forceinline__ float mt_f16_value(u32 h) {
  const u32 sign = (h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
  if (e == 31u) return __uint_as_float(sign | 0x7f800000u | (m << 13));
  if (e == 0u) return __uint_as_float(__float_as_uint((float)m * 5.9604644775390625e-8f) | sign);
  return __uint_as_float(sign | ((e + 112u) << 23) | (m << 13));
}

__device__ __forceinline__ float mt_load(u64 base, i64 i, i64 dtype) {
  if (dtype == MT_DTYPE_F32) return ((const float*)base)[i];
  const u32 h = ((const unsigned short*)base)[i];
  return dtype == MT_DTYPE_BF16 ? __uint_as_float(h << 16) : mt_f16_value(h);
}

__device__ __forceinline__ void mt_store(u64 base, i64 i, float v, i64 dtype) {
  if (dtype == MT_DTYPE_F32) ((float*)base)[i] = v;
  else ((unsigned short*)base)[i] = (unsigned short)(dtype == MT_DTYPE_BF16 ? mt_bf16_round(v) : mt_f16_round(v));
}

// V elements of type DT at element i of base, as loaded: one 16-byte word where V > 1, else the
// element's value. Kept raw until it is added, so a batch of terms holds 4 registers a term, not V.
template <int DT, int V>
struct MtRaw {
  uint4 q;
};
template <int DT>
struct MtRaw<DT, 1> {
  float f;
};
template <int DT, int V>
__device__ __forceinline__ MtRaw<DT, V> mt_read_raw(u64 base, i64 i) {
  MtRaw<DT, V> r;
  if constexpr (V == 1) r.f = mt_load(base, i, DT);
  else r.q = *(const uint4*)((const u8*)base + i * (DT == MT_DTYPE_F32 ? 4 : 2));
  return r;
}
template <int DT, int V>
__device__ __forceinline__ void mt_unpack(const MtRaw<DT, V>& r, float* v) {
  if constexpr (V == 1) {
    v[0] = r.f;
  } else {
    const u32 u[4] = {r.q.x, r.q.y, r.q.z, r.q.w};
#pragma unroll
    for (int j = 0; j < V; j++) {
      const u32 h = (u[j / 2] >> (16 * (j % 2))) & 0xffffu;
      v[j] = DT == MT_DTYPE_F32 ? __uint_as_float(u[j % 4]) : DT == MT_DTYPE_BF16 ? __uint_as_float(h << 16) : mt_f16_value(h);
    }
  }
}
template <int DT, int V>
__device__ __forceinline__ void mt_read(u64 base, i64 i, float* v) {
  mt_unpack<DT, V>(mt_read_raw<DT, V>(base, i), v);
}

template <int DT, int V>
__device__ __forceinline__ void mt_write(u64 base, i64 i, const float* v) {
  if (V == 1) {
    mt_store(base, i, v[0], DT);
    return;
  }
  u32 u[4] = {0, 0, 0, 0};
#pragma unroll
  for (int j = 0; j < V; j++) {
    if (DT == MT_DTYPE_F32) u[j % 4] = __float_as_uint(v[j]);
    else u[j / 2] |= ((DT == MT_DTYPE_BF16 ? mt_bf16_round(v[j]) : mt_f16_round(v[j])) & 0xffffu) << (16 * (j % 2));
  }
  uint4 q;
  q.x = u[0];
  q.y = u[1];
  q.z = u[2];
  q.w = u[3];
  *(uint4*)((u8*)base + i * (DT == MT_DTYPE_F32 ? 4 : 2)) = q;
}

// Terms a thread loads before it adds them: their slots, then their loads, in flight together,
// each term kept as its raw 16-byte word until added. The kernel waits on memory, so loads in
// flight decide, within the four blocks an SM that 64 registers leave. Measured at W = 8 on one
// H200, DeepSeek-V3's combine (docs/perf.md): 4 a batch at 64 registers 8-27% faster than 2 a
// batch (56); 4 at 80 registers (three blocks an SM) and 8 (two) slower. A probe may set others
// (A2AV_PROBE_REDUCE_BATCH=n, A2AV_PROBE_REDUCE_MIN_BLOCKS=n).
#ifdef A2AV_PROBE_REDUCE_BATCH
#define MT_REDUCE_BATCH A2AV_PROBE_REDUCE_BATCH
#else
#define MT_REDUCE_BATCH 4
#endif

// out[t][h] = the terms of token t in top-k order, w[t][k] * y (rounded to f32) or y, then the
// bias: the first as it is, each next one added in f32; rounded once to the output type. A token
// with no term and no bias gets 0. V consecutive elements a thread (16 bytes where rows allow).
// Where send row s's term lies: a row of `back` (the exchange brought it), or, pulling, the row of
// its expert rank's y where the dispatch put it (MtPull: the buckets' starts in send order and
// where each landed, staged by the block).
#define MT_PULL_BUCKETS 1024
struct MtPull {
  i64 start[MT_PULL_BUCKETS];  // send row where bucket b starts
  i64 base[MT_PULL_BUCKETS];   // its row in the receiver's y, less start[b]
  u64 y[MT_PULL_BUCKETS];      // the receiver's y, by bucket
  int n;
};
template <bool Pull>
__device__ __forceinline__ u64 mt_term_row(const ReduceArgs& p, const MtPull* pull, int s, i64& row) {
  if (!Pull) {
    row = s;
    return p.recv;
  }
  int lo = 0, hi = pull->n - 1;  // the last bucket starting at or before s (empty ones share a start)
  while (lo < hi) {
    const int mid = (lo + hi + 1) >> 1;
    if (pull->start[mid] <= s) lo = mid;
    else hi = mid - 1;
  }
  row = pull->base[lo] + s;
  return pull->y[lo];
}

template <int DT, int V, bool Pull>
__device__ void mt_reduce(const ReduceArgs& p, i64 T, const MtPull* pull) {
  const i64 H = p.hidden, K = p.topk, n = T * H / V;
  const int* slot = (const int*)p.slot;
  const float* w = (const float*)p.weights;
  for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (i64)gridDim.x * blockDim.x) {
    const i64 t = i * V / H, h = i * V - t * H;
    float acc[V];
#pragma unroll
    for (int e = 0; e < V; e++) acc[e] = 0.f;
    bool any = false;
    for (i64 k0 = 0; k0 < K; k0 += MT_REDUCE_BATCH) {
      // The batch's slots and weights, then its rows, then its terms: each kind of load in flight
      // together rather than a chain of slot, row and term a term.
      int s[MT_REDUCE_BATCH];
      float wk[MT_REDUCE_BATCH];
#pragma unroll
      for (int j = 0; j < MT_REDUCE_BATCH; j++) {
        s[j] = k0 + j < K ? slot[t * K + k0 + j] : -1;
        wk[j] = w && k0 + j < K ? w[t * K + k0 + j] : 0.f;
      }
      MtRaw<DT, V> raw[MT_REDUCE_BATCH];
#pragma unroll
      for (int j = 0; j < MT_REDUCE_BATCH; j++) {
        if (s[j] >= 0) {
          i64 row;
          const u64 base = mt_term_row<Pull>(p, pull, s[j], row);
          raw[j] = mt_read_raw<DT, V>(base, row * H + h);
        }
      }
#pragma unroll
      for (int j = 0; j < MT_REDUCE_BATCH; j++) {
        if (s[j] < 0) continue;
        float v[V];
        mt_unpack<DT, V>(raw[j], v);
#pragma unroll
        for (int e = 0; e < V; e++) {
          const float x = w ? __fmul_rn(wk[j], v[e]) : v[e];
          acc[e] = any ? __fadd_rn(acc[e], x) : x;
        }
        any = true;
      }
    }
    if (p.bias) {
      float b[V];
      mt_read<DT, V>(p.bias, i * V, b);
#pragma unroll
      for (int e = 0; e < V; e++) acc[e] = any ? __fadd_rn(acc[e], b[e]) : b[e];
    }
    mt_write<DT, V>(p.out, i * V, acc);
  }
}

// The reduction, then the gate set back to -1 for the next combine's exchange by the last block
// (every block has read it by then), which saves a memset before each combine.
// Blocks an SM the reduce kernels keep (64 registers a thread; see MT_REDUCE_BATCH).
#ifdef A2AV_PROBE_REDUCE_MIN_BLOCKS
#define MT_REDUCE_MIN_BLOCKS A2AV_PROBE_REDUCE_MIN_BLOCKS
#else
#define MT_REDUCE_MIN_BLOCKS 4
#endif
// Whether a thread takes 16 bytes of a row: rows of whole 16-byte words, every base (or-ed) aligned.
__device__ __forceinline__ bool mt_wide(const ReduceArgs& p, u64 bases) {
  return (p.hidden * (p.dtype == MT_DTYPE_F32 ? 4 : 2)) % 16 == 0 && (bases & 15) == 0;
}

template <bool Pull>
__device__ __forceinline__ void mt_combine_run(const ReduceArgs& p, const MtPull* pull, bool wide) {
  i64* gate = (i64*)p.gate;
  const i64 T = *(const i64*)p.routeTokens;
  if (p.dtype == MT_DTYPE_F32) wide ? mt_reduce<MT_DTYPE_F32, 4, Pull>(p, T, pull) : mt_reduce<MT_DTYPE_F32, 1, Pull>(p, T, pull);
  else if (p.dtype == MT_DTYPE_BF16) wide ? mt_reduce<MT_DTYPE_BF16, 8, Pull>(p, T, pull) : mt_reduce<MT_DTYPE_BF16, 1, Pull>(p, T, pull);
  else wide ? mt_reduce<MT_DTYPE_F16, 8, Pull>(p, T, pull) : mt_reduce<MT_DTYPE_F16, 1, Pull>(p, T, pull);
  if (mt_last_block(p.ticket, gridDim.x)) {
    for (i64 i = threadIdx.x; i < 2 * p.buckets; i += blockDim.x) gate[i] = -1;
    if (threadIdx.x == 0) *(u64*)p.ticket = 0;
  }
}

extern "C" __global__ void __launch_bounds__(MT_THREADS, MT_REDUCE_MIN_BLOCKS) mt_combine_reduce(const ReduceArgs p) {
  if (((const i64*)p.gate)[0] < 0) return;
  mt_combine_run<false>(p, nullptr, mt_wide(p, p.recv | p.out | p.bias));
}

// The combine without the exchange's copy: between the exchange's agreement (every rank has reached
// its combine, so its y is written) and its completion (no rank goes on, and writes its y again,
// before every rank has read it), each term is read from its expert rank's y where the dispatch
// put the row, and reduced as mt_combine_reduce does, in the same order: the same bits, each byte
// of y moved once instead of twice. The host takes it where y is symmetric memory and the buckets
// fit MT_PULL_BUCKETS (moe/compute.ts).
extern "C" __global__ void __launch_bounds__(MT_THREADS, MT_REDUCE_MIN_BLOCKS) mt_combine_pull(const ReduceArgs p) {
  __shared__ MtPull pull;
  __shared__ i64 part[MT_THREADS];
  if (((const i64*)p.gate)[0] < 0) return;
  const int n = (int)p.buckets, W = (int)p.world, E = (int)p.exchangeExperts, me = (int)p.rank;
  const i64* splits = (const i64*)p.inSplits;
  const u64* yPeers = (const u64*)p.yPeers;
  const u64* osoPeers = (const u64*)p.osoPeers;
  // Bucket b = (peer, e): my rows for expert e of peer, which landed at the peer's routeOso[1][e*W + me].
  i64 carry = 0;
  for (int b0 = 0; b0 < n; b0 += MT_THREADS) {
    const int b = b0 + threadIdx.x;
    const i64 rows = b < n ? splits[b] : 0;
    const i64 before = mt_block_scan(part, rows, MT_THREADS) + carry;
    if (b < n) {
      const int peer = b / E, e = b - (b / E) * E;
      const i64 landed = ((const i64*)osoPeers[peer])[(i64)n + (i64)e * W + me];
      pull.start[b] = before;
      pull.base[b] = landed - before;
      pull.y[b] = yPeers[peer];
    }
    carry += part[MT_THREADS - 1];
    __syncthreads();
  }
  if (threadIdx.x == 0) pull.n = n;
  __syncthreads();
  u64 ys = 0;
  for (int q = 0; q < W; q++) ys |= yPeers[q];
  mt_combine_run<true>(p, &pull, mt_wide(p, ys | p.out | p.bias));
}
