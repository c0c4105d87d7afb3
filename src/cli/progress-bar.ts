// A progress bar on stderr (cli-progress) that gives the terminal back when the run is interrupted:
// the bar hides the cursor and turns line wrapping off until stop(), and a Ctrl-C that ended the
// process first left both so. While the bar runs it listens for SIGINT and SIGTERM: it stops the
// bar, lets the command say what it had finished, then ends the process by the same signal.
import { SingleBar, type Options } from 'cli-progress';
import { rankEnv } from '../world/env.js';

const ENDING_SIGNALS = ['SIGINT', 'SIGTERM'] as const;

/**
 * Until the returned function is called, SIGINT or SIGTERM runs `interrupted` (what the command
 * says of the work it had finished), then ends the process by that signal, as if unheard (its
 * default action: the status a shell expects, 130 for SIGINT). Not in a launched rank: its main
 * thread runs its part of the work and may sit in a blocking wait, where a listener would hold back
 * the signal that ended it at once.
 */
export function onEndingSignal(interrupted: (signal: NodeJS.Signals) => void): () => void {
  if (rankEnv() !== undefined) return () => {};
  const listener = (signal: NodeJS.Signals) => {
    off();
    try {
      interrupted(signal);
    } finally {
      process.kill(process.pid, signal);
    }
  };
  const off = () => {
    for (const signal of ENDING_SIGNALS) process.off(signal, listener);
  };
  for (const signal of ENDING_SIGNALS) process.once(signal, listener);
  return off;
}

export class ProgressBar {
  readonly #bar: SingleBar;
  readonly #interrupted: (signal: NodeJS.Signals) => void;
  #listening: (() => void) | undefined;
  #stopped = false;

  /** `interrupted` writes what the run had finished, after the bar is gone (the bar alone held it). */
  constructor(options: Options, interrupted: (signal: NodeJS.Signals) => void = () => {}) {
    this.#bar = new SingleBar({ stream: process.stderr, hideCursor: true, clearOnComplete: true, ...options });
    this.#interrupted = interrupted;
  }

  start(total: number, value: number, payload: object = {}): void {
    this.#listening = onEndingSignal((signal) => {
      this.stop();
      this.#interrupted(signal);
    });
    this.#bar.start(total, value, payload);
  }

  update(value: number, payload: object = {}): void {
    this.#bar.update(value, payload);
  }

  /** New payload, the value as it is. */
  show(payload: object): void {
    this.#bar.update(payload);
  }

  increment(payload: object = {}): void {
    this.#bar.increment(1, payload);
  }

  stop(): void {
    if (this.#stopped) return;
    this.#stopped = true;
    this.#listening?.();
    this.#bar.stop();
  }
}
