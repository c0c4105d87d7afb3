// Byte sizes in binary units, both ways: `512K` / `4G` on the command line, `512 KiB` / `4 GiB` in tables.

const UNITS = ['B', 'KiB', 'MiB', 'GiB', 'TiB'] as const;
const SHIFT: Record<string, number> = { k: 10, m: 20, g: 30, t: 40 };
const SIZE_RE = /^(\d+(?:\.\d+)?)\s*(?:([kmgt])(?:ib?|b)?|b)?$/i;

/** The largest size parseSize takes: past it byte counts are no longer exact doubles. */
export const MAX_SIZE_BYTES = Number.MAX_SAFE_INTEGER;

/**
 * Parses `512K`, `4G`, `1M`, `1.5G`, `4GiB`, `4Gi`, `64kb` or plain bytes (`4096`). Units are binary
 * (K = 1024). Throws a RangeError saying what is accepted for anything else, a size past
 * MAX_SIZE_BYTES, or one that is not a positive whole number of bytes.
 */
export function parseSize(text: string): number {
  const m = SIZE_RE.exec(text.trim());
  if (!m) throw new RangeError(`not a size: '${text}' (use bytes or a number with K, M, G, T: 512K, 4G)`);
  const bytes = Number(m[1]) * 2 ** (m[2] === undefined ? 0 : SHIFT[m[2].toLowerCase()]);
  // Its own message: past 2^53 - 1 a size fails the whole-number check below for being too large, not fractional.
  if (bytes > MAX_SIZE_BYTES) throw new RangeError(`too large: '${text}' (a size is at most 2^53 - 1 bytes, just under 8192T)`);
  if (!Number.isInteger(bytes) || bytes <= 0) {
    throw new RangeError(`not a whole positive number of bytes: '${text}'`);
  }
  return bytes;
}

/**
 * `524288` → `512 KiB`, `4294967296` → `4 GiB`, `1536` → `1.5 KiB`, `1000` → `1000 B`. A size that is
 * not a whole number of its unit keeps one decimal, even `.0`: `1048572` → `1.0 MiB` (not quite 1 MiB).
 */
export function formatBytes(bytes: number): string {
  let unit = 0;
  while (unit < UNITS.length - 1 && bytes >= 1024 ** (unit + 1)) unit++;
  const value = bytes / 1024 ** unit;
  if (Number.isInteger(value)) return `${value} ${UNITS[unit]}`;
  const text = value.toFixed(1);
  return text === '1024.0' && unit < UNITS.length - 1 ? `1.0 ${UNITS[unit + 1]}` : `${text} ${UNITS[unit]}`;
}

/** formatBytes, with the exact count beside it where that rounds (65533 -> "64.0 KiB (65533 B)"). */
export function formatBytesExact(bytes: number): string {
  const text = formatBytes(bytes);
  return /\.\d/.test(text) ? `${text} (${bytes} B)` : text;
}

/** Whether some multiple of `unit` lies in [min, max]: doublingSizes has a size to give. */
export function holdsWholeUnit(min: number, max: number, unit: number): boolean {
  return Math.ceil(min / unit) * unit <= max;
}

/**
 * min, 2·min, 4·min, … up to and including max when the doubling lands on it; with `unit` (a row, an
 * element), each rounded up to whole units but not past max's last whole unit, repeats dropped, so
 * every size moved lies in [min, max]. A range holding no whole unit is a RangeError.
 */
export function doublingSizes(min: number, max: number, unit = 1): number[] {
  const top = max - (max % unit);
  if (!holdsWholeUnit(min, max, unit)) {
    throw new RangeError(`no multiple of ${unit} bytes lies between ${formatBytes(min)} and ${formatBytes(max)}`);
  }
  const sizes: number[] = [];
  for (let s = min; s <= max; s *= 2) {
    const whole = Math.min(Math.ceil(s / unit) * unit, top);
    if (whole !== sizes.at(-1)) sizes.push(whole);
  }
  return sizes;
}
