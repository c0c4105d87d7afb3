// CUDA's builtins for a kernels/ .cu compiled by a host C++ compiler (tests/*/emulate.cpp), so the
// tests run the GPU kernels' own code where there is no GPU. A block's threads are host threads
// meeting at a barrier where the kernel syncs; kernels that never sync run their threads in a loop.
// The f32 intrinsics are plain float operations: built with -ffp-contract=off they stay unfused, as
// __fmul_rn / __fadd_rn are on the device. One kernel runs at a time (__shared__ is static here).
#pragma once
#include <atomic>
#include <barrier>
#include <climits>
#include <cmath>
#include <cstring>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

struct dim3 {
  unsigned x = 1, y = 1, z = 1;
};
struct uint4 {
  unsigned x, y, z, w;
};
inline thread_local dim3 threadIdx, blockIdx;
inline dim3 blockDim, gridDim;
inline std::barrier<>* blockBarrier;

#define __global__
#define __device__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __shared__ static

inline void __syncthreads() { blockBarrier->arrive_and_wait(); }
// Warp operations as the block's barriers: right where every thread of the block reaches each
// alike (the kernels that use them call them the same number of times in every thread).
inline void __syncwarp(unsigned = 0xffffffffu) { blockBarrier->arrive_and_wait(); }
inline unsigned __match_any_sync(unsigned, int value) {
  static int values[1024];
  values[threadIdx.x] = value;
  blockBarrier->arrive_and_wait();
  const unsigned base = threadIdx.x & ~31u;
  unsigned mask = 0;
  for (unsigned j = 0; j < 32 && base + j < blockDim.x; j++)
    if (values[base + j] == value) mask |= 1u << j;
  blockBarrier->arrive_and_wait();
  return mask;
}
inline int __popc(unsigned x) { return __builtin_popcount(x); }
// Blocks run one after another here: a fence orders nothing more than the barrier does.
inline void __threadfence() { std::atomic_thread_fence(std::memory_order_seq_cst); }
template <class T>
T __ldcg(const T* p) {
  return *p;
}
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fsub_rn(float a, float b) { return a - b; }
inline float __ll2float_rn(long long x) { return (float)x; }
inline int __float2int_rn(float x) {
  if (x != x) return 0;
  if (x >= 2147483648.f) return INT_MAX;
  if (x <= -2147483648.f) return INT_MIN;
  return (int)std::nearbyint(x);  // the default rounding mode: nearest, ties to even
}
inline unsigned __float_as_uint(float f) {
  unsigned u;
  std::memcpy(&u, &f, 4);
  return u;
}
inline float __uint_as_float(unsigned u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
template <class T>
T atomicAdd(T* p, T v) {
  return __atomic_fetch_add(p, v, __ATOMIC_RELAXED);
}
template <class T>
T atomicMax(T* p, T v) {
  T old = __atomic_load_n(p, __ATOMIC_RELAXED);
  while (old < v && !__atomic_compare_exchange_n(p, &old, v, false, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
  }
  return old;
}

inline void runGrid(unsigned grid, unsigned block, bool syncs, const std::function<void()>& body) {
  gridDim.x = grid;
  blockDim.x = block;
  if (!syncs) {
    for (unsigned b = 0; b < grid; b++) {
      blockIdx.x = b;
      for (unsigned t = 0; t < block; t++) {
        threadIdx.x = t;
        body();
      }
    }
    return;
  }
  // One host thread per CUDA thread, walking the blocks in order; the barrier after each block
  // keeps the next one off the (static) shared memory until every thread is done with it.
  std::barrier<> bar(block);
  blockBarrier = &bar;
  std::vector<std::thread> threads;
  for (unsigned t = 0; t < block; t++) threads.emplace_back([&body, &bar, grid, t] {
    threadIdx.x = t;
    for (unsigned b = 0; b < grid; b++) {
      blockIdx.x = b;
      body();
      bar.arrive_and_wait();
    }
  });
  for (auto& th : threads) th.join();
}

// Held by an emulator's entry point for the whole launch: the grid's sizes and __shared__ are global.
inline std::mutex oneKernel;

// A line of an emulator's kernel table, inside its entry point (which names kernel, params, grid and
// block): runs `fn` on a copy of its argument struct when `kernel` names it.
#define KERNEL(fn, Args, syncs)                      \
  if (!std::strcmp(kernel, #fn)) {                   \
    Args p;                                          \
    std::memcpy(&p, params, sizeof p);               \
    runGrid(grid, block, syncs, [&p] { fn(p); });    \
    return 0;                                        \
  }
