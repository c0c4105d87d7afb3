// The host's side of a cuda lane's records (kernels/config.cuh): the abort record (the lane's first
// timeout, which ends the communicator) and the ring of refused calls, where each call's record is
// found by its sequence number. Read after the call's event has passed, so the kernel is done.
import { A2avError } from '../../errors.js';
import { entryError, readStatus, StatusField, STATUS_BYTES, STATUS_WORDS } from '../../collectives/status.js';
import type { CudaDevice } from '../../cuda/device.js';
import type { CudaLane } from './lane.js';
import { LaneHeaderField, STATUS_RING, statusRingOffset } from './layout.js';

/** One call as the device numbers it: its lane and its sequence number there. */
export interface LaneCall {
  lane: CudaLane;
  seq: number;
}

export class LaneRecords {
  readonly #header = new BigInt64Array(LaneHeaderField.refused / 8 + 1);
  readonly #slot = new BigInt64Array(STATUS_WORDS);
  readonly #ringOffset: number;

  constructor(
    readonly device: CudaDevice,
    /** This rank's signal pad. */
    readonly pad: bigint,
    world: number,
    readonly timeoutMs: number,
    /** Told of a timeout found in a record: the communicator is done for. */
    readonly onAbort: (err: Error) => void,
  ) {
    this.#ringOffset = statusRingOffset(world);
  }

  /** The outcome of one call: its refusal, a timeout at or before it on its lane, or undefined. */
  outcome(call: LaneCall): Error | undefined {
    return this.#aborted(call, this.#readHeader(call.lane)) ?? this.#refusal(call);
  }

  /** The first failed of `calls` (in issue order), or undefined when every one went through. */
  firstOutcome(calls: readonly LaneCall[]): Error | undefined {
    const rings = new Map<CudaLane, BigInt64Array>();
    const headers = new Map<CudaLane, BigInt64Array>();
    for (const call of calls) {
      let header = headers.get(call.lane);
      if (header === undefined) headers.set(call.lane, (header = this.#readHeader(call.lane).slice()));
      const aborted = this.#aborted(call, header);
      if (aborted) return aborted;
      let ring = rings.get(call.lane);
      if (ring === undefined) {
        ring = new BigInt64Array(STATUS_RING * STATUS_WORDS);
        this.device.download(ring, this.#laneBase(call.lane) + BigInt(this.#ringOffset));
        rings.set(call.lane, ring);
      }
      const err = this.#decode(call, ring, (call.seq % STATUS_RING) * STATUS_WORDS);
      if (err) return err;
    }
    return undefined;
  }

  /** Refused calls on the lane so far (the kernels count them): how a timed loop learns of any. */
  refusedCount(lane: CudaLane): bigint {
    return this.#readHeader(lane)[LaneHeaderField.refused / 8];
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
  #aborted(call: LaneCall, header: BigInt64Array): Error | undefined {
    const entry = readStatus(header, 0);
    if (entry === undefined || call.seq < Number(header[StatusField.seq])) return undefined;
    const err = entryError(entry, this.timeoutMs, `allToAllV on lane ${call.lane.index}`);
    this.onAbort(err);
    return err;
  }

  #refusal(call: LaneCall): Error | undefined {
    this.device.download(this.#slot, this.#laneBase(call.lane) + BigInt(this.#ringOffset + (call.seq % STATUS_RING) * STATUS_BYTES));
    return this.#decode(call, this.#slot, 0);
  }

  /** The record at word `at` of `words`, if it is this call's (the slot is reused every STATUS_RING calls). */
  #decode(call: LaneCall, words: BigInt64Array, at: number): Error | undefined {
    if (words[at + StatusField.seq] !== BigInt(call.seq)) return undefined;
    const entry = readStatus(words, at);
    return entry && entryError(entry, this.timeoutMs, `allToAllV on lane ${call.lane.index}, call ${call.seq}`);
  }

  #readHeader(lane: CudaLane): BigInt64Array {
    this.device.download(this.#header, this.#laneBase(lane));
    return this.#header;
  }

  #laneBase(lane: CudaLane): bigint {
    return this.pad + BigInt(lane.offset);
  }
}
