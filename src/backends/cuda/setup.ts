// Builds one rank's cuda communicator: where every rank runs (process, host, GPU), peer access to
// the other GPUs of this process, and the kernels, compiled once per job.
import { hostname } from 'node:os';
import type { CommOptions } from '../backend.js';
import { CudaDevice } from '../../cuda/device.js';
import { UsageError } from '../../errors.js';
import { forceSystemScope } from '../../knobs.js';
import { allGatherJson } from '../../world/all-gather.js';
import { gpuSetUpMs } from '../../world/set-up-waits.js';
import { CudaComm } from './comm.js';
import { loadModules, type ModuleLoad } from './modules.js';
import { probeDefines } from './probe-defines.js';
import type { RankPlace } from './symmetric.js';


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
    timeoutMs: gpuSetUpMs(opts.timeoutMs),
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
  const oneGpu = where.every((w) => w.ordinal === device.ordinal) && !forceSystemScope();
  // Every module is loaded here, before any rank can launch: loading code onto a GPU waits for the
  // kernels running there, and a peer's kernel that spins waiting for this rank never ends
  // (measured: two ranks on one GPU timed out in their first MoE call when it loaded lazily).
  const loads: ModuleLoad = { store: opts.store, rank: opts.rank, worldSize: opts.worldSize, timeoutMs: opts.timeoutMs, where, arch: device.arch };
  const { modules, lends } = await loadModules(loads, 'a2av/cuda/modules', MODULE_FILES, [`-DA2AV_ONE_GPU=${oneGpu ? 1 : 0}`, ...probeDefines()]);
  const [module, moeModule, allReduceModule] = modules;
  const comm = new CudaComm({ opts, device, module, moeModule, allReduceModule, lendsModules: lends, loads, places: where, peerDevices: [...peerDevices.values()] });
  await comm.init();
  return comm;
}
