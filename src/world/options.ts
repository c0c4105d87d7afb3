// The options runRanks and init take, checked before anything starts (threads, the store
// connection): a typo such as `timeoutMS` would otherwise be ignored silently, and a bad timeout
// would surface as a store error ("cannot reach the store after -5 ms") instead of as itself.
import { shown, UsageError } from '../errors.js';
import { MAX_TIMEOUT_MS } from './ranks.js';

/** What is wrong with a timeoutMs (`what` names it), or undefined: a positive number of ms a timer can hold. */
export function timeoutProblem(t: unknown, what = 'timeoutMs'): string | undefined {
  if (typeof t !== 'number' || !(t > 0) || !Number.isFinite(t)) return `${what} must be a positive, finite number of ms, got ${shown(t)}`;
  // Past it Node's timers fire after 1 ms: a wait meant to be endless would fail at once.
  if (t > MAX_TIMEOUT_MS) return `${what} must be at most ${MAX_TIMEOUT_MS} ms (about 24.8 days, what a timer holds), got ${shown(t)}`;
  return undefined;
}

/**
 * Lanes a communicator may have: each is a stream and signal pads of its own on every rank (on cpu
 * about 0.7 MiB a lane at 72 ranks), and a pipeline overlaps a few; past this a typo is likelier.
 */
export const MAX_LANES = 64;

/** Refuses keys outside `known`, and a timeoutMs, lanes, onReport or backend that no communicator takes. */
export function checkRankOptions(call: string, options: unknown, known: readonly string[]): void {
  if (options === null || typeof options !== 'object') throw new UsageError(`${call}: options must be an object, got ${shown(options)}`);
  const o = options as Record<string, unknown>;
  const unknown = Object.keys(o).filter((k) => !known.includes(k));
  if (unknown.length > 0) {
    throw new UsageError(`${call}: unknown option${unknown.length > 1 ? 's' : ''} ${unknown.map((k) => `'${k}'`).join(', ')} (the options are ${known.join(', ')})`);
  }
  // The same rules as createComm's, said once here rather than by every rank after it started.
  if (o.timeoutMs !== undefined) {
    const why = timeoutProblem(o.timeoutMs);
    if (why !== undefined) throw new UsageError(`${call}: ${why}`);
  }
  if (o.lanes !== undefined && (!Number.isInteger(o.lanes) || (o.lanes as number) < 1 || (o.lanes as number) > MAX_LANES)) {
    throw new UsageError(`${call}: lanes must be an integer in 1..${MAX_LANES}, got ${shown(o.lanes)}`);
  }
  if (o.onReport !== undefined && typeof o.onReport !== 'function') {
    throw new UsageError(`${call}: onReport must be a function (rank, message) => void, got ${shown(o.onReport)}`);
  }
  if (o.backend !== undefined && o.backend !== 'cpu' && o.backend !== 'cuda' && o.backend !== 'nccl') {
    throw new UsageError(`${call}: unknown backend ${shown(o.backend, 'string')} (expected 'cpu', 'cuda' or 'nccl')`);
  }
}
