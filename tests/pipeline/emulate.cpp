// kernels/pipeline.cu compiled for the host, so the tests run the GPU kernels' own code (indexing,
// argument structs, summation orders) where there is no GPU. A block's threads are host threads
// meeting at a barrier where the kernel syncs; kernels that never sync run their threads in a loop.
// The f32 intrinsics are plain float operations: -ffp-contract=off keeps them unfused, as
// __fmul_rn / __fadd_rn are on the device. One kernel runs at a time (__shared__ is static here).
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
inline float __fsub_rn(float a, float b) { return a - b; }
inline float __ll2float_rn(long long x) { return (float)x; }
inline int __float2int_rn(float x) {
  if (x != x) return 0;
  if (x >= 2147483648.f) return INT_MAX;
  if (x <= -2147483648.f) return INT_MIN;
  return (int)std::nearbyint(x);  // the default rounding mode: nearest, ties to even
}
template <class T>
T atomicAdd(T* p, T v) {
  return __atomic_fetch_add(p, v, __ATOMIC_RELAXED);
}

#include "pipeline.cu"

static void run(unsigned grid, unsigned block, bool syncs, const std::function<void()>& body) {
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

static std::mutex one;

extern "C" int pl_emulate(const char* kernel, const void* params, unsigned grid, unsigned block) {
  std::lock_guard<std::mutex> lock(one);
#define KERNEL(fn, Args, syncs)                   \
  if (!std::strcmp(kernel, #fn)) {                \
    Args p;                                       \
    std::memcpy(&p, params, sizeof p);            \
    run(grid, block, syncs, [&p] { fn(p); });     \
    return 0;                                     \
  }
  KERNEL(pl_scan_lengths, ScanArgs, true)
  KERNEL(pl_segment_bases, BasesArgs, false)
  KERNEL(pl_gen_ids, IdsArgs, false)
  KERNEL(pl_gen_dense, DenseArgs, false)
  KERNEL(pl_embedding_bag, BagArgs, false)
  KERNEL(pl_scatter_update, BagArgs, false)
  KERNEL(pl_gemm, GemmArgs, true)
  KERNEL(pl_gemm_sum, GemmArgs, false)
  KERNEL(pl_col_sum, ColSumArgs, false)
  KERNEL(pl_relu_grad, ReluGradArgs, false)
  KERNEL(pl_permute, PermuteArgs, false)
  KERNEL(pl_loss, LossArgs, true)
  KERNEL(pl_sgd, SgdArgs, false)
  KERNEL(pl_fill, FillArgs, false)
  KERNEL(pl_checksum, ChecksumArgs, false)
  return -1;
}

extern "C" void pl_zero(unsigned long long address, unsigned long long bytes) { std::memset((void*)address, 0, bytes); }
