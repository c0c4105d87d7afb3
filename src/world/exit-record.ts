// A rank's exit record: why it failed, as data, in a file its launcher reads once it has exited.
// The format is torchrun's error file (TORCHELASTIC_ERROR_FILE; torchrun prints `message` in its
// failure summary) plus an `a2av` field with the error's code and, for a TimeoutError, the rank it
// waited for. a2av launch reads that field to name the rank that hung, not the first rank to give
// up. A file, not the store: an uncaught error ends the process before any socket write would go
// out, a file is written synchronously, and torchrun already hands every rank one.
import { readFileSync, statSync, writeFileSync } from 'node:fs';

/** torchrun's variable, which a2av launch also sets per rank: where this rank's record goes. */
export const ERROR_FILE_ENV = 'TORCHELASTIC_ERROR_FILE';

/** a2av launch's folder of exit records is made in the temp folder under this prefix (and removed by whoever ends the job). */
export const LAUNCH_DIR_PREFIX = 'a2av-launch-';

/** What the launcher needs from a record. */
export interface ExitRecord {
  /** The error's class ('TimeoutError'); undefined in torch's records, whose message starts with it. */
  readonly name: string | undefined;
  /** The a2av error code (A2AV_TIMEOUT, ...), if it was one. */
  readonly code: string | undefined;
  /** First line of the error's message. */
  readonly message: string;
  /**
   * Set when the rank timed out (the error, or an error in its `cause` chain, was a TimeoutError):
   * the rank it waited for, -1 where it could not say (a wait on the device as a whole; NCCL).
   */
  readonly missingRank: number | undefined;
}

/** A record is a few KiB; a larger file is skipped, so that reading one stays cheap for the launcher. */
const MAX_RECORD_BYTES = 1 << 20;
const MAX_CAUSE_DEPTH = 4;
const FORMAT_VERSION = 1;

const uncaught = (err: unknown): void => {
  try {
    recordExitError(err);
  } catch {
    // The process is going down with `err` printed anyway: a failed write must not hide it.
  }
};

/**
 * Writes the record of every uncaught error (and unhandled rejection) of this process to
 * $TORCHELASTIC_ERROR_FILE, if set. init() calls it; calling it again changes nothing.
 * Node still prints the error and exits as usual: this only listens (uncaughtExceptionMonitor).
 */
export function recordUncaughtErrors(): void {
  if (process.listeners('uncaughtExceptionMonitor').includes(uncaught)) return;
  process.on('uncaughtExceptionMonitor', uncaught);
}

/**
 * Writes `err` as this rank's exit record to `path` (default $TORCHELASTIC_ERROR_FILE; nothing
 * when unset). For programs that catch an error and exit on their own, which the uncaught-error
 * hook cannot see. Throws what writeFileSync throws.
 */
export function recordExitError(err: unknown, path = process.env[ERROR_FILE_ENV]): void {
  if (path === undefined || path === '') return;
  const e = err instanceof Error ? err : new Error(`non-error thrown: ${String(err)}`);
  const { code } = e as Error & { code?: unknown };
  const timeout = timeoutIn(e);
  const record = {
    message: {
      message: `${e.name}: ${e.message}`,
      extraInfo: { py_callstack: e.stack ?? `${e.name}: ${e.message}`, timestamp: String(Math.floor(Date.now() / 1000)) },
    },
    a2av: { version: FORMAT_VERSION, name: e.name, code: typeof code === 'string' ? code : undefined, message: e.message, timeout },
  };
  writeFileSync(path, JSON.stringify(record), { mode: 0o600 });
}

/** Reads a record written by recordExitError or by torch's @record; undefined if absent or unreadable. */
export function readExitRecord(path: string): ExitRecord | undefined {
  let data: unknown;
  try {
    if (statSync(path).size > MAX_RECORD_BYTES) return undefined;
    data = JSON.parse(readFileSync(path, 'utf8'));
  } catch {
    // Absent (the rank failed without an uncaught error), or cut short by a kill mid-write.
    return undefined;
  }
  if (typeof data !== 'object' || data === null) return undefined;
  const { a2av, message } = data as { a2av?: unknown; message?: unknown };
  if (isA2avRecord(a2av)) {
    const missing = a2av.timeout?.missingRank;
    return { name: a2av.name, code: a2av.code, message: firstLine(a2av.message), missingRank: Number.isInteger(missing) ? missing : undefined };
  }
  // torch's format: `message` is the text, or { message, extraInfo }.
  const text = typeof message === 'string' ? message : (message as { message?: unknown } | undefined)?.message;
  return typeof text === 'string' ? { name: undefined, code: undefined, message: firstLine(text), missingRank: undefined } : undefined;
}

interface A2avRecord {
  name: string;
  code: string | undefined;
  message: string;
  timeout?: { missingRank?: number };
}

function isA2avRecord(value: unknown): value is A2avRecord {
  const r = value as Partial<A2avRecord> | undefined;
  return typeof r === 'object' && r !== null && typeof r.name === 'string' && typeof r.message === 'string' && (r.code === undefined || typeof r.code === 'string');
}

/** The TimeoutError in `err`'s cause chain: a CommAbortedError on a later call carries it as its cause. */
function timeoutIn(err: Error): { rank: number; missingRank: number; timeoutMs: number } | undefined {
  let e: unknown = err;
  for (let depth = 0; e instanceof Error && depth <= MAX_CAUSE_DEPTH; depth++, e = e.cause) {
    const t = e as Error & { code?: unknown; rank?: unknown; missingRank?: unknown; timeoutMs?: unknown };
    if (t.code === 'A2AV_TIMEOUT' && Number.isInteger(t.missingRank)) {
      // A peer that closed after failing first is not the one that stopped: this rank was late.
      if ((t as { peerFailed?: unknown }).peerFailed === true) return undefined;
      return { rank: Number(t.rank), missingRank: t.missingRank as number, timeoutMs: Number(t.timeoutMs) };
    }
  }
  return undefined;
}

function firstLine(text: string): string {
  const line = text.split('\n', 1)[0]!;
  return line.length > 300 ? `${line.slice(0, 299)}…` : line;
}
