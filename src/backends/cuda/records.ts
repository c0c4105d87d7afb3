// The host's side of a cuda lane's records (kernels/config.cuh): its status area in pinned host
// memory, which the kernels write and the host reads as plain memory once a call's event has
// passed: the abort record (the lane's first timeout, which ends the communicator), the count of
// refused calls, and the ring where each refused call's record is found by its sequence number.
import { explained, type Explain } from '../backend.js';
import { A2avError } from '../../errors.js';
import { entryError, readStatus, StatusField, STATUS_WORDS } from '../../collectives/status.js';
import type { HostMapped } from '../../cuda/device.js';
import type { CudaLane } from './lane.js';
import { STATUS_AREA_BYTES, STATUS_RING, StatusAreaField } from './layout.js';

/** One call as the device numbers it: its lane and its sequence number there. */
export interface LaneCall {
  lane: CudaLane;
  seq: number;
  /** The operation, for the error's message (allToAllV, allToAllV2d, allReduce, ...). */
  what?: string;
  /** What its refusal means to the caller that made it (backend.ts EXPLAINED): a replayed call's. */
  explain?: Explain;
}

export class LaneRecords {
  /** Each lane's status area, as int64 words. */
  readonly #areas: BigInt64Array[];

  constructor(
    /** The lanes' status areas, one after another (STATUS_AREA_BYTES each). */
    readonly memory: HostMapped,
    lanes: number,
    readonly timeoutMs: number,
    /** Told of a timeout found in a record: the communicator is done for. */
    readonly onAbort: (err: Error) => void,
  ) {
    this.#areas = Array.from({ length: lanes }, (_, i) => new BigInt64Array(memory.view, i * STATUS_AREA_BYTES, STATUS_AREA_BYTES / 8));
  }

  /** Where the GPU writes lane `index`'s records. */
  deviceAddress(index: number): bigint {
    return this.memory.device + BigInt(index * STATUS_AREA_BYTES);
  }

  /** The outcome of one call: its refusal, a timeout at or before it on its lane, or undefined. */
  outcome(call: LaneCall): Error | undefined {
    return this.firstOutcome([call]);
  }

  /** The first failed of `calls` (in issue order), or undefined when every one went through. */
  firstOutcome(calls: readonly LaneCall[]): Error | undefined {
    for (const call of calls) {
      const area = this.#areas[call.lane.index];
      const aborted = this.#aborted(call, area);
      if (aborted) return aborted;
      const at = StatusAreaField.ring / 8 + (call.seq % STATUS_RING) * STATUS_WORDS;
      if (area[at + StatusField.seq] !== BigInt(call.seq)) continue; // the slot holds another call's record
      const entry = readStatus(area, at);
      if (entry) return explained(call.explain, entryError(entry, this.timeoutMs, `${call.what ?? 'a call'} on lane ${call.lane.index}, call ${call.seq}`));
    }
    return undefined;
  }

  /** Refused calls on the lane so far (the kernels count them): how a timed loop learns of any. */
  refusedCount(lane: CudaLane): bigint {
    return this.#areas[lane.index][StatusAreaField.refused / 8];
  }

  /**
   * After a timed loop: the first failure among calls (fromSeq, toSeq] of the lane, or an error
   * saying how many were refused when their records were overwritten by later calls.
   */
  loopOutcome(lane: CudaLane, fromSeq: number, toSeq: number, refusedBefore: bigint): Error | undefined {
    const calls: LaneCall[] = [];
    for (let seq = Math.max(fromSeq + 1, toSeq - STATUS_RING + 1); seq <= toSeq; seq++) calls.push({ lane, seq });
    const err = this.firstOutcome(calls);
    if (err) return err;
    const refused = this.refusedCount(lane) - refusedBefore;
    if (refused <= 0n) return undefined;
    return new A2avError('A2AV_SPLITS', `${refused} call(s) on lane ${lane.index} were refused among ${toSeq - fromSeq} in a row; their records were overwritten by later calls`);
  }

  /** The lane's timeout, if it struck at or before this call (later calls never ran). */
  #aborted(call: LaneCall, area: BigInt64Array): Error | undefined {
    const entry = readStatus(area, StatusAreaField.abort / 8);
    if (entry === undefined || call.seq < Number(area[StatusAreaField.abort / 8 + StatusField.seq])) return undefined;
    const err = entryError(entry, this.timeoutMs, `${call.what ?? 'a call'} on lane ${call.lane.index}`);
    this.onAbort(err);
    return err;
  }

  release(): void {
    this.memory.release();
  }
}
