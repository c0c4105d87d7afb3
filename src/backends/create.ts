// Picks and builds a backend's communicator. Backends are loaded by dynamic import so the CPU path
// never loads the CUDA bindings (and a machine without libcuda never tries to).
export type { CommOptions } from './backend.js';
import type { BackendName, Comm, CommOptions } from './backend.js';
import { UsageError } from '../errors.js';

interface CudaBackendModule {
  createCudaComm(opts: CommOptions): Promise<Comm>;
}
interface NcclBackendModule {
  createNcclComm(opts: CommOptions): Promise<Comm>;
}

// Kept as variables so the type checker does not need the GPU backends to build the CPU one.
const cudaBackendPath = './cuda/setup.js';
const ncclBackendPath = './nccl/setup.js';

export async function createComm(opts: CommOptions): Promise<Comm> {
  checkOptions(opts);
  switch (opts.backend) {
    case 'cpu': {
      const { createCpuComm } = await import('./cpu/comm.js');
      return createCpuComm(opts);
    }
    case 'cuda': {
      const { createCudaComm } = (await import(cudaBackendPath)) as CudaBackendModule;
      return createCudaComm(opts);
    }
    case 'nccl': {
      const { createNcclComm } = (await import(ncclBackendPath)) as NcclBackendModule;
      return createNcclComm(opts);
    }
    default:
      throw new UsageError(`unknown backend '${String(opts.backend)}' (expected 'cpu', 'cuda' or 'nccl')`);
  }
}

/** 'cuda' when a GPU is visible, else 'cpu'. Never throws. */
export async function defaultBackend(): Promise<BackendName> {
  try {
    const probe = (await import('../cuda/probe.js')) as { cudaDeviceCount(): number };
    return probe.cudaDeviceCount() > 0 ? 'cuda' : 'cpu';
  } catch {
    return 'cpu';
  }
}

function checkOptions(o: CommOptions): void {
  if (!Number.isInteger(o.worldSize) || o.worldSize < 1) throw new UsageError(`worldSize must be a positive integer, got ${o.worldSize}`);
  if (!Number.isInteger(o.rank) || o.rank < 0 || o.rank >= o.worldSize) {
    throw new UsageError(`rank must be an integer in [0, ${o.worldSize}), got ${o.rank}`);
  }
  if (!(o.timeoutMs > 0)) throw new UsageError(`timeoutMs must be positive, got ${o.timeoutMs}`);
  if (!Number.isInteger(o.lanes) || o.lanes < 1) throw new UsageError(`lanes must be a positive integer, got ${o.lanes}`);
}
