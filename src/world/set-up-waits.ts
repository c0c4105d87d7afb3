// How long a communicator's set-up waits for its peers at least, whatever timeoutMs says: a short
// timeout is for finding a dead peer in a collective, but a set-up wait also spans a peer starting
// its thread or process, loading the driver and compiling kernels, which take longer.

/**
 * Waits that span a peer starting (threads, processes) or doing host work of its own (filling
 * buffers): connecting to the store rank 0 serves, and the cpu backend's store exchanges (pads,
 * allocSymmetric, barrier() without its own timeoutMs). A lane's wait in a collective keeps timeoutMs.
 */
export const START_WAIT_FLOOR_MS = 10_000;

/**
 * Waits that span a peer loading the GPU driver, NCCL or compiling kernels on a cold cache (nvcc
 * took 8 s for kernels/exchange.cu on two cores; NCCL's init takes seconds).
 */
export const GPU_SET_UP_FLOOR_MS = 60_000;

export const startWaitMs = (timeoutMs: number): number => Math.max(timeoutMs, START_WAIT_FLOOR_MS);
export const gpuSetUpMs = (timeoutMs: number): number => Math.max(timeoutMs, GPU_SET_UP_FLOOR_MS);
