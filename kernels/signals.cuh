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

// Adds to a peer's counter; the release orders this thread's earlier writes, and those of its block
// before a __syncthreads (cumulativity), before the count.
__device__ __forceinline__ void red_release_add_peer(i64* p, i64 v) {
  asm volatile("red.release." A2AV_SCOPE ".global.add.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}

__device__ __forceinline__ i64 ld_volatile(const i64* p) { return *(const volatile i64*)p; }
__device__ __forceinline__ void st_volatile(i64* p, i64 v) { *(volatile i64*)p = v; }

// LL packets (as NCCL's low-latency protocol): 8 data bytes travel with the call's flag in each
// 8-byte half of a 16-byte store, so a reader that sees both flags has the data, with no fence
// and no separate flag. Flags are never 0 (the pad starts zeroed) and differ between calls.
__device__ __forceinline__ u32 ll_flag(i64 seq) { return (u32)((u64)seq % 0xffffffffull) + 1u; }
__device__ __forceinline__ void ll_store(uint4* p, i64 v, u32 flag) {
  asm volatile("st.volatile.global.v4.u32 [%0], {%1,%2,%3,%4};" ::"l"(p), "r"((u32)v), "r"(flag), "r"((u32)((u64)v >> 32)),
               "r"(flag)
               : "memory");
}
// A packet through an acquire at the flags' scope (the WAIT_PRINT probe's second look).
__device__ __forceinline__ uint4 ll_load_acquire(const uint4* p) {
  uint4 v;
  asm volatile("ld.acquire." A2AV_SCOPE ".global.v4.u32 {%0,%1,%2,%3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ uint4 ll_load(const uint4* p) {
  uint4 v;
  asm volatile("ld.volatile.global.v4.u32 {%0,%1,%2,%3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ i64 ll_value(uint4 v) { return (i64)(((u64)v.z << 32) | v.x); }

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

// Spins until the packet at p carries flag; false when deadline (globaltimer ns) passes first,
// with *out the call whose packet is there instead (0: none yet): how far the writer got.
__device__ __forceinline__ bool ll_wait(const uint4* p, u32 flag, u64 deadline, i64* out) {
  int spins = 0;
  for (;;) {
    const uint4 v = ll_load(p);
    if (v.y == flag && v.w == flag) {
      *out = ll_value(v);
      return true;
    }
    if (++spins == 64) {
      spins = 0;
      if (global_timer_ns() > deadline) {
        *out = v.y == 0 ? 0 : (i64)v.y - 1;
        return false;
      }
    }
  }
}

// A timeout: the first one on the lane wins (the root cause), and it stays: the host aborts the
// communicator, and the lane's later kernels see it (the copy in the lane's header) and exit.
__device__ __forceinline__ void record_abort(LaneHeader* h, const StatusRecord& r) {
  if (atomicCAS((u64*)&h->abort.code, 0ull, (u64)r.code) != 0ull) return;
  h->status->abort = r;
  __threadfence_system();
}

// A refused call, by one thread: into its own slot of the lane's ring, so each call's handle finds
// its own record (the seq field says whose a slot holds). Read by the host after the call's event.
__device__ __forceinline__ void record_refusal(LaneHeader* h, const StatusRecord& r) {
  StatusArea* a = h->status;
  a->ring[r.seq % A2AV_STATUS_RING] = r;
  a->refused += 1;
  __threadfence_system();
}

// Completion, by one block: waits until every peer q has sent this lane the signals it announced for
// this call (signals(q)), then records the new counts. False when the deadline passes first, with a
// status naming the first such peer this thread saw (needed: this call; available: the one before).
template <typename Signals>
__device__ __forceinline__ bool await_done(LaneHeader* h, u8* lane, int W, int me, i64 seq, i64 timeoutNs, Signals signals) {
  const u64 deadline = global_timer_ns() + (u64)timeoutNs;
  i64* done = lane_done(lane, W);
  i64* expect = lane_expect(lane, W);
  bool ok = true;
  for (int q = threadIdx.x; q < W; q += blockDim.x) {
    const i64 target = expect[q] + signals(q);
    if (wait_at_least(done + q, target, deadline)) {
      expect[q] = target;
    } else {
      record_abort(h, StatusRecord{A2AV_ERR_TIMEOUT, me, q, seq, seq - 1, me, seq, A2AV_WAIT_DONE});
      ok = false;
    }
  }
  return ok;
}

// Where a completion kernel runs: the lane in every rank's pad and this rank's place in the job.
struct CallLane {
  u8* pad;  // this rank's own pad (padPeers[me], without the table load)
  u8* const* padPeers;
  u64 laneOffset;
  int world, me;
  i64 timeoutNs;
};

// The completion exchange of call seq, by one block: release this rank's stores to the peers with
// one signal each, then wait until every peer q has sent the signals(q) it announced. This
// thread's part of the wait: false when it timed out (recorded).
template <typename Signals>
__device__ bool signal_and_await(const CallLane& c, i64 seq, Signals signals) {
  u8* lane = c.pad + c.laneOffset;
  fence_peers();
  for (int peer = threadIdx.x; peer < c.world; peer += blockDim.x) red_release_add_peer(lane_done(c.padPeers[peer] + c.laneOffset, c.world) + c.me, 1);
  return await_done((LaneHeader*)lane, lane, c.world, c.me, seq, c.timeoutNs, signals);
}

// A call's last kernel, by one block (a2av_done, x_done): the kernels before it on the stream
// have finished, so release their stores to the peers with one signal each, wait until every
// peer q has sent the signals(q, seq) it announced, then number the call done. Nothing on a lane
// that has timed out.
template <typename Signals>
__device__ void complete_call(const CallLane& c, Signals signals) {
  const int tid = threadIdx.x;
  LaneHeader* h = (LaneHeader*)(c.pad + c.laneOffset);
  __shared__ int sAbort;
  __shared__ i64 sSeq;
  if (tid == 0) {
    sAbort = ld_volatile(&h->abort.code) != A2AV_OK;
    sSeq = ld_volatile(&h->seq) + 1;
  }
  __syncthreads();
  if (sAbort) return;
  const i64 seq = sSeq;
  if (!signal_and_await(c, seq, [&](int q) { return signals(q, seq); })) sAbort = 1;
  __syncthreads();
  if (tid == 0 && !sAbort) st_volatile(&h->seq, seq);
}
