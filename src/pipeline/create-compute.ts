// The compute of a communicator's backend (compute.ts says what it does): TypeScript loops on cpu,
// the kernels of kernels/pipeline.cu on cuda and nccl. Apart from compute.ts so that the interface
// does not import its implementations.
import type { Comm } from '../backends/backend.js';
import type { Compute } from './compute.js';
import { gpuSetUpMs } from '../world/set-up-waits.js';
import type { GemmChoice } from './compute-cuda.js';

/**
 * The compute for `comm`'s backend. Collective on cuda and nccl: every rank loads the kernels
 * before any rank queues a collective (loading code waits for the kernels running on the GPU,
 * and a peer's collective spins until this rank arrives).
 */
export async function createCompute(comm: Comm, gemm: GemmChoice = 'kernel'): Promise<Compute> {
  if (comm.backend === 'cpu') {
    const { CpuCompute } = await import('./compute-cpu.js');
    return new CpuCompute();
  }
  const { createCudaCompute } = await import('./compute-cuda.js');
  // Rank 0 compiles (or fills the on-disk cache) first; the others then load the cached binary. The
  // waits span a compile (set-up-waits.ts), not only the communicator's timeout.
  const wait = { timeoutMs: gpuSetUpMs(comm.timeoutMs) };
  if (comm.rank !== 0) await comm.barrier(wait);
  const compute = createCudaCompute(gemm);
  if (comm.rank === 0) await comm.barrier(wait);
  await comm.barrier(wait);
  return compute;
}
