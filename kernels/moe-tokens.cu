// Token-level MoE around the 2-D exchange (src/moe/): the routing of top-k expert ids into the
// dispatch's rank-major order, the gather of rows into that order, the layout of what a rank
// received, and combine's weighted reduction. src/moe/host-compute.ts computes the same bits on
// the host (the cpu backend), so the two are one definition:
//   - routing is a stable counting sort: within a bucket (expanded: an expert; compact: a rank),
//     entries keep (token, k) order, so the same topkIdx always gives the same layout;
//   - a rejected call writes nothing: the exchange leaves its outSplitsOffsets as it was, the host
//     fills them with -1 before each call, and every kernel after the exchange reads them first;
//   - combine sums in top-k order in f32 with separate multiply and add (__fmul_rn, __fadd_rn: no
//     FMA contraction, which the host cannot reproduce), rounding once to the output type.
// Each kernel takes one struct of 8-byte fields, mirrored field by field in src/moe/kernel-args.ts
// (tests/moe-tokens.test.ts compares the names).
typedef unsigned char u8;
typedef unsigned int u32;
typedef long long i64;
typedef unsigned long long u64;

#define MT_THREADS 256
#define MT_SCAN_THREADS 512
// Threads that move one (token, k) row in mt_gather.
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
  u64 hist;         // int32 [chunks][buckets], zero before mt_route_count; exclusive prefix after mt_route_scan
  u64 local;        // int32 [tokenCap][topk]: an entry's rank among its chunk's entries of its bucket; -1 none
  u64 starts;       // int64 [buckets]: where each bucket starts in the send order
  u64 inSplits;     // int64 [buckets]: the exchange's splits
  u64 fault;        // u64 [1], zero before mt_route_count: 2^62 - the lowest bad entry, 0 when none
  u64 routeTokens;  // int64 [1]: the token count the route was built with
  i64 tokens;
  i64 tokenCap;
  i64 topk;
  i64 idx64;
  i64 experts;          // every rank's experts together
  i64 expertsPerRank;
  i64 compact;
  i64 buckets;
  i64 chunks;
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
  u64 starts;
  u64 routeTokens;
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
static_assert(sizeof(GatherArgs) == 20 * 8, "GatherArgs: 8-byte fields");

struct LayoutArgs {
  u64 oso;          // int64 [2][buckets]: the dispatch's outSplitsOffsets; -1 when refused
  u64 recvX;        // [recvRows][rowBytes]
  u64 recvMeta;     // [recvRows][metaBytes]
  u64 recvIdx;      // compact: int32 or int64 [rows][topk], or 0
  u64 recvWeights;  // expanded: f32 [rows]; compact: f32 [rows][topk]; or 0
  u64 counts;       // int64 [expertsPerRank]
  u64 offsets;      // expanded: int64 [expertsPerRank], or 0
  i64 world;
  i64 expertsPerRank;
  i64 compact;
  i64 align;
  i64 rowBytes;
  i64 topk;
  i64 idx64;
  i64 metaBytes;
};
static_assert(sizeof(LayoutArgs) == 15 * 8, "LayoutArgs: 8-byte fields");

struct ReduceArgs {
  u64 gate;         // int64: combine's outSplitsOffsets; -1 when refused
  u64 recv;         // [sendRows][hidden] of dtype: the rows back, in send order
  u64 slot;
  u64 routeTokens;
  u64 weights;      // f32 [tokenCap][topk], or 0
  u64 bias;         // [tokenCap][hidden] of dtype, or 0
  u64 out;          // [tokenCap][hidden] of dtype
  i64 topk;
  i64 hidden;
  i64 dtype;
};
static_assert(sizeof(ReduceArgs) == 10 * 8, "ReduceArgs: 8-byte fields");

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

// One thread per chunk of tokens, through them in order: the chunk's count per bucket and each
// entry's rank in it. Sequential within a chunk, so the order needs no atomics.
extern "C" __global__ void __launch_bounds__(MT_THREADS) mt_route_count(const RouteArgs p) {
  const i64 j = (i64)blockIdx.x * blockDim.x + threadIdx.x;
  if (j >= p.chunks) return;
  const i64 T = mt_tokens(p.numTokens, p.tokens, p.tokenCap);
  int* hist = (int*)p.hist + j * p.buckets;
  int* local = (int*)p.local;
  const i64 end = T < (j + 1) * p.chunkTokens ? T : (j + 1) * p.chunkTokens;
  for (i64 t = j * p.chunkTokens; t < end; t++) {
    for (i64 k = 0; k < p.topk; k++) {
      const i64 b = mt_bucket(p.topkIdx, t, k, p.topk, p.idx64, p.experts, p.expertsPerRank, p.compact);
      if (b == -2) atomicMax((u64*)p.fault, (1ull << 62) - (u64)(t * p.topk + k));
      local[t * p.topk + k] = b >= 0 ? hist[b]++ : -1;
    }
  }
}

