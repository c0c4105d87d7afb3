// What can SM-driven copies reach between two GPUs, against the copy engine? The large-message
// ceiling of a2av across GPUs is each GPU sending to the other while also copying its own share, so
// this times, on GPUs 0 and 1 at once (both directions together, as an exchange runs):
//   - the copy engine: cudaMemcpyPeerAsync each way (and one way alone, for the link's one-way figure),
//   - push kernels (loads from local memory, 16-byte stores into the peer's) and pull kernels
//     (loads from the peer, stores to local), over blocks per GPU and loads in flight per thread,
//   - push with the local share copied at the same time by part of the blocks (a W = 2 exchange:
//     half of each rank's bytes stay on its GPU).
//   nvcc -O3 -arch=sm_90 -std=c++17 -o peer-ceiling scripts/probe/peer-ceiling.cu && ./peer-ceiling [MiB per direction]
// Prints, per variant, the median of 9 runs: µs, GB/s per direction (bytes / time), and the ratio to
// the copy engine both ways at once measured in the same run.
#include <cuda_runtime.h>
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <vector>

#include "check.cuh"

typedef unsigned long long u64;

__device__ __forceinline__ uint4 ld_nc(const uint4* p) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
  return v;
}
// A peer's memory may change under the reader (it does not here): plain volatile-free loads that skip L1.
__device__ __forceinline__ uint4 ld_cg(const uint4* p) {
  uint4 v;
  asm volatile("ld.global.cg.v4.u32 {%0,%1,%2,%3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
  return v;
}

// Every block sweeps [0, words) tile by tile (as a2av's kernels do): UNROLL loads in flight per
// thread, then the stores. PULL: the source is the peer's memory (ld.cg); else local (ld.nc).
template <int UNROLL, bool PULL>
__global__ void __launch_bounds__(1024) sweep(uint4* dst, const uint4* src, u64 words) {
  const u64 tile = (u64)blockDim.x * UNROLL;
  for (u64 lo = (u64)blockIdx.x * tile; lo < words; lo += (u64)gridDim.x * tile) {
    uint4 v[UNROLL];
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) {
      const u64 i = lo + (u64)u * blockDim.x + threadIdx.x;
      if (i < words) v[u] = PULL ? ld_cg(src + i) : ld_nc(src + i);
    }
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) {
      const u64 i = lo + (u64)u * blockDim.x + threadIdx.x;
      if (i < words) dst[i] = v[u];
    }
  }
}

// The first `peerBlocks` blocks push [0, words) to the peer; the rest copy the local share.
template <int UNROLL>
__global__ void __launch_bounds__(1024) mixed(uint4* peerDst, uint4* localDst, const uint4* src, const uint4* localSrc, u64 words, int peerBlocks) {
  const bool peer = (int)blockIdx.x < peerBlocks;
  const int b = peer ? blockIdx.x : blockIdx.x - peerBlocks;
  const int nb = peer ? peerBlocks : gridDim.x - peerBlocks;
  uint4* dst = peer ? peerDst : localDst;
  const uint4* s = peer ? src : localSrc;
  const u64 tile = (u64)blockDim.x * UNROLL;
  for (u64 lo = (u64)b * tile; lo < words; lo += (u64)nb * tile) {
    uint4 v[UNROLL];
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) {
      const u64 i = lo + (u64)u * blockDim.x + threadIdx.x;
      if (i < words) v[u] = ld_nc(s + i);
    }
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) {
      const u64 i = lo + (u64)u * blockDim.x + threadIdx.x;
      if (i < words) dst[i] = v[u];
    }
  }
}

struct Side {
  int dev;
  cudaStream_t stream;
  cudaEvent_t start, stop;
  uint4 *src, *dst, *localSrc, *localDst;  // dst: where the peer writes into this GPU
};

static double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Runs `launch(side, peer)` on both GPUs at once (or on GPU 0 only), `runs` times; the median of
// the slower GPU's event time, in µs.
static double timed(Side* s, bool both, const std::function<void(Side&, Side&)>& launch, int runs = 9) {
  std::vector<double> us;
  for (int r = 0; r < runs + 1; ++r) {
    for (int g = 0; g < (both ? 2 : 1); ++g) {
      CK(cudaSetDevice(s[g].dev));
      CK(cudaEventRecord(s[g].start, s[g].stream));
      launch(s[g], s[1 - g]);
      CK(cudaEventRecord(s[g].stop, s[g].stream));
    }
    float worst = 0;
    for (int g = 0; g < (both ? 2 : 1); ++g) {
      CK(cudaSetDevice(s[g].dev));
      CK(cudaEventSynchronize(s[g].stop));
      float ms;
      CK(cudaEventElapsedTime(&ms, s[g].start, s[g].stop));
      worst = std::max(worst, ms);
    }
    if (r > 0) us.push_back(worst * 1000.0);  // the first run warms up
  }
  return median(us);
}

template <int UNROLL, bool PULL>
static void launchSweep(Side& me, Side& peer, int blocks, int threads, u64 words) {
  CK(cudaSetDevice(me.dev));
  // Push: my source into the peer's destination. Pull: the peer's source into my destination.
  if (PULL) sweep<UNROLL, true><<<blocks, threads, 0, me.stream>>>(me.dst, peer.src, words);
  else sweep<UNROLL, false><<<blocks, threads, 0, me.stream>>>(peer.dst, me.src, words);
  CK(cudaGetLastError());
}

