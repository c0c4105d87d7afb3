// The compute of the sparse-data-dist training pipeline (src/pipeline/): synthetic batches and
// their device-side splits, embedding-bag sum pooling, the embedding update, a tiled f32 GEMM and
// the small kernels around it. src/pipeline/compute-cpu.ts computes the same bits on the host, so
// every arm and backend trains the same model to the same bits:
//   - every f32 sum runs in one fixed order with separate multiply and add (__fmul_rn, __fadd_rn:
//     no FMA contraction, which the host cannot reproduce);
//   - embedding tables hold int32 fixed point (units of 2^-PL_FIXED_SHIFT, src/pipeline/synth.ts),
//     so pooling sums integers and the scatter-add is integer atomics: both order-independent.
// Each kernel takes one struct of 8-byte fields (pointers, i64, f64 for f32 values), mirrored field
// by field in src/pipeline/compute-cuda.ts (tests/pipeline.test.ts compares the names).
typedef unsigned int u32;
typedef long long i64;
typedef unsigned long long u64;

// Tags of the synthetic streams (src/pipeline/synth.ts Tag).
#define PL_TAG_LENGTH 1
#define PL_TAG_ID 2
#define PL_TAG_DENSE 3
#define PL_TAG_LABEL 4
#define PL_TAG_TABLE 5
#define PL_TAG_WEIGHT 6
#define PL_SCAN_THREADS 256
#define PL_LOSS_THREADS 256

// --- synthetic data: murmur3's finaliser, chained (synth.ts mix/step) -------------------------

__device__ __forceinline__ u32 pl_mix(u32 h) {
  h ^= h >> 16;
  h *= 0x85ebca6bu;
  h ^= h >> 13;
  h *= 0xc2b2ae35u;
  h ^= h >> 16;
  return h;
}
__device__ __forceinline__ u32 pl_step(u32 h, u32 v) { return pl_mix(h + pl_mix(v + 0x9e3779b9u)); }
__device__ __forceinline__ u32 pl_start(u32 seed, u32 tag) { return pl_mix(seed ^ (tag * 0x9e3779b1u)); }

// Features are owned round-robin (feature f on rank f % W); a rank sends its features owner by
// owner, so send slot q is the k-th feature of owner p: f = p + k·W.
__device__ __forceinline__ int pl_owned(int features, int world, int p) { return p < features ? (features - p + world - 1) / world : 0; }
__device__ int pl_slot_feature(int q, int features, int world) {
  for (int p = 0; p < world; p++) {
    const int n = pl_owned(features, world, p);
    if (q < n) return p + q * world;
    q -= n;
  }
  return -1;
}

__device__ __forceinline__ int pl_length(u32 seed, i64 batch, int rank, int feature, i64 b, int pooling) {
  u32 h = pl_step(pl_step(pl_step(pl_step(pl_start(seed, PL_TAG_LENGTH), (u32)batch), (u32)rank), (u32)feature), (u32)b);
  return (int)(h % (u32)(2 * pooling + 1));
}

// --- batch: lengths, their offsets and the splits of the ids all-to-all ------------------------

struct ScanArgs {
  u64 lengths;   // int32 [segments][segLen]; written first when generate
  u64 offsets;   // int32 [segments][segLen]: where each bag starts inside its segment
  u64 totals;    // i64 [segments]
  i64 segments;
  i64 segLen;
  i64 generate;  // 1: lengths of batch `batch` on rank `rank`, send order (segment = send slot)
  i64 seed;
  i64 batch;
  i64 rank;
  i64 world;
  i64 features;
  i64 pooling;
};
static_assert(sizeof(ScanArgs) == 12 * 8, "ScanArgs: 8-byte fields");

