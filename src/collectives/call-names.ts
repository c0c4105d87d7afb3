// The names of the exchange calls in handles and errors ("what"). Imports nothing but types:
// status.ts reads SplitsError.call back from these names, and the records modules import status.ts.
import type { ExchangeKind } from './exchange-rules.js';

/** Each exchange kind's operation, as the API names it. */
export const OP_OF_KIND: Record<ExchangeKind, string> = { '1d': 'allToAllV', dispatch: 'allToAllV2d', combine: 'allToAllV2dOffset' };

// How a plan's calls are named in handles and errors ("what"), and SplitsError.call read back from
// that name: one place for both, so the reading cannot drift from the naming.
const PLAN_OF = 'the exchange plan of ';
const MOVE_OF = 'a move of ';

/** The name of a plan's exchange of `kind`. */
export function planWhat(kind: ExchangeKind): string {
  return `${PLAN_OF}${OP_OF_KIND[kind]}`;
}

/** The name of a move of the plan named `plan` (planWhat's). */
export function moveWhat(plan: string): string {
  return `${MOVE_OF}${plan}`;
}

/** The call a name of planWhat's or moveWhat's stands for, as the program made it ('planAllToAllV2d', 'plan.move'); undefined for a direct call's. */
export function planCallOf(what: string, op: string): string | undefined {
  if (what.startsWith(MOVE_OF + PLAN_OF)) return 'plan.move';
  if (what.startsWith(PLAN_OF)) return `plan${op[0].toUpperCase()}${op.slice(1)}`;
  return undefined;
}