int main(int argc, char** argv) {
  const u64 mib = argc > 1 ? strtoull(argv[1], nullptr, 10) : 256;
  const u64 bytes = mib << 20, words = bytes / 16;
  int count = 0;
  CK(cudaGetDeviceCount(&count));
  if (count < 2) {
    fprintf(stderr, "peer-ceiling: needs two GPUs, %d visible\n", count);
    return 2;
  }
  int can01 = 0, can10 = 0;
  CK(cudaDeviceCanAccessPeer(&can01, 0, 1));
  CK(cudaDeviceCanAccessPeer(&can10, 1, 0));
  if (!can01 || !can10) {
    fprintf(stderr, "peer-ceiling: GPUs 0 and 1 cannot access each other's memory\n");
    return 2;
  }
  Side s[2];
  int sms = 0;
  for (int g = 0; g < 2; ++g) {
    s[g].dev = g;
    CK(cudaSetDevice(g));
    CK(cudaDeviceEnablePeerAccess(1 - g, 0));
    CK(cudaStreamCreateWithFlags(&s[g].stream, cudaStreamNonBlocking));
    CK(cudaEventCreate(&s[g].start));
    CK(cudaEventCreate(&s[g].stop));
    CK(cudaMalloc(&s[g].src, bytes));
    CK(cudaMalloc(&s[g].dst, bytes));
    CK(cudaMalloc(&s[g].localSrc, bytes));
    CK(cudaMalloc(&s[g].localDst, bytes));
    CK(cudaMemset(s[g].src, 0x11 + g, bytes));
    CK(cudaMemset(s[g].localSrc, 0x21 + g, bytes));
    CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, g));
  }
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  printf("# peer-ceiling: %s x2, %llu MiB per direction, %d SMs; GB/s = bytes per direction / time\n", prop.name, (unsigned long long)mib, sms);

  const double ceBoth = timed(s, true, [&](Side& me, Side& peer) {
    CK(cudaSetDevice(me.dev));
    CK(cudaMemcpyPeerAsync(peer.dst, peer.dev, me.src, me.dev, bytes, me.stream));
  });
  const double ceOne = timed(s, false, [&](Side& me, Side& peer) {
    CK(cudaSetDevice(me.dev));
    CK(cudaMemcpyPeerAsync(peer.dst, peer.dev, me.src, me.dev, bytes, me.stream));
  });
  const auto row = [&](const char* what, double us) { printf("%-44s %10.1f µs %8.1f GB/s %6.3f\n", what, us, bytes / (us * 1e3), ceBoth / us); };
  printf("%-44s %13s %13s %6s\n", "variant", "time", "per direction", "vs CE");
  row("copy engine, both directions at once", ceBoth);
  row("copy engine, one direction alone", ceOne);

  char name[96];
  for (int threads : {256, 512, 1024}) {
    for (int blocks : {16, 32, 66, 132, 264}) {
      if (blocks * threads > sms * 2048) continue;
      const auto push4 = [&](Side& me, Side& peer) { launchSweep<4, false>(me, peer, blocks, threads, words); };
      const auto push8 = [&](Side& me, Side& peer) { launchSweep<8, false>(me, peer, blocks, threads, words); };
      const auto pull4 = [&](Side& me, Side& peer) { launchSweep<4, true>(me, peer, blocks, threads, words); };
      const auto pull8 = [&](Side& me, Side& peer) { launchSweep<8, true>(me, peer, blocks, threads, words); };
      snprintf(name, sizeof name, "push %4d x %4d, 4 loads in flight", blocks, threads);
      row(name, timed(s, true, push4));
      snprintf(name, sizeof name, "push %4d x %4d, 8 loads in flight", blocks, threads);
      row(name, timed(s, true, push8));
      snprintf(name, sizeof name, "pull %4d x %4d, 4 loads in flight", blocks, threads);
      row(name, timed(s, true, pull4));
      snprintf(name, sizeof name, "pull %4d x %4d, 8 loads in flight", blocks, threads);
      row(name, timed(s, true, pull8));
    }
  }
  // A W = 2 exchange: each GPU pushes `bytes` to its peer and copies `bytes` of its own share,
  // with the blocks split between the two.
  for (int peerShare : {25, 50, 75}) {
    const int blocks = 2 * sms, threads = 512;
    const int peerBlocks = std::max(1, blocks * peerShare / 100);
    const double us = timed(s, true, [&](Side& me, Side& peer) {
      CK(cudaSetDevice(me.dev));
      mixed<4><<<blocks, threads, 0, me.stream>>>(peer.dst, me.localDst, me.src, me.localSrc, words, peerBlocks);
      CK(cudaGetLastError());
    });
    snprintf(name, sizeof name, "push + local share, %d%% of %d blocks to peer", peerShare, blocks);
    row(name, us);
  }
  for (int g = 0; g < 2; ++g) {
    CK(cudaSetDevice(g));
    CK(cudaFree(s[g].src));
    CK(cudaFree(s[g].dst));
    CK(cudaFree(s[g].localSrc));
    CK(cudaFree(s[g].localDst));
  }
  return 0;
}
