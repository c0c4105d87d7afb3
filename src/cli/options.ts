// Option parsers that several commands share: integers, comma-separated lists, seeds and sizes.
// Each throws commander's InvalidArgumentError, which names the option and the text given.
import { InvalidArgumentError } from 'commander';
import { parseSize } from '../bench/units.js';
import { MAX_TIMEOUT_MS } from '../world/ranks.js';
import { timeoutGiven } from './exit.js';

export function integer(min: number, max = Number.MAX_SAFE_INTEGER, why = '') {
  return (text: string): number => {
    if (!/^\d+$/.test(text.trim())) throw new InvalidArgumentError(`expected an integer >= ${min}`);
    // Digits past 2^53 - 1 are an integer too, only too large: said so, not "expected an integer".
    const n = Number(text);
    if (n > max) throw new InvalidArgumentError(`expected an integer <= ${max}${why}`);
    if (n < min) throw new InvalidArgumentError(`expected an integer >= ${min}`);
    return n;
  };
}

/**
 * A list option's comma-separated items, trimmed. An empty item (`1,,2`, a trailing comma) is
 * refused by its place, not read: Number('') is 0, and "got 0" would name a value never typed.
 */
export function listItems(text: string, what: string): string[] {
  const items = text.split(',').map((t) => t.trim());
  const empty = items.indexOf('');
  if (empty >= 0) throw new InvalidArgumentError(`item ${empty + 1} of '${text}' is empty: give ${what} separated by single commas`);
  return items;
}

/** Refuses a list naming an item twice: the run would measure it twice (or, for --backend, compare it with itself). */
export function once<T>(items: T[], noun: string): T[] {
  const twice = items.find((t, i) => items.indexOf(t) !== i);
  if (twice !== undefined) throw new InvalidArgumentError(`${noun} ${twice} is named twice`);
  return items;
}

/** Seeds: the split layouts and the pipeline's data are drawn from 32 bits, so a larger seed would repeat a smaller one's. */
export const seedInteger = integer(0, 2 ** 32 - 1, ' (layouts and data are drawn from a 32-bit seed)');
/** --repeats: each is a whole timed loop whose figure every rank agrees on (a slot each in one buffer). */
export const repeatsInteger = integer(1, 1000, ' (each is a whole timed loop)');

export function size(text: string): number {
  try {
    return parseSize(text);
  } catch (err) {
    throw new InvalidArgumentError((err as Error).message);
  }
}

/** A size, or 0 (none). */
export function sizeOrZero(text: string): number {
  return /^\s*0+\s*$/.test(text) ? 0 : size(text);
}

/** The help of the options every command that runs ranks shares (tune's --ranks has no cpu default). */
export const RANKS_HELP = 'ranks, as threads of this process (default: one per GPU; 2 on cpu; under a2av launch: its processes)';
export const TIMEOUT_HELP = 'bound on every wait between ranks (default 60000)';
const timeoutInteger = integer(1, MAX_TIMEOUT_MS, ' (about 24.8 days, the longest a timer holds)');
/** --timeout-ms's parser: up to what a timer holds (past it Node's timers fire after 1 ms); the value is kept for the hint on a timeout (exit.ts). */
export const timeoutMs = (text: string): number => {
  const ms = timeoutInteger(text);
  timeoutGiven(ms);
  return ms;
};
