// The argument structs of kernels/pipeline.cu, field by field: every field is 8 bytes (a pointer,
// an i64, or an f64 carrying an f32 value), so field i sits at byte 8·i and the order is the whole
// layout. tests/pipeline.test.ts checks these lists against the structs in the .cu file.

import { ints, ptrs, type StructSpec } from '../jit/kernel-set.js';

export type { FieldKind } from '../jit/kernel-set.js';
/** A struct of kernels/pipeline.cu and the kernels taking it. */
export type KernelSpec = StructSpec;

export const KERNEL_SPECS = {
  scan: { struct: 'ScanArgs', kernels: ['pl_scan_lengths'], fields: [...ptrs('lengths', 'offsets', 'totals'), ...ints('segments', 'segLen', 'generate', 'seed', 'batch', 'rank', 'world', 'features', 'pooling')] },
  bases: { struct: 'BasesArgs', kernels: ['pl_segment_bases'], fields: [...ptrs('totals', 'bases', 'groupSums'), ...ints('segments', 'world', 'features')] },
  ids: { struct: 'IdsArgs', kernels: ['pl_gen_ids'], fields: [...ptrs('lengths', 'offsets', 'bases', 'ids'), ...ints('segments', 'segLen', 'seed', 'batch', 'rank', 'world', 'features', 'rows')] },
  dense: { struct: 'DenseArgs', kernels: ['pl_gen_dense'], fields: [...ptrs('x', 'labels'), ...ints('batchSize', 'denseIn', 'seed', 'batch', 'rank')] },
  bag: {
    struct: 'BagArgs',
    kernels: ['pl_embedding_bag', 'pl_scatter_update'],
    fields: [...ptrs('lengths', 'offsets', 'bases', 'ids', 'table', 'pooled'), ...ints('bags', 'segLen', 'featuresHere', 'rows', 'dim'), ['scale', 'float']],
  },
  gemm: { struct: 'GemmArgs', kernels: ['pl_gemm', 'pl_gemm_sum', 'pl_gemm_epilogue'], fields: [...ptrs('a', 'b', 'c', 'bias'), ...ints('m', 'n', 'k', 'lda', 'ldb', 'ldc', 'transA', 'transB', 'relu'), ...ptrs('partials'), ...ints('kChunk')] },
  colSum: { struct: 'ColSumArgs', kernels: ['pl_col_sum', 'pl_col_sum_chunks'], fields: [...ptrs('x', 'out'), ...ints('rows', 'cols', 'ld'), ...ptrs('partials'), ...ints('chunk')] },
  reluGrad: { struct: 'ReluGradArgs', kernels: ['pl_relu_grad'], fields: [...ptrs('dy', 'y', 'dz'), ...ints('rows', 'cols', 'ldDy', 'ldY', 'ldDz')] },
  permute: { struct: 'PermuteArgs', kernels: ['pl_permute'], fields: [...ptrs('wide', 'blocks'), ...ints('batchSize', 'slots', 'dim', 'ldWide', 'col0', 'toWide')] },
  loss: { struct: 'LossArgs', kernels: ['pl_loss'], fields: [...ptrs('y', 'labels', 'dy', 'loss'), ...ints('rows', 'ldY'), ['invRows', 'float']] },
  sgd: { struct: 'SgdArgs', kernels: ['pl_sgd'], fields: [...ptrs('params', 'grads'), ...ints('count'), ['lr', 'float']] },
  fill: { struct: 'FillArgs', kernels: ['pl_fill'], fields: [...ptrs('out'), ...ints('count', 'seed', 'tag', 'key', 'kind', 'shift'), ['scale', 'float']] },
  checksum: { struct: 'ChecksumArgs', kernels: ['pl_checksum'], fields: [...ptrs('words', 'out'), ...ints('count')] },
} satisfies Record<string, KernelSpec>;

export type KernelName = keyof typeof KERNEL_SPECS;
