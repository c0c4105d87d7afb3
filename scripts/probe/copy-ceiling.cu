// How fast can the SMs copy device memory, against the copy engine? The large-message ceiling of
// a2av on one GPU is a device-to-device copy, so this times copy-kernel shapes on their own:
//   nvcc -O3 -arch=sm_90 -std=c++17 -Ikernels -o copy-ceiling scripts/probe/copy-ceiling.cu && ./copy-ceiling [MiB]
// Prints, per variant, µs per copy (median of 15) and the ratio to cuMemcpyDtoD timed around it.
#include <cuda.h>
#include <cuda_runtime.h>
#define A2AV_ONE_GPU 1
#include "a2av.cu"  // the product's kernels (build with -I kernels): a2av_copy is timed alone below
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <vector>

#include "check.cuh"

typedef unsigned long long u64;

// Load flavours: 0 plain, 1 non-coherent without L1, 2 as 1 with an L2 evict-first hint.
template <int LD>
__device__ __forceinline__ uint4 ld16(const uint4* p, u64 pol) {
  uint4 v;
  if (LD == 0) {
    v = *p;
  } else if (LD == 1) {
    asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(p));
  } else {
    asm volatile("ld.global.nc.L1::no_allocate.L2::cache_hint.v4.u32 {%0,%1,%2,%3}, [%4], %5;"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(p), "l"(pol));
  }
  return v;
}
// Store flavours: 0 plain, 1 streaming (.cs), 2 L2 evict-first hint.
template <int ST>
__device__ __forceinline__ void st16(uint4* p, uint4 v, u64 pol) {
  if (ST == 0) {
    *p = v;
  } else if (ST == 1) {
    asm volatile("st.global.cs.v4.u32 [%0], {%1,%2,%3,%4};" ::"l"(p), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w) : "memory");
  } else {
    asm volatile("st.global.L2::cache_hint.v4.u32 [%0], {%1,%2,%3,%4}, %5;" ::"l"(p), "r"(v.x), "r"(v.y), "r"(v.z),
                 "r"(v.w), "l"(pol)
                 : "memory");
  }
}
__device__ __forceinline__ u64 evict_first_policy() {
  u64 pol;
  asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(pol));
  return pol;
}

// One 16-byte word per thread per unroll step, no loop: a grid as large as the data.
template <int U>
__global__ void __launch_bounds__(1024) plain(uint4* d, const uint4* s, u64 n) {
  const u64 base = (u64)blockIdx.x * blockDim.x * U + threadIdx.x;
  uint4 r[U];
#pragma unroll
  for (int u = 0; u < U; ++u)
    if (base + u * blockDim.x < n) r[u] = ld16<1>(s + base + u * blockDim.x, 0);
#pragma unroll
  for (int u = 0; u < U; ++u)
    if (base + u * blockDim.x < n) d[base + u * blockDim.x] = r[u];
}

// a2av's shape: a resident grid sweeping the range together, tile (threads x U words) by tile.
// PF > 0: thread 0 asks L2 to prefetch the tile PF sweeps ahead (bulk prefetch, Hopper).
template <int U, int LD, int ST, int PF>
__global__ void __launch_bounds__(1024) sweep(uint4* d, const uint4* s, u64 n) {
  const u64 tile = (u64)blockDim.x * U, step = (u64)gridDim.x * tile;
  const u64 pol = (LD == 2 || ST == 2) ? evict_first_policy() : 0;
  for (u64 lo = blockIdx.x * tile; lo < n; lo += step) {
    if (PF > 0 && threadIdx.x == 0) {
      const u64 ahead = lo + PF * step;
      if (ahead < n) {
        const u64 words = (tile < n - ahead ? tile : n - ahead);
        asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(s + ahead), "r"((unsigned)(words * 16)) : "memory");
      }
    }
    const u64 i = lo + threadIdx.x;
    if (lo + tile <= n) {
      uint4 r[U];
#pragma unroll
      for (int u = 0; u < U; ++u) r[u] = ld16<LD>(s + i + u * blockDim.x, pol);
#pragma unroll
      for (int u = 0; u < U; ++u) st16<ST>(d + i + u * blockDim.x, r[u], pol);
    } else {
      for (u64 j = i; j < n; j += blockDim.x) d[j] = s[j];
    }
  }
}

