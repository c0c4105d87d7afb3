// Acquire/release flags between ranks (system scope: peers may be other GPUs) and bounded waits.
#pragma once
#include "config.cuh"

#ifndef A2AV_ONE_GPU
#define A2AV_ONE_GPU 0
#endif

// When every rank of the job runs on this one GPU (A2AV_ONE_GPU, set by the host), device scope is
// enough and cheaper; otherwise peers are other GPUs and flags need system scope.
#if A2AV_ONE_GPU
#define A2AV_SCOPE "gpu"
__device__ __forceinline__ void fence_peers() { __threadfence(); }
#else
#define A2AV_SCOPE "sys"
__device__ __forceinline__ void fence_peers() { __threadfence_system(); }
#endif

__device__ __forceinline__ i64 ld_acquire_peer(const i64* p) {
  i64 v;
  asm volatile("ld.acquire." A2AV_SCOPE ".global.s64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
}

__device__ __forceinline__ void st_release_peer(i64* p, i64 v) {
  asm volatile("st.release." A2AV_SCOPE ".global.s64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}

__device__ __forceinline__ i64 ld_volatile(const i64* p) { return *(const volatile i64*)p; }
__device__ __forceinline__ void st_volatile(i64* p, i64 v) { *(volatile i64*)p = v; }

__device__ __forceinline__ u64 global_timer_ns() {
  u64 t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// Spins until *flag >= target; false when deadline (globaltimer ns) passes first.
__device__ __forceinline__ bool wait_at_least(const i64* flag, i64 target, u64 deadline) {
  int spins = 0;
  while (ld_acquire_peer(flag) < target) {
    if (++spins == 64) {
      spins = 0;
      if (global_timer_ns() > deadline) return ld_acquire_peer(flag) >= target;
    }
  }
  return true;
}

// First error wins; later ones are dropped so the host sees the root cause.
__device__ __forceinline__ void record_status(LaneHeader* h, i64 code, i64 rank, i64 peer, i64 needed, i64 available,
                                              i64 reportedBy) {
  if (atomicCAS((u64*)&h->status[0], 0ull, (u64)code) != 0ull) return;
  h->status[1] = rank;
  h->status[2] = peer;
  h->status[3] = needed;
  h->status[4] = available;
  h->status[5] = reportedBy;
  fence_peers();
}
