// An exchange plan on the nccl backend: the split exchange runs when the plan is made (its outcome
// is `ready`; outSplitsOffsets is written then), and the routing it judged is kept on the host for
// every move. A move first gathers every rank's header (row size, output) and refuses a mismatch
// on every rank, then moves the rows as the routing says: no second exchange of the splits.
import type { ExchangePlan, Handle, PlanMoveArgs, Stream } from '../backend.js';
import type { CudaStream } from '../../cuda/device.js';
import { moveWhat } from '../../collectives/call-names.js';
import { moveHeader, type CallRecord } from '../../collectives/call-records.js';
import { checkPlanMove, type CheckContext, type PlanBuffers } from '../../collectives/check.js';
import { judge, mismatchOf } from '../../collectives/exchange-rules.js';
import { Routing } from '../../collectives/exchange-routing.js';
import { entryError } from '../../collectives/status.js';
import { UsageError } from '../../errors.js';
import type { GpuBuffer } from '../gpu-memory.js';
import type { HostWaiter } from '../stream-lane.js';
import { uploadAsync } from './copies.js';
import { deliver, exchangeRecords, type NcclHost } from './exchange.js';
import type { NcclLane } from './lane.js';

export interface NcclPlanInit {
  host: NcclHost & HostWaiter & CheckContext;
  lane: NcclLane;
  exchange: CallRecord;
  /** Its capacity and splits buffers, which its moves are checked against. */
  buffers: PlanBuffers;
  stream?: Stream;
  /** Throws when the communicator can no longer be used. */
  usable: () => void;
  /** Every call's outcome, for a timed loop in progress. */
  outcome: (err: Error | undefined) => void;
}

export class NcclPlan implements ExchangePlan {
  readonly ready: Handle;
  #init: NcclPlanInit;
  #routing: Routing;
  #error: Error | undefined;
  /** The lane call number of its exchange: names this plan in its moves' records. */
  #id: number;
  #closed = false;

  constructor(init: NcclPlanInit) {
    this.#init = init;
    const { host, lane, exchange: x } = init;
    this.#routing = new Routing(host.rank, host.worldSize);
    this.#id = lane.done.count + 1;
    lane.follow(init.stream as CudaStream | undefined);
    const m = exchangeRecords(host, lane, { header: x.header, splits: (x.splits as GpuBuffer).ptr, words: x.words }, x.what);
    const refused = m instanceof Error ? undefined : judge(m, host.rank, this.#routing);
    const err = m instanceof Error ? m : refused && entryError(refused, host.timeoutMs, `${x.what} on lane ${lane.index}`);
    // Accepted: outSplitsOffsets now, in stream order; the rows wait for the moves.
    if (err === undefined) uploadAsync((x.outSplitsOffsets as GpuBuffer).ptr, lane.offsetsOf(this.#routing), lane.stream);
    this.#error = err;
    init.outcome(err);
    this.ready = lane.finish(host, `${x.what} on lane ${lane.index}, call ${lane.done.count + 1}`, () => err);
  }

  move(args: PlanMoveArgs): Handle {
    const { host, lane, exchange, buffers, usable, outcome } = this.#init;
    usable();
    if (this.#closed) throw new UsageError(`rank ${host.rank}: this exchange plan is closed`);
    checkPlanMove(host, buffers, args);
    lane.follow(args.stream as CudaStream | undefined);
    const what = moveWhat(exchange.what);
    let err = this.#error;
    if (err === undefined) {
      const m = exchangeRecords(host, lane, { header: moveHeader(exchange.header, args, this.#id), splits: 0n, words: 0 }, what);
      const refused = m instanceof Error ? undefined : mismatchOf(m, host.rank);
      err = m instanceof Error ? m : refused ? entryError(refused, host.timeoutMs, what) : undefined;
      const payload = { input: (args.input as GpuBuffer).ptr, output: (args.output as GpuBuffer).ptr, rowBytes: args.rowBytes };
      if (err === undefined) err = deliver(host, lane, this.#routing, payload);
    }
    outcome(err);
    const e = err;
    return lane.finish(host, `${what} on lane ${lane.index}, call ${lane.done.count + 1}`, () => e);
  }

  close(): void {
    this.#closed = true;
  }
}
