// CUDA driver API through koffi. Handles and device pointers travel as bigint (uint64_t), which is
// ABI-identical to the pointers on every 64-bit target and avoids wrapping objects on hot paths.
// Every call goes through check(), which throws CudaError with the driver's own error name.
import koffi from 'koffi';
import { CudaError } from '../errors.js';
import { shareHardwareQueues } from './hardware-queues.js';
import { traced } from './driver-trace.js';
import { loadLibrary, systemLibFolders, wheelFolders } from '../native/find-library.js';

const signatures = {
  cuInit: 'int cuInit(uint32_t flags)',
  cuDriverGetVersion: 'int cuDriverGetVersion(_Out_ int *v)',
  cuGetErrorName: 'int cuGetErrorName(int status, _Out_ const char **name)',
  cuGetErrorString: 'int cuGetErrorString(int status, _Out_ const char **text)',
  cuDeviceGetCount: 'int cuDeviceGetCount(_Out_ int *n)',
  cuDeviceGet: 'int cuDeviceGet(_Out_ int *dev, int ordinal)',
  cuDeviceGetName: 'int cuDeviceGetName(_Out_ uint8_t *name, int len, int dev)',
  cuDeviceGetAttribute: 'int cuDeviceGetAttribute(_Out_ int *v, int attr, int dev)',
  cuDeviceCanAccessPeer: 'int cuDeviceCanAccessPeer(_Out_ int *can, int dev, int peer)',
  cuDevicePrimaryCtxRetain: 'int cuDevicePrimaryCtxRetain(_Out_ uint64_t *ctx, int dev)',
  cuDevicePrimaryCtxRelease: 'int cuDevicePrimaryCtxRelease_v2(int dev)',
  cuCtxSetCurrent: 'int cuCtxSetCurrent(uint64_t ctx)',
  cuCtxEnablePeerAccess: 'int cuCtxEnablePeerAccess(uint64_t peerCtx, uint32_t flags)',
  cuCtxSynchronize: 'int cuCtxSynchronize()',
  cuCtxGetDevice: 'int cuCtxGetDevice(_Out_ int *dev)',
  cuMemAlloc: 'int cuMemAlloc_v2(_Out_ uint64_t *ptr, size_t bytes)',
  cuMemFree: 'int cuMemFree_v2(uint64_t ptr)',
  cuMemGetInfo: 'int cuMemGetInfo_v2(_Out_ size_t *free, _Out_ size_t *total)',
  cuMemcpyHtoD: 'int cuMemcpyHtoD_v2(uint64_t dst, const void *src, size_t bytes)',
  cuMemcpyDtoH: 'int cuMemcpyDtoH_v2(_Out_ void *dst, uint64_t src, size_t bytes)',
  cuMemcpyHtoDAsync: 'int cuMemcpyHtoDAsync_v2(uint64_t dst, uint64_t src, size_t bytes, uint64_t stream)',
  cuMemcpyDtoHAsync: 'int cuMemcpyDtoHAsync_v2(uint64_t dst, uint64_t src, size_t bytes, uint64_t stream)',
  cuMemcpyDtoDAsync: 'int cuMemcpyDtoDAsync_v2(uint64_t dst, uint64_t src, size_t bytes, uint64_t stream)',
  // Unified addressing: the driver infers each pointer's device, so this copies to a peer GPU's memory too.
  cuMemcpyAsync: 'int cuMemcpyAsync(uint64_t dst, uint64_t src, size_t bytes, uint64_t stream)',
  cuMemHostRegister: 'int cuMemHostRegister_v2(uint64_t p, size_t bytes, uint32_t flags)',
  cuMemHostUnregister: 'int cuMemHostUnregister(uint64_t p)',
  cuMemHostGetDevicePointer: 'int cuMemHostGetDevicePointer_v2(_Out_ uint64_t *dptr, uint64_t p, uint32_t flags)',
  cuMemsetD8Async: 'int cuMemsetD8Async(uint64_t dst, uint8_t value, size_t n, uint64_t stream)',
  cuStreamCreate: 'int cuStreamCreate(_Out_ uint64_t *stream, uint32_t flags)',
  cuStreamDestroy: 'int cuStreamDestroy_v2(uint64_t stream)',
  cuStreamSynchronize: 'int cuStreamSynchronize(uint64_t stream)',
  cuStreamQuery: 'int cuStreamQuery(uint64_t stream)',
  cuStreamWaitEvent: 'int cuStreamWaitEvent(uint64_t stream, uint64_t event, uint32_t flags)',
  cuStreamBeginCapture: 'int cuStreamBeginCapture_v2(uint64_t stream, int mode)',
  cuStreamEndCapture: 'int cuStreamEndCapture(uint64_t stream, _Out_ uint64_t *graph)',
  cuEventCreate: 'int cuEventCreate(_Out_ uint64_t *event, uint32_t flags)',
  cuEventDestroy: 'int cuEventDestroy_v2(uint64_t event)',
  cuEventRecord: 'int cuEventRecord(uint64_t event, uint64_t stream)',
  cuEventQuery: 'int cuEventQuery(uint64_t event)',
  cuEventSynchronize: 'int cuEventSynchronize(uint64_t event)',
  cuEventElapsedTime: 'int cuEventElapsedTime_v2(_Out_ float *ms, uint64_t start, uint64_t end)',
  cuModuleLoadData: 'int cuModuleLoadData(_Out_ uint64_t *module, const void *image)',
  cuModuleUnload: 'int cuModuleUnload(uint64_t module)',
  cuModuleGetFunction: 'int cuModuleGetFunction(_Out_ uint64_t *fn, uint64_t module, const char *name)',
  cuFuncSetAttribute: 'int cuFuncSetAttribute(uint64_t fn, int attr, int value)',
  cuOccupancyMaxActiveBlocksPerMultiprocessor:
    'int cuOccupancyMaxActiveBlocksPerMultiprocessor(_Out_ int *blocks, uint64_t fn, int threads, size_t smem)',
  cuLaunchKernel:
    'int cuLaunchKernel(uint64_t fn, uint32_t gx, uint32_t gy, uint32_t gz, uint32_t bx, uint32_t by, uint32_t bz, uint32_t smem, uint64_t stream, uint64_t params, uint64_t extra)',
  cuLaunchKernelEx: 'int cuLaunchKernelEx(uint64_t config, uint64_t fn, uint64_t params, uint64_t extra)',
  cuGraphInstantiate: 'int cuGraphInstantiateWithFlags(_Out_ uint64_t *exec, uint64_t graph, uint64_t flags)',
  cuGraphLaunch: 'int cuGraphLaunch(uint64_t exec, uint64_t stream)',
  cuGraphExecDestroy: 'int cuGraphExecDestroy(uint64_t exec)',
  cuGraphDestroy: 'int cuGraphDestroy(uint64_t graph)',
  cuIpcGetMemHandle: 'int cuIpcGetMemHandle(_Out_ uint8_t *handle, uint64_t ptr)',
  // The 64-byte handle is passed by value: declared as a struct (see cu()), not a pointer.
  cuIpcOpenMemHandle: 'int cuIpcOpenMemHandle_v2(_Out_ uint64_t *ptr, CUipcMemHandle handle, uint32_t flags)',
  cuIpcCloseMemHandle: 'int cuIpcCloseMemHandle(uint64_t ptr)',
} as const;

