// How a run of `a2av` ends: its errors as one line on stderr, and the exit status (stdout's failures included).
import { CommAbortedError, TimeoutError, UsageError } from '../errors.js';
import { recordExitError } from '../world/exit-record.js';
import { DEFAULT_TIMEOUT_MS } from '../world/ranks.js';

/** Refuses what was asked: the message is the run's one line on stderr, and the exit status is 1. */
export function fail(message: string): never {
  throw new UsageError(message);
}

/**
 * An error's first line: errors are one line; a multi-line message (a compile log) is cut. A call
 * refused because an earlier one timed out (a command that queued on before waiting) reads as that
 * timeout: it is what went wrong, and what the hint below is about.
 */
export function errorLine(err: unknown): string {
  const first = err instanceof CommAbortedError && err.cause instanceof TimeoutError ? err.cause : err;
  return (first instanceof Error ? first.message : String(first)).split('\n')[0] + timeoutHint(first);
}

/** The --timeout-ms given on this command line, if any. */
let given: number | undefined;

/** Keeps the --timeout-ms given (its parser calls this), for the hint below. */
export function timeoutGiven(ms: number): void {
  given = ms;
}

// Only --timeout-ms sets a bound below the default in the commands, and ranks that share cores or
// a GPU fall tens of ms apart between calls without anything being wrong: say which it may be.
function timeoutHint(err: unknown): string {
  if (!(err instanceof TimeoutError) || err.waitedMs !== undefined || given === undefined || !(given < DEFAULT_TIMEOUT_MS)) return '';
  // A set-up wait has a floor of its own: the bound that ran out is that floor, not the option.
  if (err.timeoutMs > given) return ` (set-up waits at least ${err.timeoutMs} ms whatever --timeout-ms says: a rank not there by then is not coming)`;
  return ` (--timeout-ms ${given} bounds every wait between ranks; ranks that share cores or a GPU can fall that far apart without failing: raise it, or leave out --timeout-ms for ${DEFAULT_TIMEOUT_MS} ms)`;
}

/** Thrown by the exit override once help or the version is printed: the run then ends normally. */
export class HelpShown extends Error {}

/**
 * stdout that cannot take the results (a full disk: ENOSPC; a read-only descriptor: EBADF) is said in
 * one line. A closed pipe (EPIPE, `| head -c1`) is not: the reader chose to stop, and a C program
 * would die of SIGPIPE without a word. Either way the exit status is 1, whatever the command set
 * (a launch whose ranks all passed): output was lost.
 */
let stdoutLost: string | undefined;

/** Watches stdout for the failure above, from the start of the run. */
export function watchStdout(): void {
  process.stdout.on('error', (err: NodeJS.ErrnoException) => {
    if (stdoutLost !== undefined) return;
    stdoutLost = err.code ?? err.message;
    if (err.code !== 'EPIPE') process.stderr.write(`a2av: stdout: cannot write (${stdoutLost})\n`);
  });
  process.on('exit', () => {
    if (stdoutLost !== undefined && !process.exitCode) process.exitCode = 1;
  });
}

/** Whether stdout has failed: what is still written to it is lost. */
export function stdoutFailed(): boolean {
  return stdoutLost !== undefined;
}

/** The end of a run that threw: its error's line on stderr and exit status 1 (help or the version, shown, end normally). */
export function reportError(err: unknown): void {
  if (err instanceof HelpShown) return;
  process.stderr.write(`a2av: ${errorLine(err)}\n`);
  // Under a2av launch (or torchrun), the launcher reads this to name a rank that stopped answering.
  try {
    recordExitError(err);
  } catch {
    // The message above is what matters; a record that cannot be written only loses the naming.
  }
  process.exitCode = 1;
}
