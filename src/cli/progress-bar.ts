// A progress bar on stderr (cli-progress) that gives the terminal back when the run is interrupted:
// the bar hides the cursor and turns line wrapping off until stop(), and a Ctrl-C that ended the
// process first left both so. While the bar runs it listens for SIGINT and SIGTERM: it stops the
// bar, lets the command say what it had finished, then ends the process by the same signal.
import { SingleBar, type Options } from 'cli-progress';
import { rankEnv } from '../world/env.js';

const ENDING_SIGNALS = ['SIGINT', 'SIGTERM'] as const;

export class ProgressBar {
  readonly #bar: SingleBar;
  readonly #onSignal: (signal: NodeJS.Signals) => void;
  #stopped = false;

  /** `interrupted` writes what the run had finished, after the bar is gone (the bar alone held it). */
  constructor(options: Options, interrupted: () => void = () => {}) {
    this.#bar = new SingleBar({ stream: process.stderr, hideCursor: true, clearOnComplete: true, ...options });
    this.#onSignal = (signal) => {
      try {
        this.stop();
        interrupted();
      } finally {
        // As if unheard: the default action ends the process, with the status a shell expects (130 for SIGINT).
        process.kill(process.pid, signal);
      }
    };
  }

  start(total: number, value: number, payload: object = {}): void {
    // Only where the ranks are threads: a launched rank's main thread runs its part of the sweep and
    // may sit in a blocking wait, where a listener would hold back the signal that ended it at once.
    if (rankEnv() === undefined) for (const signal of ENDING_SIGNALS) process.once(signal, this.#onSignal);
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
    for (const signal of ENDING_SIGNALS) process.off(signal, this.#onSignal);
    this.#bar.stop();
  }
}