type Fn = (...args: any[]) => number;
export type Driver = { [K in keyof typeof signatures]: Fn };

export const CUDA_SUCCESS = 0;
export const CUDA_ERROR_NOT_READY = 600;
export const CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED = 704;
export const CU_STREAM_NON_BLOCKING = 1;
export const CU_EVENT_DISABLE_TIMING = 2;
/** cuMemHostRegister: the memory is mapped into the device's address space. */
export const CU_MEMHOSTREGISTER_DEVICEMAP = 2;
export const CU_STREAM_CAPTURE_MODE_THREAD_LOCAL = 1;
export const attr = {
  multiprocessorCount: 16,
  computeCapabilityMajor: 75,
  computeCapabilityMinor: 76,
  unifiedAddressing: 41,
} as const;

let driver: Driver | undefined;

/** The driver's functions in declaration order (driver-trace.ts names them by index). */
export const driverFunctionNames: readonly string[] = Object.keys(signatures);

/** The driver, loaded and initialised once per thread. Throws LibraryNotFoundError when absent. */
export function cu(): Driver {
  if (driver) return driver;
  const lib = loadLibrary({
    name: 'libcuda (the NVIDIA driver)',
    files: ['libcuda.so.1', 'libcuda.so'],
    folders: [...systemLibFolders, ...wheelFolders('cu13', 'cuda_runtime')],
    overrideEnv: 'A2AV_LIBCUDA',
    instead: "the cpu backend (backend 'cpu'; --backend cpu on the command line)",
  });
  koffi.struct('CUipcMemHandle', { reserved: koffi.array('uint8_t', 64) });
  const d = {} as Driver;
  for (const [i, [key, sig]] of Object.entries(signatures).entries()) (d as Record<string, Fn>)[key] = traced(i, lib.func(sig) as Fn);
  driver = d;
  shareHardwareQueues();
  check('cuInit', d.cuInit(0));
  return d;
}

export function errorName(status: number): string {
  const out: [string | null] = [null];
  const d = driver;
  if (!d || d.cuGetErrorName(status, out) !== 0 || !out[0]) return `CUDA error ${status}`;
  return out[0];
}

function errorText(status: number): string {
  const out: [string | null] = [null];
  const d = driver;
  if (!d || d.cuGetErrorString(status, out) !== 0 || !out[0]) return '';
  return out[0];
}

export function check(call: string, status: number): void {
  if (status !== CUDA_SUCCESS) throw new CudaError(call, status, errorName(status), errorText(status));
}

// Scratch out-parameters, reused: calls are synchronous and JS is single-threaded per isolate.
const u64 = new BigUint64Array(1);
const i32 = new Int32Array(1);

export function outU64(call: string, fn: (out: BigUint64Array) => number): bigint {
  check(call, fn(u64));
  return u64[0];
}

export function outI32(call: string, fn: (out: Int32Array) => number): number {
  check(call, fn(i32));
  return i32[0];
}

/** Address of a host buffer, for APIs that take raw pointers (kernel parameter blocks). */
export function hostAddress(buf: ArrayBufferView | ArrayBuffer): bigint {
  return koffi.address(buf);
}
