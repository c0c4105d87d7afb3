// Size options: the defaults that more than one command uses, the check of a --min/--max range,
// and the note saying where a doubling sweep stops short of --max.
import type { Command } from 'commander';
import type { BackendName } from '../backends/backend.js';
import { doublingSizes, formatBytes, formatBytesExact, holdsWholeUnit } from '../bench/units.js';
import { fail } from './exit.js';

/**
 * 1 KiB rows: a 256-float embedding row or a 512-wide bf16 activation; a multiple of 16 bytes, so
 * vector copies stay aligned; small enough that the smallest default size (512 KiB) still has 512
 * rows, enough for zipf splits to give even the coldest of 8 peers about 20.
 */
export const DEFAULT_ROW_BYTES = 1024;
/** The largest input per rank unless --max says: bench's, per backend (tune's is cuda's). */
export const DEFAULT_MAX = { cuda: '4G', nccl: '4G', cpu: '256M' } satisfies Record<BackendName, string>;

/**
 * Refuses --min past --max, or a range holding no whole row (the sweep's sizes are whole rows,
 * each rounded up, never past --max: a --min below one row starts at one). A bound the user did not type is named as the
 * default it is, with the option to give: "--min 512 KiB is larger than --max 1 KiB" after only
 * --max 1K would blame an option never given.
 */
export function checkSizeRange(cmd: Command, { min, max, rowBytes }: { min: number; max: number; rowBytes?: number }): void {
  const given = (key: string) => cmd.getOptionValueSource(key) === 'cli';
  const dflt = (key: string) => (given(key) ? '' : 'the default ');
  if (min > max) {
    if (given('min')) fail(`--min ${formatBytes(min)} is larger than ${dflt('max')}--max ${formatBytes(max)}${given('max') ? '' : ': give --max too'}`);
    fail(`--max ${formatBytes(max)} is smaller than the default --min ${formatBytes(min)}: give --min too`);
  }
  // A --min below one row starts the sweep at one row, which the sweep's note says (sweepNote).
  if (rowBytes === undefined) return;
  if (!holdsWholeUnit(min, max, rowBytes))
    fail(`no whole number of ${formatBytes(rowBytes)} rows (${dflt('rowBytes')}--row-bytes) lies between ${dflt('min')}--min ${formatBytes(min)} and ${dflt('max')}--max ${formatBytes(max)}`);
}

/** A size bound as the user knows it: the option typed, or the default it is. */
export function boundName(cmd: Command, key: 'min' | 'max'): string {
  return `${cmd.getOptionValueSource(key) === 'cli' ? '' : 'the default '}--${key}`;
}

/**
 * Sizes double from --min and stop at the last one not past --max, as nccl-tests' -b/-e sweep does
 * (-f 2), each in whole units (rows, elements): a --min not whole units is not run itself, nor a
 * --max off that ladder or not whole units. The note saying so, naming where the sweep starts and
 * stops, for bounds the user typed (a default's range is the progress line's); undefined where the
 * sweep runs both.
 */
export function sweepNote(cmd: Command, min: number, max: number, unit: number, unitName: string): string | undefined {
  const notes = [offMin(cmd, min, unit, unitName), shortOfMax(cmd, min, max, unit, unitName)].filter((n) => n !== undefined);
  return notes.length === 0 ? undefined : notes.join('; ');
}

/** A --min the user typed that is not whole units: where the sweep starts instead (doublingSizes rounds each size up). */
function offMin(cmd: Command, min: number, unit: number, unitName: string): string | undefined {
  if (min % unit === 0 || cmd.getOptionValueSource('min') !== 'cli') return undefined;
  return `--min ${formatBytesExact(min)} is not a whole number of ${unitName}: the sweep starts at ${formatBytesExact(Math.ceil(min / unit) * unit)}, each doubling rounded up`;
}

function shortOfMax(cmd: Command, min: number, max: number, unit: number, unitName: string): string | undefined {
  const top = doublingSizes(min, max, unit).at(-1)!;
  if (top === max || cmd.getOptionValueSource('max') !== 'cli') return undefined;
  let doubling = min;
  while (doubling < top) doubling *= 2;
  const stops = `the sweep stops at ${formatBytesExact(top)}`;
  if (doubling !== top && top === max - (max % unit)) return `--max ${formatBytesExact(max)} is not a whole number of ${unitName}: ${stops}, its last whole one`;
  const rounded = doubling === top ? '' : ` (each rounded up to whole ${unitName})`;
  return `--max ${formatBytesExact(max)} is not a doubling of ${boundName(cmd, 'min')} ${formatBytesExact(min)}${rounded}: ${stops}, the last one not past it, ` +
    "as nccl-tests' -b/-e sweep does";
}
