// kernels/moe-tokens.cu compiled for the host (the CUDA builtins: tests/support/cuda-on-host.hpp), so
// the tests run the GPU kernels' own code (routing order, struct layouts, gates, the f32 sums and
// roundings) where there is no GPU.
#include "../support/cuda-on-host.hpp"

#include "moe-tokens.cu"

extern "C" int mt_emulate(const char* kernel, const void* params, unsigned grid, unsigned block) {
  std::lock_guard<std::mutex> lock(oneKernel);
  KERNEL(mt_route, RouteArgs, true)
  KERNEL(mt_gather, GatherArgs, false)
  KERNEL(mt_route_gather, RouteGatherArgs, true)
  KERNEL(mt_dispatch_layout, LayoutArgs, false)
  KERNEL(mt_dispatch_unpack, LayoutArgs, true)
  KERNEL(mt_combine_reduce, ReduceArgs, true)
  return -1;
}
