// Host-side checks of the MoE calls and plans on cuda: misuse throws UsageError before anything is
// queued; what passes becomes the kernels' ExchangeCall.
import type {
  AllToAllV2dArgs,
  AllToAllV2dOffsetArgs,
  DeviceBuffer,
  PlanAllToAllV2dArgs,
  PlanAllToAllV2dOffsetArgs,
  PlanAllToAllVArgs,
  PlanMoveArgs,
} from '../backend.js';
import { MAX_EXPERTS_PER_RANK } from '../backend.js';
import { checkBuffer, checkLane, type CheckContext } from '../../collectives/check.js';
import type { ExchangeKind } from '../../collectives/exchange-rules.js';
import { UsageError } from '../../errors.js';
import type { ExchangeCall } from './moe.js';

/** Largest majorAlign taken: an expert's padding past this is a bug, not a layout. */
export const MAX_ALIGN = 1 << 20;

export interface MoeCall {
  lane: number;
  x: ExchangeCall;
  input: DeviceBuffer;
  output: DeviceBuffer;
  rowBytes: number;
}

export interface MoePlanCall {
  lane: number;
  x: ExchangeCall;
}

const integer = (ctx: CheckContext, name: string, v: number, min: number, max = Number.MAX_SAFE_INTEGER): number => {
  if (!Number.isSafeInteger(v) || v < min || v > max) throw new UsageError(`rank ${ctx.rank}: ${name} must be an integer in ${min}..${max}, got ${v}`);
  return v;
};

function payload(ctx: CheckContext, input: DeviceBuffer, output: DeviceBuffer, rowBytes: number): void {
  integer(ctx, 'rowBytes', rowBytes, 1);
  checkBuffer(ctx, 'input', input);
  checkBuffer(ctx, 'output', output);
  if (!output.symmetric) throw new UsageError(`rank ${ctx.rank}: output must be a symmetric buffer (allocSymmetric) so peers can write it`);
  if (output === input) throw new UsageError(`rank ${ctx.rank}: output and input are the same buffer`);
}

function exchange(ctx: CheckContext, kind: ExchangeKind, a: { expertsPerRank?: number; majorAlign?: number; splits: DeviceBuffer; outSplitsOffsets: DeviceBuffer }, rows: { inRows: number; outRows: number }): ExchangeCall {
  const W = ctx.worldSize;
  const E = kind === '1d' ? 1 : integer(ctx, 'expertsPerRank', a.expertsPerRank as number, 1, MAX_EXPERTS_PER_RANK);
  const align = kind === 'dispatch' ? integer(ctx, 'majorAlign', a.majorAlign ?? 1, 1, MAX_ALIGN) : 1;
  const n = W * E;
  if (kind === 'combine') checkBuffer(ctx, `inSplitsOffsets (int64[2][E*W] = ${2 * n})`, a.splits, 16 * n);
  else checkBuffer(ctx, `inSplits (int64[${kind === '1d' ? 'W' : 'W*E'}] = ${n})`, a.splits, 8 * n);
  checkBuffer(ctx, `outSplitsOffsets (int64[2][W*E] = ${2 * n})`, a.outSplitsOffsets, 16 * n);
  return { kind, splits: a.splits, outSplitsOffsets: a.outSplitsOffsets, experts: E, align, ...rows };
}

export function dispatchCall(ctx: CheckContext, a: AllToAllV2dArgs): MoeCall {
  payload(ctx, a.input, a.output, a.rowBytes);
  const x = exchange(ctx, 'dispatch', { ...a, splits: a.inSplits }, { inRows: Math.floor(a.input.bytes / a.rowBytes), outRows: Math.floor(a.output.bytes / a.rowBytes) });
  return { lane: checkLane(ctx, a.lane), x, input: a.input, output: a.output, rowBytes: a.rowBytes };
}

export function combineCall(ctx: CheckContext, a: AllToAllV2dOffsetArgs): MoeCall {
  payload(ctx, a.input, a.output, a.rowBytes);
  const x = exchange(ctx, 'combine', { ...a, splits: a.inSplitsOffsets }, { inRows: Math.floor(a.input.bytes / a.rowBytes), outRows: Math.floor(a.output.bytes / a.rowBytes) });
  return { lane: checkLane(ctx, a.lane), x, input: a.input, output: a.output, rowBytes: a.rowBytes };
}

type AnyPlanArgs = PlanAllToAllVArgs | PlanAllToAllV2dArgs | PlanAllToAllV2dOffsetArgs;

export function planCall(ctx: CheckContext, kind: ExchangeKind, a: AnyPlanArgs): MoePlanCall {
  const rows = { inRows: integer(ctx, 'inputRows', a.inputRows, 0), outRows: integer(ctx, 'outputRows', a.outputRows, 0) };
  const splits = 'inSplitsOffsets' in a ? a.inSplitsOffsets : a.inSplits;
  const x = exchange(ctx, kind, { ...(a as PlanAllToAllV2dArgs), splits }, rows);
  return { lane: checkLane(ctx, a.lane), x };
}

/** A move's payload must hold the rows the plan was checked against. */
export function checkPlanMove(ctx: CheckContext, c: MoePlanCall, m: PlanMoveArgs): PlanMoveArgs {
  payload(ctx, m.input, m.output, m.rowBytes);
  if (m.input.bytes < c.x.inRows * m.rowBytes)
    throw new UsageError(`rank ${ctx.rank}: the move's input holds ${m.input.bytes} bytes; the plan's ${c.x.inRows} input rows of ${m.rowBytes} need ${c.x.inRows * m.rowBytes}`);
  if (m.output.bytes < c.x.outRows * m.rowBytes)
    throw new UsageError(`rank ${ctx.rank}: the move's output holds ${m.output.bytes} bytes; the plan's ${c.x.outRows} output rows of ${m.rowBytes} need ${c.x.outRows * m.rowBytes}`);
  return m;
}
