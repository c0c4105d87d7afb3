// An exchange plan on the cpu backend: the splits exchange runs once, when the plan is made (its
// outcome is `ready`), and the routing it judged is kept for every move. A move is a lane call of
// its own: every rank publishes its row size and output, all check they agree (SplitsError
// 'mismatch', nothing written, when they do not), then push rows along the kept chunks.
import type { ExchangePlan, Handle, PlanMoveArgs } from '../backend.js';
import { checkPlanMove, PLAN_CLOSE_IN_CAPTURE, type CheckContext, type PlanBuffers } from '../../collectives/check.js';
import { Routing } from '../../collectives/exchange-routing.js';
import { UsageError } from '../../errors.js';
import { moveWhat } from '../../collectives/call-names.js';
import { moveHeader, type CallRecord } from '../../collectives/call-records.js';
import { doneHandle, type CpuLane } from './lane.js';

export interface CpuPlanInit {
  ctx: CheckContext;
  lane: CpuLane;
  exchange: CallRecord;
  /** Its capacity and splits buffers, which its moves are checked against. */
  buffers: PlanBuffers;
  /** Throws when the communicator can no longer be used (closed, or a peer timed out). */
  usable: () => void;
  /** Makes a call on the plan's lane (counted inside a replayed closure) and returns its handle. */
  call: (run: () => Handle) => Handle;
  /** Whether a replay's closure is running (where cuda's capture() would be). */
  replaying: () => boolean;
}

export class CpuPlan implements ExchangePlan {
  readonly ready: Handle;
  #init: CpuPlanInit;
  #routing: Routing;
  /** The exchange's error (refused, or timed out): every move reports it and moves nothing. */
  #error: Error | undefined;
  /** The lane call number of its exchange: names this plan in its moves' records. */
  #id = 0;
  #closed = false;

  constructor(init: CpuPlanInit) {
    this.#init = init;
    this.#routing = new Routing(init.ctx.rank, init.ctx.worldSize);
    // Counted before its exchange runs (inside a replayed closure, a call past the lane's limit is refused unmade).
    this.ready = init.call(() => {
      this.#error = init.lane.plan(init.exchange, this.#routing);
      this.#id = init.lane.seq;
      return doneHandle(this.#error);
    });
  }

  move(args: PlanMoveArgs): Handle {
    const { ctx, lane, exchange, buffers, usable, call } = this.#init;
    usable();
    if (this.#closed) throw new UsageError(`rank ${ctx.rank}: this exchange plan is closed`);
    checkPlanMove(ctx, buffers, args);
    if (this.#error !== undefined) return call(() => doneHandle(this.#error));
    const p = { input: args.input, output: args.output, rowBytes: args.rowBytes };
    return call(() => doneHandle(lane.move(moveHeader(exchange.header, p, this.#id), this.#routing, p, moveWhat(exchange.what))));
  }

  close(): void {
    // Refused as on cuda, where the closure runs inside the capture: code tried here must not rely on it.
    if (!this.#closed && this.#init.replaying()) throw new UsageError(PLAN_CLOSE_IN_CAPTURE(this.#init.ctx.rank));
    this.#closed = true;
  }
}