// One block per segment; integer sums, so the block's scan order does not matter.
extern "C" __global__ void __launch_bounds__(PL_SCAN_THREADS) pl_scan_lengths(const ScanArgs p) {
  __shared__ int part[PL_SCAN_THREADS];
  const i64 seg = blockIdx.x;
  int* lengths = (int*)p.lengths + seg * p.segLen;
  int* offsets = (int*)p.offsets + seg * p.segLen;
  const int feature = p.generate ? pl_slot_feature((int)seg, (int)p.features, (int)p.world) : 0;
  const int t = threadIdx.x;
  i64 running = 0;
  for (i64 b0 = 0; b0 < p.segLen; b0 += PL_SCAN_THREADS) {
    const i64 b = b0 + t;
    int v = 0;
    if (b < p.segLen) {
      if (p.generate) {
        v = pl_length((u32)p.seed, p.batch, (int)p.rank, feature, b, (int)p.pooling);
        lengths[b] = v;
      } else {
        v = lengths[b];
      }
    }
    part[t] = v;
    __syncthreads();
    for (int s = 1; s < PL_SCAN_THREADS; s <<= 1) {
      const int add = t >= s ? part[t - s] : 0;
      __syncthreads();
      part[t] += add;
      __syncthreads();
    }
    if (b < p.segLen) offsets[b] = (int)(running + part[t] - v);
    running += part[PL_SCAN_THREADS - 1];
    __syncthreads();
  }
  if (t == 0) ((i64*)p.totals)[seg] = running;
}

struct BasesArgs {
  u64 totals;     // i64 [segments]
  u64 bases;      // i64 [segments]: exclusive prefix sum of totals
  u64 groupSums;  // i64 [world] or 0: the totals of each owner's send slots (the ids all-to-all's splits)
  i64 segments;
  i64 world;
  i64 features;
};
static_assert(sizeof(BasesArgs) == 6 * 8, "BasesArgs: 8-byte fields");

// At most a few hundred segments: one thread.
extern "C" __global__ void pl_segment_bases(const BasesArgs p) {
  if (threadIdx.x != 0 || blockIdx.x != 0) return;
  const i64* totals = (const i64*)p.totals;
  i64* bases = (i64*)p.bases;
  i64 at = 0;
  for (i64 q = 0; q < p.segments; q++) {
    bases[q] = at;
    at += totals[q];
  }
  if (p.groupSums == 0) return;
  i64* sums = (i64*)p.groupSums;
  i64 q = 0;
  for (int owner = 0; owner < p.world; owner++) {
    i64 sum = 0;
    for (int n = pl_owned((int)p.features, (int)p.world, owner); n > 0; n--) sum += totals[q++];
    sums[owner] = sum;
  }
}

struct IdsArgs {
  u64 lengths;  // int32 [segments][segLen]
  u64 offsets;  // int32 [segments][segLen]
  u64 bases;    // i64 [segments]
  u64 ids;      // int32, packed: segment by segment, bag by bag
  i64 segments;
  i64 segLen;
  i64 seed;
  i64 batch;
  i64 rank;
  i64 world;
  i64 features;
  i64 rows;
};
static_assert(sizeof(IdsArgs) == 12 * 8, "IdsArgs: 8-byte fields");

extern "C" __global__ void pl_gen_ids(const IdsArgs p) {
  const i64 g = (i64)blockIdx.x * blockDim.x + threadIdx.x;
  if (g >= p.segments * p.segLen) return;
  const i64 seg = g / p.segLen, b = g % p.segLen;
  const int feature = pl_slot_feature((int)seg, (int)p.features, (int)p.world);
  const int n = ((const int*)p.lengths)[g];
  int* out = (int*)p.ids + ((const i64*)p.bases)[seg] + ((const int*)p.offsets)[g];
  const u32 bag = pl_step(pl_step(pl_step(pl_step(pl_start((u32)p.seed, PL_TAG_ID), (u32)p.batch), (u32)p.rank), (u32)feature), (u32)b);
  for (int j = 0; j < n; j++) out[j] = (int)(pl_step(bag, (u32)j) % (u32)p.rows);
}

