// Builds one rank's nccl communicator: its GPU (one per rank, checked across the job), one NCCL
// communicator per lane from unique ids shared through the rendezvous store, and a warm-up that
// makes NCCL connect every path before the first real call.
import type { CommOptions } from '../backend.js';
import { hostname } from 'node:os';
import { cu, outI32 } from '../../cuda/driver.js';
import { CudaDevice } from '../../cuda/device.js';
import { UsageError } from '../../errors.js';
import { NcclCommunicator, shareUniqueId } from '../../nccl/communicator.js';
import { allGatherJson } from '../../world/all-gather.js';
import { storeBarrier } from '../../world/barrier.js';
import { NcclComm } from './comm.js';
import { warmUp } from './exchange.js';
import { NcclLane } from './lane.js';
import { gpuSetUpMs } from '../../world/set-up-waits.js';

/** CU_DEVICE_ATTRIBUTE_PCI_{DOMAIN,BUS,DEVICE}_ID: names a GPU whatever CUDA_VISIBLE_DEVICES says. */
const PCI_ATTRS = [50, 33, 34];

export async function createNcclComm(opts: CommOptions): Promise<NcclComm> {
  const count = CudaDevice.count();
  if (count === 0) throw new UsageError('nccl backend: the driver reports no GPU');
  // Store exchanges, NCCL init, warm-up (set-up-waits.ts).
  const setupMs = gpuSetUpMs(opts.timeoutMs);
  const { store, rank, worldSize } = opts;
  // Every rank counts the nccl communicators it builds; all build them in the same order, so the
  // count names this one's keys in the store on every rank.
  const generation = await store.add(`a2av/nccl/built/${rank}`, 1);
  const key = `a2av/nccl/${generation}`;
  const device = new CudaDevice((opts.localRank ?? rank) % count);
  const lanes: NcclLane[] = [];
  try {
    const pci = PCI_ATTRS.map((a) => outI32('cuDeviceGetAttribute', (o) => cu().cuDeviceGetAttribute(o, a, device.ordinal)).toString(16)).join(':');
    const where = { host: hostname(), pci, ordinal: device.ordinal };
    const all = await allGatherJson({ store, key: `${key}/where`, rank, worldSize, value: where, timeoutMs: setupMs });
    const twin = all.findIndex((w, r) => r !== rank && w.host === where.host && w.pci === where.pci);
    if (twin >= 0) {
      throw new UsageError(`nccl backend: ranks ${Math.min(rank, twin)} and ${Math.max(rank, twin)} would share GPU ${device.ordinal} (${pci}) of ${where.host}; ` +
        `NCCL needs one GPU per rank, and this node has ${count}: start fewer ranks per node, or use the cuda backend`);
    }
    const ids: Uint8Array[] = [];
    for (let i = 0; i < opts.lanes; i++) ids.push(await shareUniqueId(store, `${key}/lane${i}/id`, rank, setupMs));
    // NCCL's blocking init waits for every rank without a bound; meeting here first turns a rank that
    // never comes into a named store timeout. (A nonblocking init could be bounded too, but then every
    // later NCCL call pays for a helper thread, which would slow the baseline this backend is.)
    await storeBarrier(store, { name: `${key}/init`, worldSize, timeoutMs: setupMs });
    for (let i = 0; i < opts.lanes; i++) {
      const nccl = NcclCommunicator.init({ rank, nranks: worldSize, id: ids[i], blocking: true, timeoutMs: setupMs });
      try {
        lanes.push(new NcclLane(i, worldSize, rank, device, nccl));
      } catch (err) {
        nccl.abort();
        throw err;
      }
    }
    const comm = new NcclComm(opts, device, lanes, key);
    warmUp(comm, lanes, setupMs);
    await comm.barrier({ timeoutMs: setupMs });
    return comm;
  } catch (err) {
    // Undo what was built; a second failure while undoing must not hide the first.
    for (const lane of lanes) {
      try {
        lane.nccl.abort();
        lane.release(device);
      } catch {
        /* reported: err */
      }
    }
    device.release();
    throw err;
  }
}
