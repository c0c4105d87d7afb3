// kernels/pipeline.cu compiled for the host (the CUDA builtins: tests/support/cuda-on-host.hpp), so
// the tests run the GPU kernels' own code (indexing, argument structs, summation orders) where there
// is no GPU.
#include "../support/cuda-on-host.hpp"

#include "pipeline.cu"

extern "C" int pl_emulate(const char* kernel, const void* params, unsigned grid, unsigned block) {
  std::lock_guard<std::mutex> lock(oneKernel);
  KERNEL(pl_scan_lengths, ScanArgs, true)
  KERNEL(pl_segment_bases, BasesArgs, false)
  KERNEL(pl_gen_ids, IdsArgs, false)
  KERNEL(pl_gen_dense, DenseArgs, false)
  KERNEL(pl_embedding_bag, BagArgs, false)
  KERNEL(pl_scatter_update, BagArgs, false)
  KERNEL(pl_gemm, GemmArgs, true)
  KERNEL(pl_gemm_sum, GemmArgs, false)
  KERNEL(pl_col_sum, ColSumArgs, false)
  KERNEL(pl_col_sum_chunks, ColSumArgs, false)
  KERNEL(pl_relu_grad, ReluGradArgs, false)
  KERNEL(pl_permute, PermuteArgs, false)
  KERNEL(pl_loss, LossArgs, true)
  KERNEL(pl_sgd, SgdArgs, false)
  KERNEL(pl_fill, FillArgs, false)
  KERNEL(pl_checksum, ChecksumArgs, false)
  return -1;
}

extern "C" void pl_zero(unsigned long long address, unsigned long long bytes) { std::memset((void*)address, 0, bytes); }
