// Block-wide copy of a byte range between any two addresses: the destination is aligned to 16 bytes
// by a short head, the body moves 16 bytes per access, a short tail finishes.
#pragma once
#include "config.cuh"

// Input is read once: skip L1.
__device__ __forceinline__ uint4 ld_stream(const uint4* p) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}

template <int UNROLL>
__device__ __forceinline__ void copy_vec16(uint4* d, const uint4* s, u64 count) {
  const u64 bd = blockDim.x;
  u64 i = threadIdx.x;
  for (; i + (UNROLL - 1) * bd < count; i += UNROLL * bd) {
    uint4 r[UNROLL];
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) r[u] = ld_stream(s + i + u * bd);
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) d[i + u * bd] = r[u];
  }
  for (; i < count; i += bd) d[i] = ld_stream(s + i);
}

// Source and destination disagree modulo 16 (odd row sizes): the destination gets aligned 16-byte
// stores, each assembled from five aligned 4-byte source words by funnel shifts. The last word read
// holds needed bytes, so nothing past the source range's last 4-byte word is touched.
__device__ __forceinline__ void copy_shifted16(uint4* d, const u8* src, u64 count) {
  const u32* s = (const u32*)((u64)src & ~3ull);
  const u32 shift = ((u32)(u64)src & 3u) * 8u;
  for (u64 i = threadIdx.x; i < count; i += blockDim.x) {
    const u32* w = s + 4 * i;
    const u32 a0 = w[0], a1 = w[1], a2 = w[2], a3 = w[3], a4 = shift ? w[4] : 0u;
    d[i] = make_uint4(__funnelshift_r(a0, a1, shift), __funnelshift_r(a1, a2, shift), __funnelshift_r(a2, a3, shift),
                      __funnelshift_r(a3, a4, shift));
  }
}

// UNROLL: 16-byte loads each thread keeps in flight (a2av_copy's slices are one word per thread, and
// its registers must stay few for full occupancy).
template <int UNROLL = A2AV_COPY_UNROLL>
__device__ __forceinline__ void copy_bytes(u8* dst, const u8* src, u64 n) {
  const bool together = (((u64)dst ^ (u64)src) & 15) == 0;
  u64 head = (16 - ((u64)dst & 15)) & 15;
  if (head > n) head = n;
  for (u64 i = threadIdx.x; i < head; i += blockDim.x) dst[i] = src[i];
  dst += head;
  src += head;
  n -= head;
  const u64 words = n / 16;
  if (together) copy_vec16<UNROLL>((uint4*)dst, (const uint4*)src, words);
  else copy_shifted16((uint4*)dst, src, words);
  for (u64 i = words * 16 + threadIdx.x; i < n; i += blockDim.x) dst[i] = src[i];
}

// Block b of B takes segment *seg, as block b - *first of the *quota blocks given to it, the blocks
// split between the segments in proportion to their bytes, so every destination is written at once.
// The shared sweep takes the segments one after the other: across two GPUs a rank copies its local
// share, then its peer's (one direction of the link busy at a time, the local copy not overlapped);
// measured 428 -> 383 us at 256 MiB per rank on 2 H200s (docs/perf.md). False (the shared sweep
// then) unless there are two or more non-empty segments and a block for each. len(k): segment k's
// bytes, k < W (split_by_peer: from an array). tests/peer-split.test.ts checks it on the host.
template <class Len>
__host__ __device__ inline bool split_by_peer_with(int W, Len len, i64 total, i64 B, i64 b, int* seg, i64* first, i64* quota) {
  int nonEmpty = 0, largest = 0;
  i64 most = -1;
  for (int k = 0; k < W; ++k) {
    const i64 n = len(k);
    if (n > 0) ++nonEmpty;
    if (n > most) most = n, largest = k;
  }
  if (nonEmpty < 2 || B < nonEmpty) return false;
  const i64 extra = B - nonEmpty;
  i64 given = 0;
  for (int k = 0; k < W; ++k) {
    const i64 n = len(k);
    given += n > 0 ? 1 + extra * n / total : 0;
  }
  i64 at = 0;
  for (int k = 0; k < W; ++k) {
    const i64 n = len(k);
    const i64 q = n <= 0 ? 0 : 1 + extra * n / total + (k == largest ? B - given : 0);
    if (b < at + q) {
      *seg = k;
      *first = at;
      *quota = q;
      return true;
    }
    at += q;
  }
  return false;  // not reached: the quotas add up to B
}
__host__ __device__ inline bool split_by_peer(int W, const i64* len, i64 total, i64 B, i64 b, int* seg, i64* first, i64* quota) {
  return split_by_peer_with(W, [len](int k) { return len[k]; }, total, B, b, seg, first, quota);
}