struct DenseArgs {
  u64 x;       // f32 [batchSize][denseIn]
  u64 labels;  // f32 [batchSize]
  i64 batchSize;
  i64 denseIn;
  i64 seed;
  i64 batch;
  i64 rank;
};
static_assert(sizeof(DenseArgs) == 7 * 8, "DenseArgs: 8-byte fields");

// Values in [0, 1) on a 2^-24 grid: exact in f32, so no rounding to agree on.
extern "C" __global__ void pl_gen_dense(const DenseArgs p) {
  const i64 t = (i64)blockIdx.x * blockDim.x + threadIdx.x;
  const i64 cols = p.denseIn + 1;
  if (t >= p.batchSize * cols) return;
  const i64 b = t / cols, c = t % cols;
  if (c < p.denseIn) {
    const u32 h = pl_step(pl_step(pl_step(pl_step(pl_start((u32)p.seed, PL_TAG_DENSE), (u32)p.batch), (u32)p.rank), (u32)b), (u32)c);
    ((float*)p.x)[b * p.denseIn + c] = (float)(h >> 8) * 0x1p-24f;
  } else {
    const u32 h = pl_step(pl_step(pl_step(pl_start((u32)p.seed, PL_TAG_LABEL), (u32)p.batch), (u32)p.rank), (u32)b);
    ((float*)p.labels)[b] = (float)(h & 1u);
  }
}

// --- embeddings ---------------------------------------------------------------------------------

// The bags a rank received, [source][local feature][sample]: bag g is in segment g / segLen, of
// local feature (g / segLen) % featuresHere; its ids start at bases[segment] + offsets[g].
struct BagArgs {
  u64 lengths;  // int32 [bags]
  u64 offsets;  // int32 [bags]
  u64 bases;    // i64 [bags / segLen]
  u64 ids;      // int32
  u64 table;    // int32 [featuresHere][rows][dim], fixed point
  u64 pooled;   // f32 [bags][dim]: pooling reads it (out), the update reads it (gradients in)
  i64 bags;
  i64 segLen;
  i64 featuresHere;
  i64 rows;
  i64 dim;
  double scale;  // pooling: 2^-PL_FIXED_SHIFT; update: -lr · 2^PL_FIXED_SHIFT (an f32 value)
};
static_assert(sizeof(BagArgs) == 12 * 8, "BagArgs: 8-byte fields");

struct Bag {
  const int* ids;
  int n;
  i64 row0;  // element index of (this bag's table, row 0, this thread's column)
};

__device__ __forceinline__ Bag pl_bag(const BagArgs& p, i64 g, int d) {
  const i64 seg = g / p.segLen;
  const i64 k = seg % p.featuresHere;
  Bag bag;
  bag.ids = (const int*)p.ids + ((const i64*)p.bases)[seg] + ((const int*)p.offsets)[g];
  bag.n = ((const int*)p.lengths)[g];
  bag.row0 = k * p.rows * p.dim + d;
  return bag;
}

// A thread per (bag, column): a bag's threads read one row's columns together.
extern "C" __global__ void pl_embedding_bag(const BagArgs p) {
  const i64 t = (i64)blockIdx.x * blockDim.x + threadIdx.x;
  if (t >= p.bags * p.dim) return;
  const i64 g = t / p.dim;
  const Bag bag = pl_bag(p, g, (int)(t % p.dim));
  const int* table = (const int*)p.table;
  i64 sum = 0;
  for (int j = 0; j < bag.n; j++) sum += table[bag.row0 + (i64)bag.ids[j] * p.dim];
  ((float*)p.pooled)[t] = __fmul_rn(__ll2float_rn(sum), (float)p.scale);
}

