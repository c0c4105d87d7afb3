// allReduce on the nccl backend: one ncclAllReduce on the lane's own communicator and stream, so it
// queues behind that lane's calls only. NCCL reads a plain device pointer, so input and output may
// be any buffers of this rank, and the same one (NCCL allows in place). NCCL's summation order is
// its own (ring or tree, fixed per job and size): the same bits on every rank and run of a job, but
// not rank order past W = 2, where a + b is commutative and rounding the same either way.
import type { ReduceDtype } from '../backend.js';
import { UsageError } from '../../errors.js';
import { BF16_MIN_VERSION, formatNcclVersion, ncclLib, NcclOp, NcclType } from '../../nccl/library.js';
import type { NcclHost } from './exchange.js';
import type { NcclLane } from './lane.js';

export interface NcclAllReduceCall {
  input: bigint;
  output: bigint;
  count: number;
  dtype: ReduceDtype;
}

/** ncclDataType_t of `dtype`; UsageError where the loaded NCCL has no bfloat16. */
export function ncclTypeOf(rank: number, dtype: ReduceDtype): NcclType {
  if (dtype === 'f32') return NcclType.float32;
  const version = ncclLib().version;
  if (version < BF16_MIN_VERSION) {
    throw new UsageError(`rank ${rank}: allReduce of bf16 needs NCCL ${formatNcclVersion(BF16_MIN_VERSION)} or newer, this one is ${formatNcclVersion(version)}`);
  }
  return NcclType.bfloat16;
}

/**
 * Queues the call on the lane's stream; returns the failure to enqueue it (the communicator then
 * aborted), else undefined. A peer that never calls shows up later, as the handle's timeout.
 */
export function queueAllReduce(host: NcclHost, lane: NcclLane, call: NcclAllReduceCall): Error | undefined {
  // A zero count is a no-op to NCCL; it still goes through it, so every backend accepts it alike.
  const type = ncclTypeOf(host.rank, call.dtype);
  try {
    lane.nccl.settle('ncclAllReduce', lane.nccl.allReduce(call.input, call.output, call.count, type, NcclOp.sum, lane.stream.handle), host.timeoutMs);
  } catch (err) {
    return host.fail(err as Error);
  }
  return undefined;
}
