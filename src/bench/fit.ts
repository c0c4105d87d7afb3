// How much of the asked sweep a device can hold: the leading sizes whose buffers fit its free
// memory, each buffer within the backend's largest (the cpu backend's views are typed arrays, capped
// by Node), and why, when that drops sizes.
import { UsageError } from '../errors.js';
import { opBytes, type OpShape } from './ops.js';
import { copyBytes, copyPairs } from './reference.js';
import type { Splits } from './splits.js';
import type { RefKind } from './table.js';
import { formatBytes } from './units.js';

/** Allocations must fit free memory with this much to spare. */
const MEMORY_HEADROOM = 1.1;

export interface FitLimits {
  /** Free bytes on the device (the least any rank sees). */
  free: number;
  /** Bytes one buffer may hold (Infinity where only memory bounds it). */
  maxBuffer: number;
  /** Ranks sharing the device, and its name and backend for the note. */
  perDevice: number;
  deviceName: string;
  backend: string;
}

/** Bytes one device needs for the sweep over `plans`: its ranks' payload buffers (ops.ts), and the copy reference's pair. */
export function memoryNeeded(plans: readonly Splits[], shape: OpShape, perDevice: number, ref: RefKind) {
  const bytes = opBytes(shape, plans);
  const refBytes = copyBytes(ref, bytes.inputBytes, perDevice);
  const total = MEMORY_HEADROOM * (perDevice * (bytes.inputBytes + bytes.midBytes + bytes.backBytes) + 2 * copyPairs(ref, perDevice) * refBytes);
  return { ...bytes, copyBytes: refBytes, total, largest: Math.max(bytes.inputBytes, bytes.midBytes, bytes.backBytes, refBytes) };
}

/**
 * The leading plans that fit `limits`, what they need, and, when that drops sizes, `dropped`: why the
 * first one left out does not fit, naming the limit. The caller words the note: only it knows the
 * --max asked, which may lie past the sweep's largest size. None fits: a UsageError naming the limit.
 */
export function fitSweep(all: readonly Splits[], sizes: readonly number[], shape: OpShape, ref: RefKind, limits: FitLimits) {
  const need = (count: number) => memoryNeeded(all.slice(0, count), shape, limits.perDevice, ref);
  const pastBuffer = (count: number) => need(count).largest > limits.maxBuffer;
  let count = all.length;
  while (count > 0 && (pastBuffer(count) || need(count).total > limits.free)) count--;
  // Why the first size left out does not fit.
  const why = (count: number): string => pastBuffer(count + 1)
    ? `${formatBytes(sizes[count])} per rank needs a buffer of ${formatPast(need(count + 1).largest, limits.maxBuffer)}, past the ${limits.backend} backend's ` +
      `${formatBytes(limits.maxBuffer)} per buffer`
    : `${formatBytes(sizes[count])} per rank needs ${formatBytes(need(count + 1).total)} on ${limits.deviceName}, ` +
      `${formatBytes(limits.free)} is free (${limits.perDevice} rank${limits.perDevice > 1 ? 's' : ''} share it)`;
  if (count === 0) throw new UsageError(why(0));
  return { plans: all.slice(0, count), memory: need(count), dropped: count < all.length ? why(count) : undefined };
}

/**
 * `bytes`, a size past `limit`, so that it reads as larger: where both round to the same figure
 * (4 GiB and its canary: "4.0 GiB, past ... 4 GiB"), the limit and what it lacks.
 */
function formatPast(bytes: number, limit: number): string {
  const text = formatBytes(bytes);
  const same = (a: string, b: string) => a.replace('.0 ', ' ') === b.replace('.0 ', ' ');
  return bytes > limit && same(text, formatBytes(limit)) ? `${formatBytes(limit)} + ${bytes - limit} bytes` : text;
}
