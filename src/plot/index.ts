// `a2av plot` and `a2av bench --plot`: bench results in, an SVG file of bandwidth against size out.
import { readFileSync, writeFileSync } from 'node:fs';
import { UsageError } from '../errors.js';
import { checkWritable } from '../output-file.js';
import { renderSvg } from './render.js';
import { chartOf, parseResult, type PlotInput, type Timing } from './series.js';

export { loadPlotLibraries } from './render.js';
export type { PlotInput, Timing } from './series.js';

/** Reads a result file; a missing or unreadable one is a usage error naming it. */
export function readResultFile(path: string): PlotInput {
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch (err) {
    throw new UsageError(`${path}: cannot read (${(err as NodeJS.ErrnoException).code ?? (err as Error).message})`);
  }
  return { source: path, result: parseResult(text, path) };
}

/**
 * Refuses, before any work is done, an output that is not named .svg (the file is SVG whatever its
 * name) or that this process cannot write: a missing or read-only folder, a folder of that name.
 */
export function checkOutput(outPath: string): void {
  if (!/\.svg$/i.test(outPath)) throw new UsageError(`${outPath}: plots are written as SVG; name the file *.svg`);
  checkWritable(outPath);
}

/**
 * Renders the inputs' chart (their eager or graph times) and writes it to `outPath`; returns the
 * lines left out (backends without graph times), which the picture names too.
 */
export async function writePlot(inputs: readonly PlotInput[], outPath: string, timing: Timing = 'eager'): Promise<string[]> {
  const chart = chartOf(inputs, timing);
  const svg = await renderSvg(chart);
  try {
    writeFileSync(outPath, svg);
  } catch (err) {
    throw new UsageError(`${outPath}: cannot write (${(err as NodeJS.ErrnoException).code ?? (err as Error).message})`);
  }
  return chart.omitted;
}
