// Draws a Chart as a standalone SVG file with Observable Plot, given a DOM by linkedom (Plot builds
// DOM nodes; linkedom is a small DOM without a browser). Both are optional peer dependencies (dev
// dependencies here) loaded only in this module: together they are 15 MB and 62 packages against
// 5 MB for the rest of a production install, which a GPU machine gets carried under 64 MiB with Node.
import { UsageError } from '../errors.js';
import { bandwidthAxis, bytesAxis, logPixel, spreadLabels } from './axes.js';
import type { Chart, Series } from './series.js';

type PlotLib = typeof import('@observablehq/plot');
type DomLib = typeof import('linkedom');

const SVG_NS = 'http://www.w3.org/2000/svg';
const WIDTH = 860;
const HEIGHT = 480;
/** Title and subtitle above Plot's own SVG. */
const HEADER = 46;
const MARGIN = { top: 18, bottom: 40, left: 58 };
const FONT = 'system-ui, -apple-system, "Segoe UI", "DejaVu Sans", sans-serif';
/** Line labels: 11px text needs about this much height, and about this much width per character. */
const LABEL_GAP = 13;
const CHAR_PX = 7;
/** The plot's own width at least, so long labels widen the picture rather than squeeze the lines. */
const MIN_AREA = 640;
/** Colour-blind-safe (Okabe-Ito) and dark enough on white; references take their run's colour. */
const COLOURS = ['#0072b2', '#d55e00', '#009e73', '#cc79a7', '#e69f00', '#56b4e9', '#000000', '#f0e442'];

let libraries: Promise<{ plot: PlotLib; dom: DomLib }> | undefined;

/** Loads Plot and linkedom once; a clear error where they are not installed (a production install). */
export function loadPlotLibraries(): Promise<{ plot: PlotLib; dom: DomLib }> {
  libraries ??= Promise.all([import('@observablehq/plot'), import('linkedom')]).then(
    ([plot, dom]) => ({ plot, dom }),
    (err: unknown) => {
      libraries = undefined;
      if ((err as { code?: string }).code !== 'ERR_MODULE_NOT_FOUND') throw err;
      throw new UsageError('plots need @observablehq/plot and linkedom, optional and not in a production install: ' +
        'npm install @observablehq/plot linkedom, or run a2av plot on the --json output in a development checkout');
    },
  );
  return libraries;
}