// Sum pooling's gradient is the bag's gradient for every id in it: add -lr·grad, in table units
// (rounded to nearest even, saturated), once per occurrence. Integer atomics: any order, same bits.
extern "C" __global__ void pl_scatter_update(const BagArgs p) {
  const i64 t = (i64)blockIdx.x * blockDim.x + threadIdx.x;
  if (t >= p.bags * p.dim) return;
  const int step = __float2int_rn(__fmul_rn(((const float*)p.pooled)[t], (float)p.scale));
  if (step == 0) return;
  const Bag bag = pl_bag(p, t / p.dim, (int)(t % p.dim));
  int* table = (int*)p.table;
  for (int j = 0; j < bag.n; j++) atomicAdd(table + bag.row0 + (i64)bag.ids[j] * p.dim, step);
}

// --- dense -------------------------------------------------------------------------------------

// C[m][n] = sum over k ascending of op(A)[m][k]·op(B)[k][n], then + bias[n], then ReLU. op(A)[m][k]
// is A[m·lda + k], or A[k·lda + m] when transA; likewise B. Each output is one thread's running
// sum, k = 0, 1, ...: the host's loop order. Split k (partials set, kChunk < k): block
// (chunk, tile) sums its chunk of k from zero into partials[chunk][m][n], and pl_gemm_sum adds the
// chunks in order, then bias and ReLU (src/pipeline/compute.ts gemmChunks: the weight gradients,
// whose k is the batch, would otherwise have a few dozen blocks walk all of it).
struct GemmArgs {
  u64 a;
  u64 b;
  u64 c;
  u64 bias;  // f32 [n] or 0
  i64 m;
  i64 n;
  i64 k;
  i64 lda;
  i64 ldb;
  i64 ldc;
  i64 transA;
  i64 transB;
  i64 relu;
  u64 partials;  // f32 [chunks][m][n], or 0: k in one piece
  i64 kChunk;
};
static_assert(sizeof(GemmArgs) == 15 * 8, "GemmArgs: 8-byte fields");

// A block computes a 128 x 128 tile of C, each of its 256 threads an 8 x 8 block in registers: per
// k a thread reads 8 + 8 values from shared memory (four float4 reads) for 64 products, where a 4 x 4
// block read 8 scalars for 16 (an eighth of the shared-memory instructions per product), and each
// element loaded from global memory serves 128 outputs, not 64. A thread owns rows 4·ty + {0..3}
// and 64 + 4·ty + {0..3} (columns likewise with tx), so a warp's reads of a k row are broadcasts
// (A) or 256 contiguous bytes (B): no bank conflicts. k tiles of 16 are double-buffered, the next
// tile's global loads in flight during this one's products, one barrier a tile. Past m, n or the
// chunk's k the tiles hold zeros and the unrolled loop adds their +0·+0 products too: a running sum
// from +0 is never -0 under round to nearest, so adding +0 keeps its bits, and each output is still
// the host's sum, one product at a time in k order.
#define PL_TILE_M 128
#define PL_TILE_N 128
#define PL_TILE_K 16
#define PL_TILE_PAD 4        // rows stay float4-aligned; the 8 k a warp stores land 4 banks apart
#define PL_GEMM_THREADS 256  // 16 x 16, each 8 x 8 outputs
static_assert(PL_TILE_M == 128 && PL_TILE_N == 128 && PL_TILE_K == 16 && PL_GEMM_THREADS == 256, "pl_gemm's thread layout");

struct alignas(16) pl_f4 {
  float x, y, z, w;
};

// Where element r (of 8) of a thread's share of a 128 x 16 tile of A (or B) goes: loads walk along
// whichever index is contiguous in memory, a warp 32 floats along m (or n), or 8 k in each of 4 rows
// (whole 32-byte sectors) when k is contiguous.
__device__ __forceinline__ int pl_gemm_row(bool alongRow, int r) {
  return alongRow ? threadIdx.x % PL_TILE_M : threadIdx.x / 8 + 32 * (r / 2);
}
__device__ __forceinline__ int pl_gemm_k(bool alongRow, int r) {
  return alongRow ? threadIdx.x / PL_TILE_M + 2 * r : threadIdx.x % 8 + 8 * (r % 2);
}

