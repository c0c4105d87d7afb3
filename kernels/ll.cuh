// LL ("low latency") packets: 16 bytes carry 8 bytes of data and the call's flag twice, one per
// 8-byte half, each half written atomically. A reader that sees both flags has the data: no fence
// and no separate signal, so a small message costs one trip instead of data + flag.
#pragma once
#include "config.cuh"
#include "signals.cuh"

__device__ __forceinline__ void ll_store(uint4* p, u64 data, u32 flag) {
  asm volatile("st.relaxed." A2AV_SCOPE ".global.v4.u32 [%0], {%1,%2,%3,%4};" ::"l"(p), "r"((u32)data), "r"(flag), "r"((u32)(data >> 32)),
               "r"(flag)
               : "memory");
}

// Spins until the packet carries `flag`; false if the deadline (globaltimer ns) passes first.
__device__ __forceinline__ bool ll_load(const uint4* p, u32 flag, u64 deadline, u64& data) {
  int spins = 0;
  for (;;) {
    u32 lo, f0, hi, f1;
    asm volatile("ld.relaxed." A2AV_SCOPE ".global.v4.u32 {%0,%1,%2,%3}, [%4];" : "=r"(lo), "=r"(f0), "=r"(hi), "=r"(f1) : "l"(p) : "memory");
    if (f0 == flag && f1 == flag) {
      data = ((u64)hi << 32) | lo;
      return true;
    }
    if (++spins == 64) {
      spins = 0;
      if (global_timer_ns() > deadline) return false;
    }
  }
}

// Up to 8 bytes from any address; reads only the aligned 4-byte words that hold wanted bytes.
__device__ __forceinline__ u64 load_bytes(const u8* src, u32 n) {
  if (n < 8) {
    u64 v = 0;
    for (u32 i = 0; i < n; ++i) v |= (u64)src[i] << (8 * i);
    return v;
  }
  const u32* w = (const u32*)((u64)src & ~3ull);
  const u32 shift = ((u32)(u64)src & 3u) * 8u;
  const u32 a0 = w[0], a1 = w[1], a2 = shift ? w[2] : 0u;
  return ((u64)__funnelshift_r(a1, a2, shift) << 32) | __funnelshift_r(a0, a1, shift);
}

__device__ __forceinline__ void store_bytes(u8* dst, u64 v, u32 n) {
  if (n == 8 && ((u64)dst & 7) == 0) {
    *(u64*)dst = v;
  } else if (n == 8 && ((u64)dst & 3) == 0) {
    ((u32*)dst)[0] = (u32)v;
    ((u32*)dst)[1] = (u32)(v >> 32);
  } else {
    for (u32 i = 0; i < n; ++i) dst[i] = (u8)(v >> (8 * i));
  }
}
