// Block-wide copy of a byte range between any two addresses. The widest access that both sides
// can share (16, 8, 4, 2 or 1 bytes) is used for the body; the head aligns the destination.
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

template <typename T>
__device__ __forceinline__ void copy_words(T* d, const T* s, u64 count) {
  for (u64 i = threadIdx.x; i < count; i += blockDim.x) d[i] = s[i];
}

__device__ __forceinline__ void copy_bytes(u8* dst, const u8* src, u64 n) {
  const u64 mis = (u64)dst ^ (u64)src;
  const u64 w = (mis & 15) == 0 ? 16 : (mis & 7) == 0 ? 8 : (mis & 3) == 0 ? 4 : (mis & 1) == 0 ? 2 : 1;
  u64 head = (w - ((u64)dst & (w - 1))) & (w - 1);
  if (head > n) head = n;
  for (u64 i = threadIdx.x; i < head; i += blockDim.x) dst[i] = src[i];
  dst += head;
  src += head;
  n -= head;
  const u64 words = n / w;
  switch (w) {
    case 16: copy_vec16<A2AV_COPY_UNROLL>((uint4*)dst, (const uint4*)src, words); break;
    case 8: copy_words((u64*)dst, (const u64*)src, words); break;
    case 4: copy_words((u32*)dst, (const u32*)src, words); break;
    case 2: copy_words((unsigned short*)dst, (const unsigned short*)src, words); break;
    default: copy_words(dst, src, words); break;
  }
  const u64 done = words * w;
  for (u64 i = done + threadIdx.x; i < n; i += blockDim.x) dst[i] = src[i];
}