// At least two blocks an SM (at most 128 registers a thread): one's barrier is the other's issue time.
extern "C" __global__ void __launch_bounds__(PL_GEMM_THREADS, 2) pl_gemm(const GemmArgs p) {
  alignas(16) __shared__ float as[2][PL_TILE_K][PL_TILE_M + PL_TILE_PAD];
  alignas(16) __shared__ float bs[2][PL_TILE_K][PL_TILE_N + PL_TILE_PAD];
  const float* A = (const float*)p.a;
  const float* B = (const float*)p.b;
  const i64 tilesN = (p.n + PL_TILE_N - 1) / PL_TILE_N, tiles = tilesN * ((p.m + PL_TILE_M - 1) / PL_TILE_M);
  const i64 tile = blockIdx.x % tiles, chunk = blockIdx.x / tiles;
  const i64 m0 = (tile / tilesN) * PL_TILE_M, n0 = (tile % tilesN) * PL_TILE_N;
  const bool split = p.partials != 0;
  const i64 kLo = split ? chunk * p.kChunk : 0;
  const i64 kHi = split && kLo + p.kChunk < p.k ? kLo + p.kChunk : p.k;
  const bool aRow = p.transA != 0, bRow = p.transB == 0;  // A (B) contiguous along m (n)
  const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
  float ra[8], rb[8];
  // The tile at k0 into ra, rb (zeros outside the matrices and the chunk).
  auto load = [&](i64 k0) {
#pragma unroll
    for (int r = 0; r < 8; r++) {
      const i64 gm = m0 + pl_gemm_row(aRow, r), gka = k0 + pl_gemm_k(aRow, r);
      ra[r] = gm < p.m && gka < kHi ? A[aRow ? gka * p.lda + gm : gm * p.lda + gka] : 0.f;
      const i64 gn = n0 + pl_gemm_row(bRow, r), gkb = k0 + pl_gemm_k(bRow, r);
      rb[r] = gn < p.n && gkb < kHi ? B[bRow ? gkb * p.ldb + gn : gn * p.ldb + gkb] : 0.f;
    }
  };
  auto store = [&](int buf) {
#pragma unroll
    for (int r = 0; r < 8; r++) {
      as[buf][pl_gemm_k(aRow, r)][pl_gemm_row(aRow, r)] = ra[r];
      bs[buf][pl_gemm_k(bRow, r)][pl_gemm_row(bRow, r)] = rb[r];
    }
  };
  float acc[8][8];
#pragma unroll
  for (int i = 0; i < 8; i++)
#pragma unroll
    for (int j = 0; j < 8; j++) acc[i][j] = 0.f;
  const int kTiles = kHi > kLo ? (int)((kHi - kLo + PL_TILE_K - 1) / PL_TILE_K) : 0;
  if (kTiles > 0) {
    load(kLo);
    store(0);
  }
  __syncthreads();
  for (int t = 0; t < kTiles; t++) {
    const int buf = t % 2;
    if (t + 1 < kTiles) load(kLo + (i64)(t + 1) * PL_TILE_K);
#pragma unroll
    for (int kk = 0; kk < PL_TILE_K; kk++) {
      const pl_f4 a0 = *(const pl_f4*)&as[buf][kk][4 * ty], a1 = *(const pl_f4*)&as[buf][kk][PL_TILE_M / 2 + 4 * ty];
      const pl_f4 b0 = *(const pl_f4*)&bs[buf][kk][4 * tx], b1 = *(const pl_f4*)&bs[buf][kk][PL_TILE_N / 2 + 4 * tx];
      const float a[8] = {a0.x, a0.y, a0.z, a0.w, a1.x, a1.y, a1.z, a1.w};
      const float b[8] = {b0.x, b0.y, b0.z, b0.w, b1.x, b1.y, b1.z, b1.w};
#pragma unroll
      for (int i = 0; i < 8; i++)
#pragma unroll
        for (int j = 0; j < 8; j++) acc[i][j] = __fadd_rn(acc[i][j], __fmul_rn(a[i], b[j]));
    }
    // The other buffer was last read before the previous barrier.
    if (t + 1 < kTiles) store(buf ^ 1);
    __syncthreads();
  }
  float* C = (float*)p.c;
  const float* bias = (const float*)p.bias;
  float* P = (float*)p.partials + chunk * p.m * p.n;
#pragma unroll
  for (int i = 0; i < 8; i++) {
    const i64 gm = m0 + PL_TILE_M / 2 * (i / 4) + 4 * ty + i % 4;
    if (gm >= p.m) continue;
#pragma unroll
    for (int j = 0; j < 8; j++) {
      const i64 gn = n0 + PL_TILE_N / 2 * (j / 4) + 4 * tx + j % 4;
      if (gn >= p.n) continue;
      float v = acc[i][j];
      if (split) {
        P[gm * p.n + gn] = v;
        continue;
      }
      if (bias) v = __fadd_rn(v, bias[gn]);
      if (p.relu) v = v > 0.f ? v : 0.f;
      C[gm * p.ldc + gn] = v;
    }
  }
}

