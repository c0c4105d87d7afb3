// `a2av plot` and `a2av bench --plot`: bench results in, an SVG file of bandwidth against size out.
import { readFileSync, writeFileSync } from 'node:fs';
import { UsageError } from '../errors.js';
import { renderSvg } from './render.js';
import { chartOf, parseResult, type PlotInput } from './series.js';

export { loadPlotLibraries } from './render.js';
export type { PlotInput } from './series.js';

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

/** Renders the inputs' chart and writes it to `outPath`. */
export async function writePlot(inputs: readonly PlotInput[], outPath: string): Promise<void> {
  writeFileSync(outPath, await renderSvg(chartOf(inputs)));
}
