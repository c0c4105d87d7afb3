// A sweep's progress on stderr, the same for every bench command: on a terminal a bar (the finished
// items' lines kept, and written out if Ctrl-C ends the run, as the bar alone showed them); off one
// (logs, CI) a first line saying what will run, then a line per item as it finishes.
import { counted } from '../bench/table.js';
import { ProgressBar } from './progress-bar.js';

export class SweepProgress {
  #bar: ProgressBar | undefined;
  #done: string[] = [];
  /** `name` heads its lines (`bench`, `bench allreduce`); `label` names the backend when one run compares several; `unit` what it counts. */
  constructor(readonly name: string, readonly label = '', readonly unit = 'size') {}

  /** `count` items, the first called `first`; `plan` (off a terminal) says what they are, after the count. */
  start(count: number, first: string, plan = ''): void {
    if (!process.stderr.isTTY) {
      // Off a terminal the first line would otherwise come when the first item is done: 20 s at 2 GiB on cpu.
      process.stderr.write(`${this.label}${this.name}: ${counted(count, this.unit)}${plan}\n`);
      return;
    }
    this.#bar = new ProgressBar({ format: `${this.label}${this.name} {bar} {value}/{total} ${this.unit}s | {item} {stage} | {last}` }, () => {
      if (this.#done.length > 0) process.stderr.write(`${this.label}${this.name}: interrupted after ${counted(this.#done.length, this.unit)}:\n${this.#done.join('\n')}\n`);
    });
    this.#bar.start(count, 0, { item: first, stage: '', last: '' });
  }

  /** The item under way, and what it is doing (the bar only). */
  show(item: string, stage = ''): void {
    this.#bar?.show({ item, stage });
  }

  /** Item `index` of `count` finished: `line` says how it went (without the label, which is added). */
  finished(index: number, count: number, line: string): void {
    const full = `${this.label}${line}`;
    this.#done.push(`[${index + 1}/${count}] ${full}`);
    if (this.#bar) this.#bar.increment({ last: full });
    else process.stderr.write(`[${index + 1}/${count}] ${full}\n`);
  }

  stop(): void {
    this.#bar?.stop();
    this.#bar = undefined;
  }
}