// Split k, second half: the chunks' sums in chunk order, then bias and ReLU; a thread an output.
extern "C" __global__ void pl_gemm_sum(const GemmArgs p) {
  const i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= p.m * p.n) return;
  const i64 gm = i / p.n, gn = i % p.n, chunks = (p.k + p.kChunk - 1) / p.kChunk;
  const float* P = (const float*)p.partials;
  float v = P[i];
  for (i64 c = 1; c < chunks; c++) v = __fadd_rn(v, P[c * p.m * p.n + i]);
  const float* bias = (const float*)p.bias;
  if (bias) v = __fadd_rn(v, bias[gn]);
  if (p.relu) v = v > 0.f ? v : 0.f;
  ((float*)p.c)[gm * p.ldc + gn] = v;
}

// After a GEMM that another library computed into c (cuBLAS, src/cuda/cublas.ts): the bias, then
// ReLU, in place, as pl_gemm's last step; a thread an output.
extern "C" __global__ void pl_gemm_epilogue(const GemmArgs p) {
  const i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= p.m * p.n) return;
  const i64 gm = i / p.n, gn = i % p.n;
  float* c = (float*)p.c + gm * p.ldc + gn;
  float v = *c;
  const float* bias = (const float*)p.bias;
  if (bias) v = __fadd_rn(v, bias[gn]);
  if (p.relu) v = v > 0.f ? v : 0.f;
  *c = v;
}

// out[c] = sum over the rows of x[r·ld + c] (a bias gradient), in src/pipeline/compute.ts
// colSumChunks' order: chunks of `chunk` rows, each summed from zero in row order, then the chunks'
// sums from zero in chunk order. One thread walking all 8192 rows of a column left 4 blocks waiting
// on dependent loads (~0.5 ms); block (chunk, column block) sums its chunk into
// partials[chunk][cols] and pl_col_sum_chunks adds them. One chunk (partials 0): straight to out.
struct ColSumArgs {
  u64 x;
  u64 out;
  i64 rows;
  i64 cols;
  i64 ld;
  u64 partials;  // f32 [chunks][cols], or 0: the rows in one piece
  i64 chunk;     // rows a chunk
};
static_assert(sizeof(ColSumArgs) == 7 * 8, "ColSumArgs: 8-byte fields");

// x[0], x[stride], ... x[(n-1)·stride] summed from zero in order. The loads do not depend on the
// running sum: eight go out before their adds, so a thread waits on memory once per eight rows.
__device__ __forceinline__ float pl_sum_strided(const float* x, i64 stride, i64 n) {
  float acc = 0.f;
  i64 i = 0;
  for (; i + 8 <= n; i += 8) {
    float v[8];
#pragma unroll
    for (int j = 0; j < 8; j++) v[j] = x[(i + j) * stride];
#pragma unroll
    for (int j = 0; j < 8; j++) acc = __fadd_rn(acc, v[j]);
  }
  for (; i < n; i++) acc = __fadd_rn(acc, x[i * stride]);
  return acc;
}