// Tensor-memory-accelerator bulk copies: one thread per block streams chunks global -> shared ->
// global through S stages of C bytes; blocks take chunks b, b + G, ... (sweeping together).
__device__ __forceinline__ unsigned smem_addr(const void* p) { return (unsigned)__cvta_generic_to_shared(p); }
__global__ void __launch_bounds__(32) tma(char* d, const char* s, u64 bytes, int S, int C) {
  extern __shared__ __align__(128) char buf[];
  __shared__ __align__(8) u64 bars[16];
  if (threadIdx.x != 0) return;
  for (int i = 0; i < S; ++i) asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(smem_addr(&bars[i])));
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
  const u64 nChunks = (bytes + C - 1) / C;
  auto chunk = [&](u64 k) { return (u64)blockIdx.x + k * gridDim.x; };  // k-th chunk of this block
  auto len = [&](u64 c) { return (unsigned)((u64)C < bytes - c * C ? (u64)C : bytes - c * C); };
  auto load = [&](u64 k) {
    const u64 c = chunk(k);
    const int st = (int)(k % S);
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_addr(&bars[st])), "r"(len(c)) : "memory");
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
                     smem_addr(buf + (u64)st * C)),
                 "l"(s + c * C), "r"(len(c)), "r"(smem_addr(&bars[st]))
                 : "memory");
  };
  u64 mine = 0;
  while (chunk(mine) < nChunks) ++mine;
  for (u64 k = 0; k < mine && k < (u64)S; ++k) load(k);
  for (u64 k = 0; k < mine; ++k) {
    const int st = (int)(k % S);
    const unsigned parity = (unsigned)((k / S) & 1);
    unsigned done = 0;
    while (!done)
      asm volatile(
          "{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }"
          : "=r"(done)
          : "r"(smem_addr(&bars[st])), "r"(parity)
          : "memory");
    const u64 c = chunk(k);
    asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;" ::"l"(d + c * C), "r"(smem_addr(buf + (u64)st * C)),
                 "r"(len(c))
                 : "memory");
    asm volatile("cp.async.bulk.commit_group;" ::: "memory");
    // Refill the previous stage once its store has read the shared memory (all groups but the newest).
    if (k >= 1 && k - 1 + S < mine) {
      asm volatile("cp.async.bulk.wait_group.read 1;" ::: "memory");
      load(k - 1 + S);
    }
  }
  asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
}

// a2av_copy's shape (kernels/a2av.cu, grid mode) with its parts switchable, to see what costs:
// every block reads a small shared plan (nc: through the read-only path; else plain loads), and a
// status word (vol: volatile, i.e. from L2 each time), its source word first (early).
template <bool NC, bool VOL, bool EARLY, int MINB, bool GDC = false>
__global__ void __launch_bounds__(1024, MINB) planned(uint4* d, const uint4* s, u64 n, const long long* table, int W) {
  extern __shared__ long long plan[];
  __shared__ int sAbort;
  const u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x;
  uint4 w;
  if (EARLY && i < n) w = ld16<1>(s + i, 0);
  if (GDC) {
    asm volatile("griddepcontrol.wait;" ::: "memory");
    asm volatile("griddepcontrol.launch_dependents;");
  }
  if (threadIdx.x == 0) sAbort = VOL ? *(volatile const long long*)(table + 3 * W) : (NC ? __ldg(table + 3 * W) : table[3 * W]);
  for (int k = threadIdx.x; k < 3 * W; k += blockDim.x) plan[k] = NC ? __ldg(table + k) : table[k];
  __syncthreads();
  if (sAbort) return;
  if (!EARLY && i < n) w = ld16<1>(s + i, 0);
  const long long total = plan[3 * (W - 1)] + plan[3 * (W - 1) + 2];
  if ((long long)(i * 16) < total) d[i] = w;
}