/** The chart as the text of an SVG file: both axes logarithmic, each line named at its right end. */
export async function renderSvg(chart: Chart): Promise<string> {
  const { plot: Plot, dom } = await loadPlotLibraries();
  const { document } = dom.parseHTML('<!doctype html><html><body></body></html>');
  const all = chart.series.flatMap((s) => s.points);
  const x = bytesAxis(Math.min(...all.map((p) => p.bytes)), Math.max(...all.map((p) => p.bytes)), WIDTH / 2);
  const y = bandwidthAxis(Math.min(...all.map((p) => p.gbps)), Math.max(...all.map((p) => p.gbps)));
  // Every label whole, however long (a line named by all its differences, or by a file's path): the
  // picture grows to the right past WIDTH rather than cut a label off, the plot keeping its area.
  const marginRight = 14 + CHAR_PX * Math.max(...chart.series.map((s) => s.label.length));
  const width = Math.max(WIDTH, MARGIN.left + MIN_AREA + marginRight);
  const rows = (series: Series[]) => series.flatMap((s) => s.points.map((p) => ({ ...p, label: s.label })));
  const measured = chart.series.filter((s) => !s.reference);
  const references = chart.series.filter((s) => s.reference);
  const svg = Plot.plot({
    document,
    width,
    height: HEIGHT,
    marginTop: MARGIN.top,
    marginBottom: MARGIN.bottom,
    marginLeft: MARGIN.left,
    marginRight,
    style: { background: 'white', color: '#222', fontSize: '11px', fontFamily: FONT },
    x: { type: 'log', base: 2, domain: x.domain, ticks: x.ticks, tickFormat: x.label, grid: true, label: 'input bytes per rank →', labelAnchor: 'center', labelOffset: 34 },
    y: { type: 'log', domain: y.domain, ticks: y.ticks, grid: true },
    color: { domain: chart.series.map((s) => s.label), range: chart.series.map((s) => COLOURS[s.colourOf % COLOURS.length]) },
    marks: [
      // The tick labels as text: a log scale hands a tickFormat function to d3's, which leaves the
      // 5s (0.5, 5, 50...) blank.
      Plot.axisY(y.ticks, { text: (v: number) => y.label(v), label: '↑ algbw, GB/s (input bytes per rank / time)' }),
      Plot.line(rows(references), { x: 'bytes', y: 'gbps', z: 'label', stroke: 'label', strokeWidth: 1.5, strokeDasharray: '6,4', ariaLabel: 'label' }),
      Plot.line(rows(measured), { x: 'bytes', y: 'gbps', z: 'label', stroke: 'label', strokeWidth: 2, ariaLabel: 'label' }),
      Plot.dot(rows(measured), { x: 'bytes', y: 'gbps', fill: 'label', r: 2.5 }),
      // References hollow: they show where a sweep of one size leaves a dashed line nothing to draw.
      Plot.dot(rows(references), { x: 'bytes', y: 'gbps', stroke: 'label', fill: 'white', r: 2.5 }),
      // A white halo under each name: a line that ends inside the plot (a shorter sweep) has its name
      // over other lines, which must not cross out its letters.
      Plot.text(endLabels(chart.series, y.domain), {
        x: 'bytes', y: 'gbps', text: 'label', fill: 'label', textAnchor: 'start', dx: 8, fontSize: 11, fontWeight: 600,
        stroke: 'white', strokeWidth: 3, strokeLinejoin: 'round', paintOrder: 'stroke',
      }),
    ],
  }) as unknown as Element;
  svg.setAttribute('y', String(HEADER));
  const dashed = references.length === 0 ? '' : chart.timing === 'graph' ? '; dashed: the same-run reference, eager' : '; dashed: the same-run reference, moving the same bytes';
  const omitted = chart.omitted.length === 0 ? '' : `; no graph times, not drawn: ${chart.omitted.join(', ')}`;
  const outer = document.createElementNS(SVG_NS, 'svg');
  for (const [name, value] of Object.entries({ xmlns: SVG_NS, width, height: HEIGHT + HEADER, viewBox: `0 0 ${width} ${HEIGHT + HEADER}`, 'font-family': FONT })) {
    outer.setAttribute(name, String(value));
  }
  const background = document.createElementNS(SVG_NS, 'rect');
  for (const [name, value] of Object.entries({ width: '100%', height: '100%', fill: 'white' })) background.setAttribute(name, value);
  outer.append(
    background,
    text(document, { x: MARGIN.left, y: 20, size: 15, weight: 600, content: chart.title }),
    text(document, { x: MARGIN.left, y: 38, size: 11, weight: 400, content: `algbw = input bytes per rank / median time per call (${chart.timing === 'graph' ? 'CUDA graph replays' : 'eager calls'})${dashed}${omitted}` }),
    svg,
  );
  return `<?xml version="1.0" encoding="UTF-8"?>\n${outer.outerHTML}\n`;
}

/** Each line's name at its last point, moved up or down just enough not to overlap another. */
function endLabels(series: readonly Series[], domain: [number, number]) {
  const [bottom, top] = [HEIGHT - MARGIN.bottom, MARGIN.top];
  const last = series.map((s) => s.points.at(-1)!);
  const wanted = last.map((p) => logPixel(p.gbps, domain, bottom, top));
  const placed = spreadLabels(wanted, LABEL_GAP, top + LABEL_GAP / 2, bottom - LABEL_GAP / 2);
  // Back from pixels to GB/s: Plot places the text through the same y scale.
  const gbpsAt = (px: number) => domain[0] * (domain[1] / domain[0]) ** ((px - bottom) / (top - bottom));
  return series.map((s, i) => ({ label: s.label, bytes: last[i].bytes, gbps: gbpsAt(placed[i]) }));
}

interface TextSpec {
  x: number;
  y: number;
  size: number;
  weight: number;
  content: string;
}

function text(document: Document, spec: TextSpec): Element {
  const node = document.createElementNS(SVG_NS, 'text');
  for (const [name, value] of Object.entries({ x: spec.x, y: spec.y, 'font-size': spec.size, 'font-weight': spec.weight, fill: '#222' })) {
    node.setAttribute(name, String(value));
  }
  node.textContent = spec.content;
  return node;
}
