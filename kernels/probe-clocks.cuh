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