// One block: each bucket's chunks in order (where each chunk's entries start within the bucket),
// the buckets' totals (the splits), and where each bucket starts (an exclusive scan). A bad id or
// token count becomes a negative split, which every rank's exchange refuses.
extern "C" __global__ void __launch_bounds__(MT_SCAN_THREADS) mt_route_scan(const RouteArgs p) {
  __shared__ i64 part[MT_SCAN_THREADS];
  const int tid = threadIdx.x, nt = blockDim.x;
  const i64 NB = p.buckets;
  int* hist = (int*)p.hist;
  i64* starts = (i64*)p.starts;
  i64* splits = (i64*)p.inSplits;
  for (i64 b = tid; b < NB; b += nt) {
    i64 run = 0;
    for (i64 j = 0; j < p.chunks; j++) {
      const int c = hist[j * NB + b];
      hist[j * NB + b] = (int)run;
      run += c;
    }
    starts[b] = run;
    splits[b] = run;
  }
  __syncthreads();
  const i64 seg = (NB + nt - 1) / nt;
  const i64 lo = tid * seg < NB ? tid * seg : NB, hi = lo + seg < NB ? lo + seg : NB;
  i64 sum = 0;
  for (i64 b = lo; b < hi; b++) sum += starts[b];
  part[tid] = sum;
  __syncthreads();
  for (int d = 1; d < nt; d *= 2) {
    const i64 add = tid >= d ? part[tid - d] : 0;
    __syncthreads();
    part[tid] += add;
    __syncthreads();
  }
  i64 run = part[tid] - sum;
  for (i64 b = lo; b < hi; b++) {
    const i64 c = starts[b];
    starts[b] = run;
    run += c;
  }
  if (tid == 0) {
    const i64 T = mt_tokens(p.numTokens, p.tokens, p.tokenCap);
    const u64 fault = *(u64*)p.fault;
    if (T < 0) splits[0] = MT_BAD_TOKEN_COUNT;
    else if (fault != 0) splits[0] = -1 - (i64)((1ull << 62) - fault);
    *(i64*)p.routeTokens = T < 0 ? 0 : T;
  }
}

// --- gather -------------------------------------------------------------------------------------

// `bytes` from src to dst by `lanes` threads: 16-byte words where both ends and the size allow.
__device__ void mt_copy_row(u8* dst, const u8* src, i64 bytes, int lane, int lanes) {
  if ((((u64)dst | (u64)src | (u64)bytes) & 15) == 0) {
    for (i64 i = lane; i < bytes / 16; i += lanes) ((uint4*)dst)[i] = ((const uint4*)src)[i];
  } else if ((((u64)dst | (u64)src | (u64)bytes) & 3) == 0) {
    for (i64 i = lane; i < bytes / 4; i += lanes) ((u32*)dst)[i] = ((const u32*)src)[i];
  } else {
    for (i64 i = lane; i < bytes; i += lanes) dst[i] = src[i];
  }
}

