// Checks that a collective failed with exactly the named error the semantics promise.
import type { Handle } from '../../src/backends/backend.js';
import { SplitsError, TimeoutError, UsageError, type MismatchField, type SplitsProblem } from '../../src/errors.js';
import { ConformanceError } from './harness.js';

export interface ExpectedSplitsError {
  problem: SplitsProblem;
  rank: number;
  peer: number;
  /** The expert involved; default -1 (the 1-D call, a mismatch). */
  expert?: number;
  needed: bigint | number;
  available: bigint | number;
  /** The operation the error names (a mismatch says it), where the case checks it. */
  op?: string;
  /** The call the error names where it is not `op` (a plan's exchange, plan.move), where the case checks it; null: none named. */
  call?: string | null;
  /** A mismatch: the field it names as differing. */
  field?: MismatchField;
  /** What the message must say, where the case checks it. */
  message?: RegExp;
}

/** handle.wait() must throw a SplitsError with these fields, reported by `me`. */
export function expectSplitsError(handle: Handle, want: ExpectedSplitsError, me: number, label: string): void {
  const err = thrownBy(() => handle.wait(), `${label}: expected SplitsError '${want.problem}'`);
  if (!(err instanceof SplitsError)) throw new ConformanceError(`${label}: expected SplitsError '${want.problem}', got ${describe(err)}`, { cause: err });
  const got = {
    problem: err.problem, rank: err.rank, peer: err.peer, expert: err.expert, needed: err.needed, available: err.available, reportedBy: err.reportedBy,
    ...(want.op === undefined ? {} : { op: err.op }),
    ...(want.call === undefined ? {} : { call: err.call ?? null }),
    ...(want.field === undefined ? {} : { field: err.field }),
  };
  const { message, ...fields } = want;
  if (message !== undefined && !message.test(err.message)) throw new ConformanceError(`${label}: SplitsError message does not match ${message}: ${err.message}`, { cause: err });
  const exp = { ...fields, expert: want.expert ?? -1, needed: BigInt(want.needed), available: BigInt(want.available), reportedBy: me };
  for (const key of Object.keys(exp) as (keyof typeof exp)[]) {
    if (got[key] !== exp[key]) {
      throw new ConformanceError(`${label}: SplitsError ${key} is ${got[key]}, expected ${exp[key]} (${err.message})`, { cause: err });
    }
  }
}

/** handle.wait() must throw a TimeoutError naming `missingRank`, raised by `me`. */
export function expectTimeout(handle: Handle, missingRank: number, me: number, label: string): TimeoutError {
  const err = thrownBy(() => handle.wait(), `${label}: expected TimeoutError`);
  if (!(err instanceof TimeoutError)) throw new ConformanceError(`${label}: expected TimeoutError, got ${describe(err)}`, { cause: err });
  if (err.missingRank !== missingRank || err.rank !== me) {
    throw new ConformanceError(`${label}: TimeoutError names rank ${err.rank} waiting for ${err.missingRank}, expected ${me} waiting for ${missingRank}`, { cause: err });
  }
  return err;
}

/** `fn` must throw UsageError at once (saying `message`, where given). */
export function expectUsageError(fn: () => unknown, label: string, message?: RegExp): void {
  const err = thrownBy(fn, `${label}: expected UsageError`);
  if (!(err instanceof UsageError)) throw new ConformanceError(`${label}: expected UsageError, got ${describe(err)}`, { cause: err });
  if (message !== undefined && !message.test(err.message)) throw new ConformanceError(`${label}: UsageError message does not match ${message}: ${err.message}`, { cause: err });
}

function thrownBy(fn: () => unknown, what: string): unknown {
  try {
    fn();
  } catch (err) {
    return err;
  }
  throw new ConformanceError(`${what}, but nothing was thrown`);
}

function describe(err: unknown): string {
  return err instanceof Error ? `${err.name}: ${err.message}` : String(err);
}

/**
 * What a rank that "never calls" does in the timeout cases: it stays open past its peers' timeout
 * (`timeoutMs`), then returns. One that returned at once would close its communicator, and cpu
 * ends a wait for a rank that has closed as soon as it sees that: another case.
 */
export async function stayAbsent(timeoutMs: number): Promise<number> {
  await new Promise((resolve) => setTimeout(resolve, 1.5 * timeoutMs));
  return 0;
}