__global__ void tiny() { asm volatile("griddepcontrol.launch_dependents;"); }

// Launches with programmatic stream serialisation, as a2av does after a2av_1d.
template <typename... A>
static void launch_pdl(void (*k)(A...), unsigned grid, unsigned block, unsigned smem, cudaStream_t st, A... args) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = st;
  cudaLaunchAttribute at[1];
  at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  at[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = at;
  cfg.numAttrs = 1;
  CK(cudaLaunchKernelEx(&cfg, k, args...));
}

static float median(std::vector<float> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

int main(int argc, char** argv) {
  const u64 mib = argc > 1 ? strtoull(argv[1], 0, 10) : 1024;
  const u64 bytes = mib << 20, n = bytes / 16;
  int sms = 0;
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  char *src, *dst;
  CK(cudaMalloc(&src, bytes));
  CK(cudaMalloc(&dst, bytes));
  CK(cudaMemset(src, 1, bytes));
  CK(cudaMemset(dst, 0, bytes));
  cudaStream_t st;
  CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  cudaEvent_t a, b;
  CK(cudaEventCreate(&a));
  CK(cudaEventCreate(&b));
  auto timeIt = [&](const std::function<void()>& f) {
    for (int i = 0; i < 3; ++i) f();
    std::vector<float> v;
    for (int i = 0; i < 15; ++i) {
      CK(cudaEventRecord(a, st));
      f();
      CK(cudaEventRecord(b, st));
      CK(cudaEventSynchronize(b));
      CK(cudaGetLastError());
      float ms;
      CK(cudaEventElapsedTime(&ms, a, b));
      v.push_back(ms * 1000.f);
    }
    return median(v);
  };
  auto ce = [&] { CK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, st)); };
  auto check = [&](const char* name) {
    // The copy must be whole: compare the last and a middle word.
    unsigned char x[2];
    CK(cudaMemcpy(&x[0], dst + bytes - 1, 1, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(&x[1], dst + bytes / 2 + 7, 1, cudaMemcpyDeviceToHost));
    if (x[0] != 1 || x[1] != 1) printf("  !! %s did not copy everything\n", name);
    CK(cudaMemsetAsync(dst, 0, bytes, st));
  };
  printf("%llu MiB, %d SMs\n%-40s %10s %8s %10s\n", mib, sms, "variant", "µs", "ratio", "GB/s r+w");
  auto report = [&](const char* name, const std::function<void()>& f) {
    const float r0 = timeIt(ce);
    const float t = timeIt(f);
    const float r1 = timeIt(ce);
    check(name);
    const float ref = (r0 + r1) / 2;
    printf("%-40s %10.1f %8.3f %10.0f\n", name, t, ref / t, 2.0 * bytes / (t * 1e3));
    fflush(stdout);
  };
  report("cuMemcpyDtoD (copy engine)", ce);
  char name[96];
#define PLAIN(T, U)                                                                                       \
  snprintf(name, sizeof name, "plain %d thr x %d", T, U);                                                  \
  report(name, [&] { plain<U><<<(unsigned)((n + (u64)T * U - 1) / ((u64)T * U)), T, 0, st>>>((uint4*)dst, (const uint4*)src, n); });
  PLAIN(256, 1) PLAIN(256, 4) PLAIN(1024, 1)
#define SWEEP(BPS, T, U, LD, ST, PF)                                                                      \
  snprintf(name, sizeof name, "sweep %dx%d u%d ld%d st%d pf%d", BPS, T, U, LD, ST, PF);                    \
  report(name, [&] { sweep<U, LD, ST, PF><<<BPS * sms, T, 0, st>>>((uint4*)dst, (const uint4*)src, n); });
  SWEEP(2, 512, 4, 1, 0, 0)  // a2av today
  SWEEP(2, 512, 8, 1, 0, 0) SWEEP(4, 256, 4, 1, 0, 0) SWEEP(16, 64, 8, 1, 0, 0) SWEEP(2, 512, 4, 1, 1, 0) SWEEP(2, 512, 4, 1, 0, 2)
#define TMA(BPS, S, C)                                                                                    \
  {                                                                                                        \
    const int smem = S * C;                                                                                \
    CK(cudaFuncSetAttribute(tma, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));                      \
    snprintf(name, sizeof name, "tma %d/SM %d x %d KiB", BPS, S, C >> 10);                                 \
    report(name, [&] { tma<<<BPS * sms, 32, smem, st>>>(dst, src, bytes, S, C); });                        \
  }
  {
    const int W = 8;
    long long h[3 * W + 1];
    for (int k = 0; k < W; ++k) h[3 * k] = (long long)(bytes / W) * k, h[3 * k + 1] = 0, h[3 * k + 2] = (long long)(bytes / W);
    h[3 * W] = 0;
    long long* table;
    CK(cudaMalloc(&table, sizeof h));
    CK(cudaMemcpy(table, h, sizeof h, cudaMemcpyHostToDevice));
    const unsigned g = (unsigned)((n + 255) / 256);
#define PLANNED(NC, VOL, EARLY, MINB)                                                                     \
  snprintf(name, sizeof name, "planned nc%d vol%d early%d minb%d", NC, VOL, EARLY, MINB);                \
  report(name, [&] { planned<NC, VOL, EARLY, MINB><<<g, 256, 24 * W, st>>>((uint4*)dst, (const uint4*)src, n, table, W); });
    PLANNED(0, 1, 1, 1) PLANNED(1, 0, 1, 1) PLANNED(1, 0, 1, 2)
    report("planned nc1 vol0 early1 + griddepcontrol", [&] { planned<1, 0, 1, 1, true><<<g, 256, 24 * W, st>>>((uint4*)dst, (const uint4*)src, n, table, W); });
    report("  same, launched after tiny with PDL", [&] {
      tiny<<<1, 32, 0, st>>>();
      launch_pdl(planned<1, 0, 1, 1, true>, g, 256, 24 * W, st, (uint4*)dst, (const uint4*)src, n, (const long long*)table, W);
    });
  }
  // The product's a2av_copy alone, with a plan written where a2av_1d leaves it.
  for (int W : {1, 8}) {
    const u64 padBytes = 1 << 20;
    u8* pad;
    CK(cudaMalloc(&pad, padBytes));
    CK(cudaMemset(pad, 0, padBytes));
    const u64 planOff = (u64)((u8*)lane_send_plan(pad, W) - pad);
    std::vector<long long> h(3 * W);
    for (int k = 0; k < W; ++k) h[3 * k] = (long long)(bytes / W) * k, h[3 * k + 1] = (long long)(dst + (bytes / W) * k), h[3 * k + 2] = (long long)(bytes / W);
    CK(cudaMemcpy(pad + planOff, h.data(), 24 * W, cudaMemcpyHostToDevice));
    A2avParams prm = {};
    prm.input = (const u8*)src;
    prm.inputBytes = bytes;
    prm.pad = pad;
    prm.world = W;
    const int T = 256;
    const unsigned smem = (unsigned)(24 * W);
    const unsigned g = (unsigned)(bytes / (16 * T));
    snprintf(name, sizeof name, "a2av_copy W=%d", W);
    report(name, [&] { a2av_copy<<<g, T, smem, st>>>(prm); });
    snprintf(name, sizeof name, "a2av_copy W=%d after tiny with PDL", W);
    report(name, [&] {
      tiny<<<1, 32, 0, st>>>();
      launch_pdl(a2av_copy, g, T, smem, st, prm);
    });
  }
  TMA(1, 6, 32768) TMA(4, 3, 16384) TMA(1, 3, 65536)
  return 0;
}
