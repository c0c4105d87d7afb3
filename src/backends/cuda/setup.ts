// Builds one rank's cuda communicator: where every rank runs (process, host, GPU), peer access to
// the other GPUs of this process, and the kernels, compiled once per job.
import { hostname } from 'node:os';
import type { CommOptions } from '../backend.js';
import { CudaDevice } from '../../cuda/device.js';
import { UsageError } from '../../errors.js';
import { forceSystemScope, sharedModulesOn } from '../../knobs.js';
import { KernelModule } from '../../jit/module.js';
import { allGatherJson } from '../../world/all-gather.js';
import { storeBarrier } from '../../world/barrier.js';
import { CudaComm } from './comm.js';
import { probeDefines } from './probe-defines.js';
import { contextSharers, type RankPlace } from './symmetric.js';


/**
 * Which rank loads the modules `rank` runs: the first rank of its process on its GPU (they share
 * the GPU's context), or itself where sharing is off; and whether `rank` lends them to others.
 */
export function moduleLender(where: readonly RankPlace[], rank: number, shared: boolean): { lender: number; lends: boolean } {
  const sharers = contextSharers(where, rank);
  const lender = shared ? sharers[0] : rank;
  return { lender, lends: lender === rank && shared && sharers.length > 1 };
}

// The cuda backend's modules, in the order CudaCommInit takes them.
const MODULE_FILES = ['a2av.cu', 'exchange.cu', 'all-reduce.cu'];

export async function createCudaComm(opts: CommOptions): Promise<CudaComm> {
  const count = CudaDevice.count();
  if (count === 0) throw new UsageError('cuda backend: the driver reports no GPU');
  const device = new CudaDevice((opts.localRank ?? opts.rank) % count);
  const where = await allGatherJson<RankPlace>({
    store: opts.store,
    key: 'a2av/cuda/where',
    rank: opts.rank,
    worldSize: opts.worldSize,
    value: { pid: process.pid, host: hostname(), ordinal: device.ordinal },
    timeoutMs: opts.timeoutMs,
  });
  const away = where.findIndex((w) => w.host !== hostname());
  if (away >= 0)
    throw new UsageError(`cuda backend: rank ${away} runs on ${where[away].host}; it reaches peers within one machine only (use nccl across machines)`);
  // Peers in this process need peer access enabled here; peers in other processes get it when
  // their memory is mapped (CUDA IPC, lazily enabled).
  // Each peer GPU's context is retained once, for as long as this communicator lives.
  const peerDevices = new Map<number, CudaDevice>();
  for (const w of where) {
    if (w.pid !== process.pid || w.ordinal === device.ordinal || peerDevices.has(w.ordinal)) continue;
    const peer = new CudaDevice(w.ordinal);
    peerDevices.set(w.ordinal, peer);
    device.enablePeerAccess(peer);
  }
  device.makeCurrent();
  // Rank 0 compiles (or fills the on-disk cache) first; the others then load the cached binary.
  const barrier = (name: string) => storeBarrier(opts.store, { name, worldSize: opts.worldSize, timeoutMs: opts.timeoutMs });
  if (opts.rank !== 0) await barrier('a2av/cuda/module');
  const oneGpu = where.every((w) => w.ordinal === device.ordinal) && !forceSystemScope();
  const moduleOptions = [`-DA2AV_ONE_GPU=${oneGpu ? 1 : 0}`, ...probeDefines()];
  // Ranks of one process on one GPU share its context, and so can run one copy of the code: the
  // first of them loads it and lends the handles. Eight copies of x_fused (137 KB of SASS each)
  // took turns in the SMs' instruction caches while eight ranks ran it at once (docs/perf.md).
  const { lender, lends } = moduleLender(where, opts.rank, sharedModulesOn());
  // Every module is loaded here, before any rank can launch: loading code onto a GPU waits for the
  // kernels running there, and a peer's kernel that spins waiting for this rank never ends
  // (measured: two ranks on one GPU timed out in their first MoE call when it loaded lazily).
  const loaded = lender === opts.rank ? MODULE_FILES.map((file) => new KernelModule(file, device.arch, moduleOptions)) : [];
  if (opts.rank === 0) await barrier('a2av/cuda/module');
  const lent = await allGatherJson<string[]>({
    store: opts.store,
    key: 'a2av/cuda/modules',
    rank: opts.rank,
    worldSize: opts.worldSize,
    value: loaded.map((m) => m.handle.toString()),
    timeoutMs: opts.timeoutMs,
  });
  const [module, moeModule, allReduceModule] = lender === opts.rank ? loaded : lent[lender].map((h) => new KernelModule(BigInt(h)));
  const comm = new CudaComm({ opts, device, module, moeModule, allReduceModule, lendsModules: lends, places: where, peerDevices: [...peerDevices.values()] });
  await comm.init();
  return comm;
}
