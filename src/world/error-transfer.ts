// Errors cross from a rank's worker thread to the main thread as plain data and are rebuilt there
// as instances of the same a2av class, so `err instanceof TimeoutError` and `err.missingRank` work
// for the caller of runRanks as if the rank had run in its own thread. Structured clone alone keeps
// only name and message of an Error, which would lose `code` and the typed fields.
import * as errors from '../errors.js';
import * as moeErrors from '../moe/errors.js';

// Every module of public error classes: a class missing here comes back as its nearest base.
const ERROR_MODULES: Record<string, unknown>[] = [errors, moeErrors];

export interface SerializedError {
  /** Class names from the error's own class up to Error, so the nearest known one can be rebuilt. */
  classChain: string[];
  name: string;
  message: string;
  stack?: string;
  /** Own fields (code, rank, peer, needed…), each kept only if structured clone accepts it. */
  fields: Record<string, unknown>;
  cause?: SerializedError | { value: unknown };
}

const MAX_CAUSE_DEPTH = 4;

export function serializeError(err: unknown, depth = 0): SerializedError {
  if (!(err instanceof Error)) {
    return { classChain: ['Error'], name: 'Error', message: `non-error thrown: ${describe(err)}`, fields: {} };
  }
  const fields: Record<string, unknown> = {};
  for (const key of Object.keys(err)) {
    if (key === 'cause' || key === 'name' || key === 'message' || key === 'stack') continue;
    const value = (err as unknown as Record<string, unknown>)[key];
    if (isCloneable(value)) fields[key] = value;
  }
  const out: SerializedError = { classChain: classChain(err), name: err.name, message: err.message, stack: err.stack, fields };
  if (err.cause !== undefined && depth < MAX_CAUSE_DEPTH) {
    out.cause = err.cause instanceof Error ? serializeError(err.cause, depth + 1) : { value: isCloneable(err.cause) ? err.cause : describe(err.cause) };
  }
  return out;
}

/** Rebuilds the error as the nearest a2av class in its chain (fields kept), else a plain Error. */
export function reviveError(s: SerializedError): Error {
  // a2av's class, else the nearest of JavaScript's own (a RangeError thrown in a rank is one here
  // too; a class of the rank's own code has no constructor on this thread: its nearest built-in).
  const known = s.classChain.flatMap((name) => ERROR_MODULES.map((m) => m[name])).find(isA2avClass) ?? s.classChain.map((name) => BUILT_IN[name]).find((c) => c !== undefined);
  const err: Error = known !== undefined ? (Object.create(known.prototype) as Error) : new Error(s.message);
  // Fields as own properties, like the constructors set them; message and stack non-enumerable like Error's.
  Object.defineProperty(err, 'message', { value: s.message, writable: true, configurable: true, enumerable: false });
  Object.defineProperty(err, 'stack', { value: s.stack, writable: true, configurable: true, enumerable: false });
  Object.assign(err, s.fields);
  Object.defineProperty(err, 'name', { value: s.name, writable: true, configurable: true, enumerable: false });
  if (s.cause !== undefined) {
    const cause = 'classChain' in s.cause ? reviveError(s.cause) : s.cause.value;
    Object.defineProperty(err, 'cause', { value: cause, writable: true, configurable: true, enumerable: false });
  }
  return err;
}

/** JavaScript's own error classes, by name. */
const BUILT_IN: Record<string, { prototype: object } | undefined> = { EvalError, RangeError, ReferenceError, SyntaxError, TypeError, URIError, AggregateError, Error };

function classChain(err: Error): string[] {
  const names: string[] = [];
  for (let proto = Object.getPrototypeOf(err); proto && proto !== Object.prototype; proto = Object.getPrototypeOf(proto)) {
    names.push(proto.constructor?.name ?? 'Error');
  }
  return names;
}

function isA2avClass(cls: unknown): cls is { prototype: object } {
  return typeof cls === 'function' && (cls === errors.A2avError || cls.prototype instanceof errors.A2avError);
}

function isCloneable(value: unknown): boolean {
  if (typeof value === 'function' || typeof value === 'symbol') return false;
  try {
    structuredClone(value);
    return true;
  } catch {
    return false;
  }
}

function describe(value: unknown): string {
  try {
    return String(value);
  } catch {
    return typeof value;
  }
}

/**
 * The UsageError for a value runRanks could not pass between threads (`what`: the argument, a
 * rank's return value or report, and where it was going), the DataCloneError as `cause`: the
 * clone's own message names the value but not which of them it was.
 */
export function unsendable(what: string, err: unknown): errors.UsageError {
  const why = err instanceof Error ? ` (${err.message})` : '';
  return new errors.UsageError(`${what}: it must be structured-cloneable (plain data, typed arrays, Map, Set, Error; not a function, a symbol or a port)${why}`, { cause: err });
}

export const isDataCloneError = (err: unknown): boolean => err instanceof Error && err.name === 'DataCloneError';