// Block b: column block b % colBlocks, chunk b / colBlocks (a 1-D grid); a thread a column.
extern "C" __global__ void pl_col_sum(const ColSumArgs p) {
  const i64 colBlocks = (p.cols + blockDim.x - 1) / blockDim.x;
  const i64 chunk = blockIdx.x / colBlocks;
  const i64 c = (blockIdx.x % colBlocks) * blockDim.x + threadIdx.x;
  if (c >= p.cols) return;
  const bool split = p.partials != 0;
  const i64 lo = split ? chunk * p.chunk : 0;
  const i64 hi = split && lo + p.chunk < p.rows ? lo + p.chunk : p.rows;
  const float v = pl_sum_strided((const float*)p.x + lo * p.ld + c, p.ld, hi > lo ? hi - lo : 0);
  if (split) ((float*)p.partials)[chunk * p.cols + c] = v;
  else ((float*)p.out)[c] = v;
}

// Split rows, second half: the chunks' sums from zero in chunk order; a thread a column.
extern "C" __global__ void pl_col_sum_chunks(const ColSumArgs p) {
  const i64 c = (i64)blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= p.cols) return;
  const i64 chunks = (p.rows + p.chunk - 1) / p.chunk;
  ((float*)p.out)[c] = pl_sum_strided((const float*)p.partials + c, p.cols, chunks);
}

struct ReluGradArgs {
  u64 dy;
  u64 y;   // the layer's output (after ReLU)
  u64 dz;  // may be dy
  i64 rows;
  i64 cols;
  i64 ldDy;
  i64 ldY;
  i64 ldDz;
};
static_assert(sizeof(ReluGradArgs) == 8 * 8, "ReluGradArgs: 8-byte fields");

extern "C" __global__ void pl_relu_grad(const ReluGradArgs p) {
  const i64 t = (i64)blockIdx.x * blockDim.x + threadIdx.x;
  if (t >= p.rows * p.cols) return;
  const i64 r = t / p.cols, c = t % p.cols;
  const float g = ((const float*)p.dy)[r * p.ldDy + c];
  ((float*)p.dz)[r * p.ldDz + c] = ((const float*)p.y)[r * p.ldY + c] > 0.f ? g : 0.f;
}

// The interaction: blocks[q][b][d] (what the output dist delivers, slot by slot) to or from the
// columns [col0 + q·dim, col0 + (q+1)·dim) of row b of the over arch's input.
struct PermuteArgs {
  u64 wide;    // f32 [batchSize][ldWide]
  u64 blocks;  // f32 [slots][batchSize][dim]
  i64 batchSize;
  i64 slots;
  i64 dim;
  i64 ldWide;
  i64 col0;
  i64 toWide;  // 1: blocks -> wide (forward); 0: wide -> blocks (its gradient)
};
static_assert(sizeof(PermuteArgs) == 8 * 8, "PermuteArgs: 8-byte fields");

extern "C" __global__ void pl_permute(const PermuteArgs p) {
  const i64 t = (i64)blockIdx.x * blockDim.x + threadIdx.x;
  if (t >= p.slots * p.batchSize * p.dim) return;
  const i64 q = t / (p.batchSize * p.dim), b = (t / p.dim) % p.batchSize, d = t % p.dim;
  float* wide = (float*)p.wide + b * p.ldWide + p.col0 + q * p.dim + d;
  float* block = (float*)p.blocks + t;
  if (p.toWide) *wide = *block;
  else *block = *wide;
}

