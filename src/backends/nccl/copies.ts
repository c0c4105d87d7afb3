// The stream-ordered host -> device copy the nccl backend needs: a small header and outSplitsOffsets
// must land in stream order, which cuMemcpyHtoD (legacy stream, may return before the DMA lands) does
// not give. From pageable memory (a typed array), so bound here with a `const void *` source:
// src/cuda/driver.ts binds the same call for pinned addresses (CudaDevice.uploadAsync). Bound from
// the libcuda that cu() already loaded and initialised: dlopen of its soname returns that same library.
import koffi from 'koffi';
import { check, cu } from '../../cuda/driver.js';
import type { CudaStream } from '../../cuda/device.js';

type Fn = (...args: any[]) => number;
let htod: Fn | undefined;

function bind(): Fn {
  if (htod) return htod;
  cu(); // loads libcuda (with its search and errors) and runs cuInit
  htod = koffi.load('libcuda.so.1').func('int cuMemcpyHtoDAsync_v2(uint64_t dst, const void *src, size_t bytes, uint64_t stream)') as Fn;
  return htod;
}

/**
 * Queues a copy of `src` to device memory on `stream`. From pageable memory the driver stages the
 * bytes before returning, so `src` may be reused at once.
 */
export function uploadAsync(dst: bigint, src: ArrayBufferView, stream: CudaStream): void {
  check('cuMemcpyHtoDAsync', bind()(dst, src, BigInt(src.byteLength), stream.handle));
}
