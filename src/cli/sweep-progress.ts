// A sweep's progress on stderr, the same for every bench command: on a terminal a bar (the finished
// items' lines kept, and written out if Ctrl-C ends the run, as the bar alone showed them); off one
// (logs, CI) a first line saying what will run, then a line per item as it finishes. Either way a
// Ctrl-C (or SIGTERM) lets the command write what it had finished (its table of them) before the end.
import { counted } from '../bench/table.js';
import { formatBytes } from '../bench/units.js';
import { onEndingSignal, ProgressBar } from './progress-bar.js';

/** A size sweep's range, as the first line off a terminal says it: `, 4 KiB to 64 KiB`, or `: 4 KiB` for one. */
export function sizeRange(sizes: readonly number[]): string {
  return sizes.length > 1 ? `, ${formatBytes(sizes[0]!)} to ${formatBytes(sizes.at(-1)!)}` : `: ${formatBytes(sizes[0]!)}`;
}

export class SweepProgress {
  #bar: ProgressBar | undefined;
  #listening: (() => void) | undefined;
  #items: readonly string[] = [];
  #done: string[] = [];
  /**
   * `name` heads its lines (`bench`, `bench allreduce`); `label` names the backend when one run
   * compares several; `unit` what it counts; `interrupted` writes what the command had finished
   * when a signal ends the run (after the bar is gone).
   */
  constructor(readonly name: string, readonly label = '', readonly unit = 'size', readonly interrupted: (signal: NodeJS.Signals) => void = () => {}) {}

  /** The items, by name (the bar shows the one under way); `plan` (off a terminal) says what they are, after their count. */
  start(items: readonly string[], plan = ''): void {
    this.#items = items;
    if (!process.stderr.isTTY) {
      // Off a terminal the first line would otherwise come when the first item is done: 20 s at 2 GiB on cpu.
      process.stderr.write(`${this.label}${this.name}: ${counted(items.length, this.unit)}${plan}\n`);
      this.#listening = onEndingSignal((signal) => {
        process.stderr.write(`${this.label}${this.name}: interrupted (${signal}) after ${counted(this.#done.length, this.unit)}\n`);
        this.interrupted(signal);
      });
      return;
    }
    this.#bar = new ProgressBar({ format: `${this.label}${this.name} {bar} {value}/{total} ${this.unit}s | {item} {stage} | {last}` }, (signal) => {
      process.stderr.write(`${this.label}${this.name}: interrupted (${signal}) after ${counted(this.#done.length, this.unit)}${this.#done.length > 0 ? ':' : ''}\n`);
      if (this.#done.length > 0) process.stderr.write(`${this.#done.join('\n')}\n`);
      this.interrupted(signal);
    });
    this.#bar.start(items.length, 0, { item: items[0], stage: '', last: '' });
  }

  /** The item under way, and what it is doing (the bar only). */
  show(item: string, stage = ''): void {
    this.#bar?.show({ item, stage });
  }

  /** Item `index` finished: `line` says how it went (without the label, which is added); the bar moves on to the next. */
  finished(index: number, line: string): void {
    const full = `${this.label}${line}`;
    const numbered = `[${index + 1}/${this.#items.length}] ${full}`;
    this.#done.push(numbered);
    if (!this.#bar) {
      process.stderr.write(`${numbered}\n`);
      return;
    }
    this.#bar.increment({ last: full });
    if (index + 1 < this.#items.length) this.show(this.#items[index + 1]!);
  }

  stop(): void {
    this.#listening?.();
    this.#listening = undefined;
    this.#bar?.stop();
    this.#bar = undefined;
  }
}

/**
 * What a sweep ended by a signal can still show: the results of the backends it finished and, as
 * far as it got, the one under way, marked `interrupted` (`SIGINT after 3 of 8 sizes`).
 */
export class PartialResults<R extends { rows: unknown[]; interrupted?: string }> {
  #finished: R[] = [];
  /** The backend under way: its result so far, from its last finished item. */
  current: R | undefined;

  /** `items`: how many the sweep has (bench learns it from the plan, and sets it then). */
  constructor(readonly unit: string, public items: number, readonly write: (results: R[]) => void) {}

  /** A backend's result once it has run (undefined on a launched job's other ranks): kept. */
  done(result: R | undefined): R | undefined {
    if (result !== undefined) this.#finished.push(result);
    this.current = undefined;
    return result;
  }

  /** For SweepProgress: writes what there is, if anything. */
  readonly interrupted = (signal: NodeJS.Signals): void => {
    const now = this.current && { ...this.current, interrupted: `${signal} after ${this.current.rows.length} of ${counted(this.items, this.unit)}` };
    const all = [...this.#finished, ...(now ? [now] : [])];
    if (all.length > 0) this.write(all);
  };
}
