// The device side of the nccl backend's calls, on a lane's stream: the split exchange (every rank's
// record gathered with ncclAllGather, then waited for and copied to the host: the round trip a2av's
// own kernels avoid), and the rows (device copies and one group of ncclSend/ncclRecv, as
// transfers.ts plans them).
import type { CudaDevice, CudaEvent } from '../../cuda/device.js';
import { mismatchOf, RECORD_HEADER_WORDS, type Records, type RecordHeader } from '../../collectives/exchange-rules.js';
import type { Routing } from '../../collectives/exchange-routing.js';
import { groupEnd, groupStart } from '../../nccl/communicator.js';
import { NcclType } from '../../nccl/library.js';
import { uploadAsync } from './copies.js';
import type { NcclLane } from './lane.js';
import { firstGatherWords, transfers } from './transfers.js';

/** What the exchange needs from its communicator. */
export interface NcclHost {
  readonly rank: number;
  readonly timeoutMs: number;
  readonly device: CudaDevice;
  /** Waits on the host for `event`, bounded (default timeoutMs): the error that ended the wait (the communicator then aborted), else undefined. */
  waitFor(event: CudaEvent, what: string, limitMs?: number): Error | undefined;
  /** Aborts the communicator after `cause`; returns it. */
  fail(cause: Error): Error;
  /** Whether nothing is queued on any lane: an outgrown buffer can then be freed (growing-buffer.ts). */
  lanesIdle(): boolean;
}

/** This rank's record: its header, and `words` int64 of splits at device address `splits`. */
export interface DeviceRecord {
  header: RecordHeader;
  splits: bigint;
  words: number;
}

/**
 * Every rank's record on this host: the 1-D call's in one ncclAllGather, a MoE call's header and
 * inline counts in one and, only when its counts do not fit and every header agrees, all of them
 * in a second; a move's header alone. Returns the records, or the failure.
 */
export function exchangeRecords(host: NcclHost, lane: NcclLane, x: DeviceRecord, what: string): Records | Error {
  const { device } = host;
  if (lane.setHeader(x.header)) uploadAsync(lane.payload, lane.header, lane.stream);
  if (x.words > 0) device.copyAsync(lane.payload + BigInt(8 * RECORD_HEADER_WORDS), x.splits, 8 * x.words, lane.stream);
  const first = firstGatherWords(x.words === 0 ? 'move' : x.header.kind === '1d' ? '1d' : 'moe', lane.world);
  const err = gather(host, lane, first, what);
  if (err) return err;
  if (RECORD_HEADER_WORDS + x.words <= first || mismatchOf(lane.records, host.rank) !== undefined) return lane.records;
  return gather(host, lane, RECORD_HEADER_WORDS + x.words, what) ?? lane.records;
}

/** One ncclAllGather of `words` words a rank and its copy to the host, on the lane's stream, waited for. */
function gather(host: NcclHost, lane: NcclLane, words: number, what: string): Error | undefined {
  const gathered = lane.gathered(host.device, words, () => host.lanesIdle());
  try {
    lane.nccl.settle('ncclAllGather', lane.nccl.allGather(lane.payload, gathered, words, NcclType.int64, lane.stream.handle), host.timeoutMs);
  } catch (err) {
    return host.fail(err as Error);
  }
  lane.download(host.device, gathered, words);
  lane.exchanged.record(lane.stream);
  return host.waitFor(lane.exchanged, `${what} on lane ${lane.index}: split exchange`);
}

/** Device addresses of one call's rows. */
export interface DevicePayload {
  input: bigint;
  output: bigint;
  rowBytes: number;
}

/**
 * Queues the rows of an accepted call on the lane's stream (idle: the exchange waited for it), as
 * `routing` says, and first its outSplitsOffsets if given. Returns the failure, if any.
 */
export function deliver(host: NcclHost, lane: NcclLane, routing: Routing, p: DevicePayload, outSplitsOffsets?: bigint): Error | undefined {
  const { device } = host;
  const s = lane.stream;
  if (outSplitsOffsets !== undefined) uploadAsync(outSplitsOffsets, lane.offsetsOf(routing), s);
  const t = transfers(routing, p.rowBytes);
  const scratch = t.scratchBytes > 0 ? lane.scratch(device, t.scratchBytes, () => host.lanesIdle()) : 0n;
  for (const c of t.gather) device.copyAsync(scratch + BigInt(c.dst), p.input + BigInt(c.src), c.bytes, s);
  for (const c of t.local) device.copyAsync(p.output + BigInt(c.dst), p.input + BigInt(c.src), c.bytes, s);
  let status = 0;
  if (t.sends.length + t.recvs.length > 0) {
    groupStart();
    // NCCL p2p moves bytes whatever the element type, so uint8 costs nothing over wider types.
    for (const x of t.sends) {
      if (status === 0) status = lane.nccl.send((x.scratch ? scratch : p.input) + BigInt(x.offset), x.bytes, NcclType.uint8, x.peer, s.handle);
    }
    for (const x of t.recvs) {
      if (status === 0) status = lane.nccl.recv((x.scratch ? scratch : p.output) + BigInt(x.offset), x.bytes, NcclType.uint8, x.peer, s.handle);
    }
    const ended = groupEnd(); // always close the group, even after a failed enqueue
    try {
      lane.nccl.settle('ncclSend/ncclRecv', status || ended, host.timeoutMs);
    } catch (err) {
      return host.fail(err as Error);
    }
  }
  for (const c of t.scatter) device.copyAsync(p.output + BigInt(c.dst), scratch + BigInt(c.src), c.bytes, s);
  return undefined;
}

/**
 * One exchange and a one-byte send to and receive from every peer on each lane, so NCCL connects
 * every path the calls use now, bounded, rather than inside the first timed call.
 */
export function warmUp(host: NcclHost, lanes: readonly NcclLane[], timeoutMs: number): void {
  for (const lane of lanes) {
    const s = lane.stream.handle;
    const words = firstGatherWords('1d', lane.world);
    const gathered = lane.gathered(host.device, words, () => true);
    lane.nccl.settle('ncclAllGather', lane.nccl.allGather(lane.payload, gathered, words, NcclType.int64, s), timeoutMs);
    groupStart();
    for (let peer = 0; peer < lane.world; peer++) {
      lane.nccl.send(lane.payload, 1, NcclType.uint8, peer, s);
      lane.nccl.recv(gathered + BigInt(peer), 1, NcclType.uint8, peer, s);
    }
    lane.nccl.settle('ncclGroupEnd', groupEnd(), timeoutMs);
    lane.exchanged.record(lane.stream);
    const err = host.waitFor(lane.exchanged, 'NCCL warm-up', timeoutMs);
    if (err) throw err;
  }
}
