// kernels/moe-tokens.cu compiled for the host, so the tests run the GPU kernels' own code (routing
// order, struct layouts, gates, the f32 sums and roundings) where there is no GPU. A block's
// threads are host threads meeting at a barrier where the kernel syncs; kernels that never sync run
// their threads in a loop. -ffp-contract=off keeps the f32 intrinsics unfused, as __fmul_rn /
// __fadd_rn are on the device. One kernel runs at a time (__shared__ is static here).
#include <barrier>
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
thread_local dim3 threadIdx, blockIdx;
dim3 blockDim, gridDim;
static std::barrier<>* blockBarrier;

#define __global__
#define __device__
#define __forceinline__ inline
#define __launch_bounds__(n)
#define __shared__ static

inline void __syncthreads() { blockBarrier->arrive_and_wait(); }
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fadd_rn(float a, float b) { return a + b; }
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

#include "moe-tokens.cu"

static void run(unsigned grid, unsigned block, bool syncs, const std::function<void()>& body) {
  gridDim.x = grid;
  blockDim.x = block;
  for (unsigned b = 0; b < grid; b++) {
    if (!syncs) {
      blockIdx.x = b;
      for (unsigned t = 0; t < block; t++) {
        threadIdx.x = t;
        body();
      }
      continue;
    }
    std::barrier<> bar(block);
    blockBarrier = &bar;
    std::vector<std::thread> threads;
    for (unsigned t = 0; t < block; t++) threads.emplace_back([&body, b, t] {
      blockIdx.x = b;
      threadIdx.x = t;
      body();
    });
    for (auto& th : threads) th.join();
  }
}

static std::mutex one;

extern "C" int mt_emulate(const char* kernel, const void* params, unsigned grid, unsigned block) {
  std::lock_guard<std::mutex> lock(one);
#define KERNEL(fn, Args, syncs)               \
  if (!std::strcmp(kernel, #fn)) {            \
    Args p;                                   \
    std::memcpy(&p, params, sizeof p);        \
    run(grid, block, syncs, [&p] { fn(p); }); \
    return 0;                                 \
  }
  KERNEL(mt_route_count, RouteArgs, false)
  KERNEL(mt_route_scan, RouteArgs, true)
  KERNEL(mt_gather, GatherArgs, false)
  KERNEL(mt_dispatch_layout, LayoutArgs, false)
  KERNEL(mt_dispatch_unpack, LayoutArgs, false)
  KERNEL(mt_combine_reduce, ReduceArgs, false)
  return -1;
}

extern "C" void mt_fill(unsigned long long address, unsigned long long bytes, int value) { std::memset((void*)address, value, bytes); }
