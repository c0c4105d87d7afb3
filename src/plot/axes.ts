// The plot's scales worked out here rather than left to the library: both axes are logarithmic, and
// the line labels at the right end are spread apart in pixels, which needs the same y mapping the
// library will use.
import { formatBytes } from '../bench/units.js';

/** A log axis: its domain, the values that get a tick, and the ticks' text ('' for an unlabelled tick). */
export interface LogAxis {
  domain: [number, number];
  ticks: number[];
  label(value: number): string;
}

/**
 * x: every power of two from the smallest size to the largest (sweeps double the size), labelled
 * every `step`-th power so that labels at least `minLabelPx` apart fit in `widthPx`.
 */
export function bytesAxis(min: number, max: number, widthPx: number, minLabelPx = 52): LogAxis {
  // One size alone (a one-size sweep) sits in the middle of a power of two either side, not on an edge.
  const alone = min === max;
  const lo = Math.floor(Math.log2(min)) - (alone ? 1 : 0);
  const hi = Math.max(Math.ceil(Math.log2(max)) + (alone ? 1 : 0), lo + 1);
  const ticks = Array.from({ length: hi - lo + 1 }, (_, i) => 2 ** (lo + i));
  const perTick = widthPx / (hi - lo);
  let step = 1;
  while (step * perTick < minLabelPx) step *= 2;
  // Labels on the powers of 2**step (1 MiB, 4 MiB...) rather than counted from the first tick.
  const label = (v: number) => (Math.round(Math.log2(v)) % step === 0 ? formatBytes(v) : '');
  return { domain: [2 ** lo, 2 ** hi], ticks, label };
}

/** y: GB/s over decades, ticked 1-2-5 (10, 20, 50, 100...), the domain the decade steps around the data. */
export function bandwidthAxis(min: number, max: number): LogAxis {
  const steps = [1, 2, 5, 10];
  const floorStep = (v: number) => {
    const decade = 10 ** Math.floor(Math.log10(v));
    return decade * steps.filter((s) => s * decade <= v * (1 + 1e-9)).at(-1)!;
  };
  const ceilStep = (v: number) => {
    const decade = 10 ** Math.floor(Math.log10(v));
    return decade * steps.find((s) => s * decade >= v * (1 - 1e-9))!;
  };
  const lo = floorStep(min);
  const hi = ceilStep(max) > lo ? ceilStep(max) : ceilStep(lo * 1.01);
  const ticks: number[] = [];
  for (let decade = 10 ** Math.floor(Math.log10(lo)); decade <= hi; decade *= 10) {
    for (const s of steps.slice(0, 3)) {
      const v = s * decade;
      if (v >= lo * (1 - 1e-9) && v <= hi * (1 + 1e-9)) ticks.push(v);
    }
  }
  return { domain: [lo, hi], ticks, label: (v) => String(+v.toPrecision(3)) };
}

/** Pixel position of `value` on a log axis whose domain maps to [from, to]. */
export function logPixel(value: number, domain: [number, number], from: number, to: number): number {
  const t = Math.log(value / domain[0]) / Math.log(domain[1] / domain[0]);
  return from + t * (to - from);
}

/**
 * Moves label positions (pixels, y down) apart by at least `gap`, each as little as it can:
 * overlapping labels become a block centred where they wanted to be, which stays inside [top, bottom].
 * Returns the new positions in the input's order.
 */
export function spreadLabels(wanted: readonly number[], gap: number, top: number, bottom: number): number[] {
  const order = wanted.map((y, i) => ({ y, i })).sort((a, b) => a.y - b.y);
  // Blocks of labels that touch: each is its first label's position and how many it holds.
  const blocks: { start: number; count: number; sum: number }[] = [];
  for (const { y } of order) {
    blocks.push({ start: y, count: 1, sum: y });
    // Merge while the last block overlaps the one before it.
    while (blocks.length > 1) {
      const last = blocks.at(-1)!;
      const prev = blocks.at(-2)!;
      if (prev.start + prev.count * gap <= last.start) break;
      blocks.splice(-2, 2, merged(prev, last, gap));
    }
  }
  const placed: number[] = [];
  for (const block of blocks) {
    const start = Math.min(Math.max(block.start, top), bottom - (block.count - 1) * gap);
    for (let k = 0; k < block.count; k++) placed.push(start + k * gap);
  }
  const out = new Array<number>(wanted.length);
  order.forEach(({ i }, k) => (out[i] = placed[k]));
  return out;
}

/** Two touching blocks as one, centred on the mean of the positions its labels wanted. */
function merged(a: { count: number; sum: number }, b: { count: number; sum: number }, gap: number) {
  const count = a.count + b.count;
  const sum = a.sum + b.sum;
  return { start: sum / count - ((count - 1) * gap) / 2, count, sum };
}