// MT_GROUP threads per entry (t, k): its send row (a new route: bucket start + chunk start + rank
// in chunk), its x row there, and its metadata: expanded, the entry's weight; compact, the
// token's local expert ids on that rank (-1 elsewhere) and their weights (0 elsewhere).
extern "C" __global__ void __launch_bounds__(MT_THREADS) mt_gather(const GatherArgs p) {
  const i64 g = ((i64)blockIdx.x * blockDim.x + threadIdx.x) / MT_GROUP;
  const int lane = threadIdx.x % MT_GROUP;
  const i64 K = p.topk, E = p.expertsPerRank;
  if (g >= *(const i64*)p.routeTokens * K) return;
  const i64 t = g / K;
  int* slot = (int*)p.slot;
  i64 pos;
  if (p.place) {
    const int l = ((const int*)p.local)[g];
    const i64 id = mt_idx(p.topkIdx, g, p.idx64);
    if (l < 0) {
      if (lane == 0) slot[g] = -1;
      return;
    }
    const i64 b = p.compact ? id / E : id;
    pos = ((const i64*)p.starts)[b] + ((const int*)p.hist)[(t / p.chunkTokens) * p.buckets + b] + l;
    if (lane == 0) slot[g] = (int)pos;
  } else {
    pos = slot[g];
    if (pos < 0) return;
  }
  mt_copy_row((u8*)p.send + pos * p.rowBytes, (const u8*)p.x + t * p.rowBytes, p.rowBytes, lane, MT_GROUP);
  if (!p.sendMeta) return;
  const float* w = (const float*)p.weights;
  u8* meta = (u8*)p.sendMeta + pos * p.metaBytes;
  if (!p.compact) {
    if (lane == 0) *(float*)meta = w ? w[g] : 0.f;
    return;
  }
  const i64 id = mt_idx(p.topkIdx, g, p.idx64);
  const i64 dst = id >= 0 && id < p.experts ? id / E : -1;
  for (i64 k = lane; k < K; k += MT_GROUP) {
    const i64 o = mt_idx(p.topkIdx, t * K + k, p.idx64);
    const bool here = dst >= 0 && o >= 0 && o < p.experts && o / E == dst;
    ((int*)meta)[k] = here ? (int)(o - dst * E) : -1;
    ((float*)meta)[K + k] = here && w ? w[t * K + k] : 0.f;
  }
}

// --- what a rank received -----------------------------------------------------------------------

// Expanded: one block per local expert: its count and start, its padding rows zeroed, its rows'
// weights (padding 0). Compact: the counts zeroed for mt_dispatch_unpack.
extern "C" __global__ void __launch_bounds__(MT_THREADS) mt_dispatch_layout(const LayoutArgs p) {
  const i64* oso = (const i64*)p.oso;
  if (oso[0] < 0) return;
  const i64 W = p.world, E = p.expertsPerRank;
  i64* counts = (i64*)p.counts;
  if (p.compact) {
    for (i64 e = threadIdx.x; e < E; e += blockDim.x) counts[e] = 0;
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
  }
  u8* pad = (u8*)p.recvX + (start + cnt) * p.rowBytes;
  for (i64 i = threadIdx.x; i < (span - cnt) * p.rowBytes; i += blockDim.x) pad[i] = 0;
  if (!p.recvWeights) return;
  float* rw = (float*)p.recvWeights + start;
  const u8* meta = (const u8*)p.recvMeta + start * p.metaBytes;
  for (i64 r = threadIdx.x; r < span; r += blockDim.x) rw[r] = r < cnt ? *(const float*)(meta + r * p.metaBytes) : 0.f;
}

// Compact: every received token's local expert ids and weights out of its metadata row, and the
// count of tokens per local expert (integer atomics: the same counts in any order).
extern "C" __global__ void __launch_bounds__(MT_THREADS) mt_dispatch_unpack(const LayoutArgs p) {
  const i64* oso = (const i64*)p.oso;
  if (oso[0] < 0) return;
  const i64 K = p.topk;
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
    if (id >= 0 && id < p.expertsPerRank) atomicAdd((u64*)p.counts + id, 1ull);
  }
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

// out[t][h] = the terms of token t in top-k order, w[t][k] * y (rounded to f32) or y, then the
// bias: the first as it is, each next one added in f32; rounded once to the output type. A token
// with no term and no bias gets 0.
extern "C" __global__ void __launch_bounds__(MT_THREADS) mt_combine_reduce(const ReduceArgs p) {
  if (((const i64*)p.gate)[0] < 0) return;
  const i64 H = p.hidden, K = p.topk;
  const i64 n = *(const i64*)p.routeTokens * H;
  const int* slot = (const int*)p.slot;
  const float* w = (const float*)p.weights;
  for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (i64)gridDim.x * blockDim.x) {
    const i64 t = i / H, h = i % H;
    float acc = 0.f;
    bool any = false;
    for (i64 k = 0; k < K; k++) {
      const int s = slot[t * K + k];
      if (s < 0) continue;
      float v = mt_load(p.recv, (i64)s * H + h, p.dtype);
      if (w) v = __fmul_rn(w[t * K + k], v);
      acc = any ? __fadd_rn(acc, v) : v;
      any = true;
    }
    if (p.bias) {
      const float b = mt_load(p.bias, i, p.dtype);
      acc = any ? __fadd_rn(acc, b) : b;
    }
    mt_store(p.out, i, acc, p.dtype);
  }
}
