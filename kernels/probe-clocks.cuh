// A probe's phase clocks, with A2AV_PROBE_DEFINES=A2AV_PROBE_CLOCKS (src/backends/cuda/probe-defines.ts):
// thread 0 of block 0 of a kernel that has marks notes clock64() at each, and every 1000th launch
// on a device prints the SM cycles between them (docs/perf.md has what they found). Where a small
// call's time goes inside one launch, which no event can split. Never in real runs: without the
// define the marks are nothing.
#pragma once
#ifdef A2AV_PROBE_CLOCKS
#ifndef __CUDACC_RTC__
#include <cstdio>
#endif
#define PROBE_CLOCKS long long probeClocks[12] = {}
#define PROBE_CLOCK(i) \
  if (blockIdx.x == 0 && threadIdx.x == 0) probeClocks[i] = clock64()
// The cycles from mark i - 1 to mark i.
#define PROBE_CYCLES(i) (probeClocks[i] - probeClocks[(i) - 1])
// True on thread 0 of block 0 at every 1000th launch; `launches` a __device__ unsigned of the kernel's.
#define PROBE_CLOCKS_DUE(launches) (blockIdx.x == 0 && threadIdx.x == 0 && atomicAdd(&(launches), 1u) % 1000 == 999)
#else
#define PROBE_CLOCKS
#define PROBE_CLOCK(i)
#endif

// A probe's call timeline, with A2AV_PROBE_DEFINES=A2AV_PROBE_STAMPS: block 0 of each kernel of a
// call notes the global timer (ns) where it starts its work (past its wait for the kernel before),
// and the next call's first kernel prints, for rank 0 every 16th call, when each began after the
// exchange did: which kernel of a multi-kernel call holds the time that events around the whole
// call cannot split. Slots: 0 exchange begins, 1 exchange ends, 2 index begins, 3 copy begins, 4
// completion begins (the copy has ended), 5 completion ends, 6 the call's kind, 7 the index's last
// block ends (x_slice_index: PROBE_STAMP_LAST). Ranks of one process share the module. The print
// is in the first kernel a call launches: printed from the completion kernel, its arguments' stack
// made that kernel's first launch grow the context's local memory, which waits for every running
// kernel, among them peers' exchanges that wait for this rank (docs/perf.md).
#ifdef A2AV_PROBE_STAMPS
#ifndef __CUDACC_RTC__
#include <cstdio>
#endif
__device__ unsigned long long g_probeStamps[1024][8];
__device__ unsigned g_probeStampBlocks[1024];
__device__ unsigned g_probeStampCalls;
#define PROBE_STAMP(rank, i) \
  if (blockIdx.x == 0 && threadIdx.x == 0) g_probeStamps[rank][i] = global_timer_ns()
// Slot i when the last of the grid's blocks gets here (every thread of the block calls it).
#define PROBE_STAMP_LAST(rank, i)                                                      \
  __syncthreads();                                                                     \
  if (threadIdx.x == 0 && atomicAdd(&g_probeStampBlocks[rank], 1u) == gridDim.x - 1) { \
    g_probeStampBlocks[rank] = 0;                                                      \
    g_probeStamps[rank][i] = global_timer_ns();                                        \
  }
#define PROBE_STAMP_LAG(s, i) ((s)[i] == 0 || (s)[0] == 0 ? -1ll : (long long)((s)[i] - (s)[0]))
// The last call's timeline (rank 0, every 16th call), then this call's begins: the other slots
// cleared, so a kernel the call did not run prints as -1.
#define PROBE_STAMP_BEGIN(rank, kind)                                                                               \
  if (blockIdx.x == 0 && threadIdx.x == 0) {                                                                        \
    unsigned long long* s_ = g_probeStamps[rank];                                                                   \
    if ((rank) == 0 && s_[5] != 0 && atomicAdd(&g_probeStampCalls, 1u) % 16 == 15)                                 \
      printf("stamps kind=%llu rank=0 ns after the exchange began: exchange ends %lld, index begins %lld, index ends %lld, copy begins %lld, copy ends %lld, done %lld\n", \
             s_[6], PROBE_STAMP_LAG(s_, 1), PROBE_STAMP_LAG(s_, 2), PROBE_STAMP_LAG(s_, 7), PROBE_STAMP_LAG(s_, 3), PROBE_STAMP_LAG(s_, 4), PROBE_STAMP_LAG(s_, 5)); \
    for (int i_ = 1; i_ < 8; ++i_) s_[i_] = i_ == 6 ? s_[i_] : 0;                                                 \
    s_[6] = (unsigned long long)(kind);                                                                             \
    s_[0] = global_timer_ns();                                                                                      \
  }
#else
#define PROBE_STAMP(rank, i)
#define PROBE_STAMP_LAST(rank, i)
#define PROBE_STAMP_BEGIN(rank, kind)
#endif