// Mean squared error: dy = (y - label) / rows, and loss = 0.5 / rows · sum (y - label)^2, summed
// by PL_LOSS_THREADS strided running sums and then a fixed tree (synth.ts lossOf mirrors it).
struct LossArgs {
  u64 y;       // f32, column 0 of [rows][ldY]
  u64 labels;  // f32 [rows]
  u64 dy;      // f32 [rows]
  u64 loss;    // f32 [1]
  i64 rows;
  i64 ldY;
  double invRows;  // an f32 value
};
static_assert(sizeof(LossArgs) == 7 * 8, "LossArgs: 8-byte fields");

extern "C" __global__ void __launch_bounds__(PL_LOSS_THREADS) pl_loss(const LossArgs p) {
  __shared__ float part[PL_LOSS_THREADS];
  const int t = threadIdx.x;
  const float inv = (float)p.invRows;
  float acc = 0.f;
  for (i64 i = t; i < p.rows; i += PL_LOSS_THREADS) {
    const float e = __fsub_rn(((const float*)p.y)[i * p.ldY], ((const float*)p.labels)[i]);
    ((float*)p.dy)[i] = __fmul_rn(e, inv);
    acc = __fadd_rn(acc, __fmul_rn(e, e));
  }
  part[t] = acc;
  __syncthreads();
  for (int s = PL_LOSS_THREADS / 2; s > 0; s >>= 1) {
    if (t < s) part[t] = __fadd_rn(part[t], part[t + s]);
    __syncthreads();
  }
  if (t == 0) *(float*)p.loss = __fmul_rn(__fmul_rn(part[0], 0.5f), inv);
}

struct SgdArgs {
  u64 params;
  u64 grads;
  i64 count;
  double lr;  // an f32 value
};
static_assert(sizeof(SgdArgs) == 4 * 8, "SgdArgs: 8-byte fields");

extern "C" __global__ void pl_sgd(const SgdArgs p) {
  const i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= p.count) return;
  float* w = (float*)p.params + i;
  *w = __fsub_rn(*w, __fmul_rn((float)p.lr, ((const float*)p.grads)[i]));
}

// --- initial values and checksums ---------------------------------------------------------------

// kind 0: f32 ((h >> 8) - 2^23) · scale (scale a power of two: exact); kind 1: int32 ((h >> 8) - 2^23) >> shift.
struct FillArgs {
  u64 out;
  i64 count;
  i64 seed;
  i64 tag;
  i64 key;
  i64 kind;
  i64 shift;
  double scale;
};
static_assert(sizeof(FillArgs) == 8 * 8, "FillArgs: 8-byte fields");

extern "C" __global__ void pl_fill(const FillArgs p) {
  const i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= p.count) return;
  const u32 h = pl_step(pl_step(pl_step(pl_start((u32)p.seed, (u32)p.tag), (u32)p.key), (u32)(i >> 32)), (u32)i);
  const int centred = (int)(h >> 8) - (1 << 23);
  if (p.kind == 0) ((float*)p.out)[i] = __fmul_rn((float)centred, (float)p.scale);
  else ((int*)p.out)[i] = centred >> p.shift;
}

// Two 32-bit sums of a hash of (index, word) over `count` words: order-independent (wrapping
// atomics), so one kernel pass gives what the host's loop gives (synth.ts checksumWords).
struct ChecksumArgs {
  u64 words;
  u64 out;  // u32 [2], zeroed first
  i64 count;
};
static_assert(sizeof(ChecksumArgs) == 3 * 8, "ChecksumArgs: 8-byte fields");

extern "C" __global__ void pl_checksum(const ChecksumArgs p) {
  u32 a = 0, b = 0;
  const u32* w = (const u32*)p.words;
  for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < p.count; i += (i64)gridDim.x * blockDim.x) {
    const u32 x = pl_mix(w[i] + pl_mix((u32)i ^ pl_mix((u32)(i >> 32) + 0x7f4a7c15u)));
    a += x;
    b += pl_mix(x ^ 0x5bd1e995u);
  }
  atomicAdd((u32*)p.out, a);
  atomicAdd((u32*)p.out + 1, b);
}
