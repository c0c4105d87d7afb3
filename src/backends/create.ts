// Picks and builds a backend's communicator. Backends are loaded by dynamic import so the CPU path
// never loads the CUDA bindings (and a machine without libcuda never tries to).
export type { CommOptions } from './backend.js';
import type { BackendName, Comm, CommOptions } from './backend.js';
import { shown, UsageError } from '../errors.js';
import { checkKnobs } from '../knobs.js';
import { rankEnv } from '../world/env.js';
import { MAX_LANES, timeoutProblem } from '../world/options.js';

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
  // Every A2AV_* switch, whichever backend reads it: a typo is refused here, on cpu too.
  checkKnobs();
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

/** Enough of a launched job's shape (src/world/env.ts) to tell whether it spans nodes. */
export interface JobShape {
  rank: number;
  worldSize: number;
  /** Ranks on this node. */
  localWorldSize: number;
}

/**
 * The backend of a job that names none: nccl when the job spans more than one node (this node
 * holds fewer ranks than the job: the cuda and cpu backends reach the ranks of one machine only),
 * else cuda where a GPU is visible, else cpu. Across nodes without a GPU no backend can work:
 * UsageError. `note` says why nccl was picked.
 */
export function chooseBackend(job: JobShape | undefined, gpuVisible: boolean): { backend: BackendName; note?: string } {
  if (job !== undefined && job.localWorldSize < job.worldSize) {
    const where = `${job.worldSize} ranks, ${job.localWorldSize} on this node`;
    if (!gpuVisible) {
      throw new UsageError(
        `the job spans more than one node (${where}) and no GPU is visible: the cpu backend reaches the ranks of one machine only; ` +
          'run ranks across nodes on GPUs (nccl), or launch every rank on one node',
      );
    }
    return { backend: 'nccl', note: `the job spans more than one node (${where}): using the nccl backend (cuda reaches the ranks of one machine only)` };
  }
  return { backend: gpuVisible ? 'cuda' : 'cpu' };
}

/**
 * chooseBackend for this process: the job as the launcher's variables describe it (null: ranks as
 * threads of this one process), and whether the CUDA driver sees a GPU. Rank 0 says so on stderr
 * when it picks nccl because the job spans nodes.
 */
export async function defaultBackend(job: JobShape | null = rankEnv() ?? null): Promise<BackendName> {
  let gpus = 0;
  try {
    const probe = (await import('../cuda/probe.js')) as { cudaDeviceCount(): number };
    gpus = probe.cudaDeviceCount();
  } catch {
    gpus = 0;
  }
  const { backend, note } = chooseBackend(job ?? undefined, gpus > 0);
  if (note !== undefined && job?.rank === 0) process.stderr.write(`a2av: ${note}\n`);
  // Naming the driver is asking for a GPU: falling back to cpu without a word would hide why.
  if (backend === 'cpu' && process.env.A2AV_LIBCUDA && (job?.rank ?? 0) === 0 && !warnedLibcuda) {
    warnedLibcuda = true;
    const { cudaUnavailableReason } = (await import('../cuda/probe.js')) as { cudaUnavailableReason(): string | undefined };
    const { overrideProblem } = await import('../native/find-library.js');
    const problem = overrideProblem('A2AV_LIBCUDA');
    const why = problem ? `it does not load (${problem})` : `no GPU is usable (${(cudaUnavailableReason() ?? 'the driver sees none').replace(/\.$/, '')})`;
    process.stderr.write(`a2av: note: A2AV_LIBCUDA=${process.env.A2AV_LIBCUDA}: ${why}; using the cpu backend\n`);
  }
  return backend;
}
let warnedLibcuda = false;

function checkOptions(o: CommOptions): void {
  if (!Number.isInteger(o.worldSize) || o.worldSize < 1) throw new UsageError(`worldSize must be a positive integer, got ${shown(o.worldSize)}`);
  if (!Number.isInteger(o.rank) || o.rank < 0 || o.rank >= o.worldSize) {
    throw new UsageError(`rank must be an integer in [0, ${o.worldSize}), got ${shown(o.rank)}`);
  }
  const badTimeout = timeoutProblem(o.timeoutMs);
  if (badTimeout !== undefined) throw new UsageError(badTimeout);
  if (!Number.isInteger(o.lanes) || o.lanes < 1 || o.lanes > MAX_LANES) throw new UsageError(`lanes must be an integer in 1..${MAX_LANES}, got ${shown(o.lanes)}`);
}
