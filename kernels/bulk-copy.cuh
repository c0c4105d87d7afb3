// Hopper bulk copies (TMA): one thread streams a block's pieces global -> shared -> global through
// A2AV_BULK_STAGES buffers, so many bytes are in flight per SM with almost no instructions.
// Needs 16-byte aligned addresses and sizes (the caller checks) and sm_90.
#pragma once
#include "config.cuh"

#ifndef A2AV_BULK_STAGES
#define A2AV_BULK_STAGES 4
#endif
#define A2AV_BULK_CHUNK 16384

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define A2AV_HAS_BULK 1
#else
#define A2AV_HAS_BULK 0
#endif

struct BulkPipe {
  u64 bar[A2AV_BULK_STAGES];
  u32 phase;   // bit s = parity to wait for on stage s
  u64 issued;  // chunks whose load was issued
  u64 stored;  // chunks whose store was issued
};

#if A2AV_HAS_BULK
__device__ __forceinline__ u32 smem_addr(const void* p) { return (u32)__cvta_generic_to_shared(p); }

__device__ __forceinline__ void bulk_init(BulkPipe* bp) {
  for (int s = 0; s < A2AV_BULK_STAGES; ++s)
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(smem_addr(&bp->bar[s])));
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  bp->phase = 0;
  bp->issued = bp->stored = 0;
}

__device__ __forceinline__ void bulk_load(BulkPipe* bp, u8* buf, const u8* src, u32 bytes) {
  const int s = (int)(bp->issued % A2AV_BULK_STAGES);
  const u32 bar = smem_addr(&bp->bar[s]);
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes) : "memory");
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
                   smem_addr(buf + (u64)s * A2AV_BULK_CHUNK)),
               "l"(src), "r"(bytes), "r"(bar)
               : "memory");
  ++bp->issued;
}

__device__ __forceinline__ void bulk_wait_loaded(BulkPipe* bp, int s) {
  const u32 bar = smem_addr(&bp->bar[s]);
  const u32 parity = (bp->phase >> s) & 1;
  u32 done = 0;
  while (!done) {
    asm volatile(
        "{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n selp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(bar), "r"(parity)
        : "memory");
  }
  bp->phase ^= 1u << s;
}

__device__ __forceinline__ void bulk_store(u8* dst, const u8* buf, u32 bytes) {
  asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;" ::"l"(dst), "r"(smem_addr(buf)), "r"(bytes)
               : "memory");
  asm volatile("cp.async.bulk.commit_group;" ::: "memory");
}

// Waits until at most N stores still read shared memory.
template <int N>
__device__ __forceinline__ void bulk_wait_reads() {
  asm volatile("cp.async.bulk.wait_group.read %0;" ::"n"(N) : "memory");
}

// Waits until every store has landed in global memory, visible to generic-proxy fences after it.
__device__ __forceinline__ void bulk_drain() {
  asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
  asm volatile("fence.proxy.async.global;" ::: "memory");
}
#endif
