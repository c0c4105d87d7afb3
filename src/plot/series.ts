// Bench results (the JSON `a2av bench --json` writes) as the lines of a bandwidth plot: checked on the
// way in, so a wrong file is named in one line instead of drawing an empty or broken picture.
import { counted, splitsOf, type BenchResult, type BenchRow } from '../bench/table.js';
import { formatBytes } from '../bench/units.js';
import { UsageError } from '../errors.js';

/** One bench result and where it came from (a file name, or `bench` for the run just made). */
export interface PlotInput {
  source: string;
  result: BenchResult;
}

export interface Point {
  /** Input bytes per rank. */
  bytes: number;
  /** algbw: input bytes per rank / median time, GB/s (1e9 B/s). */
  gbps: number;
}

export interface Series {
  label: string;
  /** A same-run reference (drawn dashed), not a measured call. */
  reference: boolean;
  /** Which measured series, counted in order, gives the line its colour: a reference takes its run's. */
  colourOf: number;
  points: Point[];
}

export interface Chart {
  /** What every line has in common: device, ranks, splits, row bytes, date. */
  title: string;
  /** Which time the measured lines show: eager calls, or the calls replayed from a CUDA graph. */
  timing: Timing;
  series: Series[];
  /** Lines not drawn: with graph timing, the backends that have no graph times (nccl, cpu). */
  omitted: string[];
}

/**
 * eager: each call launched from the host (every size has it); graph: back-to-back calls replayed
 * from a CUDA graph (cuda, the sizes bench timed that way), device time without the host's launches.
 */
export type Timing = 'eager' | 'graph';

/** What a2av plot draws, for its errors. */
const DRAWS = "a2av plot draws only the all-to-all sweeps of 'a2av bench --json' (--op alltoallv, dispatch, combine, roundtrip)";
/** The fields a sweep's result describes itself by (as checkResult wants them). */
const DESCRIBED = { backend: 'string', device: 'string', ranks: 'number', splits: 'string', rowBytes: 'number' } as const;

/** Checks parsed JSON is a bench result with rows to draw; `source` names it in the error. */
export function checkResult(value: unknown, source: string): BenchResult {
  const shape = `want the JSON of 'a2av bench --json': ${Object.keys(DESCRIBED).join(', ')} and rows of {bytes, timeUs}`;
  const other = otherBenchKind(value);
  if (other !== undefined) throw new UsageError(`${source}: ${other}; ${DRAWS}`);
  if (typeof value !== 'object' || value === null || Array.isArray(value)) throw new UsageError(`${source}: not an a2av bench result (${shape})`);
  const result = value as Partial<BenchResult>;
  const missing = Object.entries(DESCRIBED).filter(([key, type]) => typeof (result as Record<string, unknown>)[key] !== type).map(([key]) => key);
  if (!Array.isArray(result.rows)) missing.push('rows');
  if (missing.length > 0) throw new UsageError(`${source}: not an a2av bench result: no ${missing.join(', ')} (${shape})`);
  if (result.rows!.length === 0) throw new UsageError(`${source}: no rows: the sweep measured no size, nothing to plot`);
  result.rows!.forEach((row: Partial<BenchRow>, i) => {
    if (!isPositive(row?.bytes) || !isPositive(row?.timeUs)) {
      throw new UsageError(`${source}: row ${i} has no positive bytes and timeUs (${shape})`);
    }
  });
  return result as BenchResult;
}

/**
 * The other bench commands' results (one, or a list of one per backend), named: token MoE groups
 * (`--op moe-dispatch|moe-combine`, rows per token count), `bench allreduce` and `bench pipeline`.
 */
function otherBenchKind(value: unknown): string | undefined {
  const first: unknown = Array.isArray(value) ? value[0] : value;
  if (typeof first !== 'object' || first === null) return undefined;
  const r = first as Record<string, unknown>;
  if (typeof r.op === 'string' && r.op.startsWith('moe-') && typeof r.numExperts === 'number') return `an 'a2av bench --op ${r.op}' result (a token MoE group per token count)`;
  if (typeof r.dtype === 'string' && Array.isArray(r.rows)) return "an 'a2av bench allreduce' result";
  if (r.op === 'pipeline' && Array.isArray(r.rows)) return "an 'a2av bench pipeline' result (it/s per training arm, not a sweep over sizes)";
  return undefined;
}

/** Reads a result file's text: JSON that checkResult accepts. */
export function parseResult(text: string, source: string): BenchResult {
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (err) {
    throw new UsageError(`${source}: not JSON (${(err as Error).message.replace(/\s*\n\s*/g, ' ')}); want the output of 'a2av bench --json'`);
  }
  return checkResult(value, source);
}

/**
 * Fields shown in the title when every input shares them, else beside each line's name. Order is the
 * title's: the machine, then the shape of the call.
 */
const FIELDS: { name: string; value(r: BenchResult): string }[] = [
  { name: 'device', value: (r) => r.device.replace(/ #\d+/g, '') },
  { name: 'ranks', value: (r) => counted(r.ranks, 'rank') },
  { name: 'op', value: (r) => (r.op === undefined || r.op === 'alltoallv' ? 'all-to-all-v' : `${r.op}, ${r.experts} experts per rank${(r.align ?? 1) > 1 ? `, align ${r.align}` : ''}`) },
  { name: 'maxBlocks', value: (r) => (r.maxBlocks === undefined ? '' : `at most ${r.maxBlocks} blocks a call`) },
  { name: 'splits', value: (r) => splitsOf(r) },
  { name: 'rowBytes', value: (r) => `${formatBytes(r.rowBytes)} rows` },
  { name: 'date', value: (r) => (r.date ?? '').slice(0, 10) },
];

/**
 * The lines: per input, one per backend (a table comparing backends has rows naming theirs), then
 * the same-run reference of each backend that has one. Several inputs: what tells them apart goes
 * into the labels (their splits, ranks... or, when nothing in the JSON does, the file name).
 */
export function chartOf(inputs: readonly PlotInput[], timing: Timing = 'eager'): Chart {
  if (inputs.length === 0) throw new UsageError('no bench results to plot');
  // A graph line has the sizes bench replayed from a graph; the references stay eager (a copy is
  // one launch either way).
  const timeOf = timing === 'graph' ? (r: BenchRow) => r.graphUs : (r: BenchRow) => r.timeUs;
  if (timing === 'graph' && !inputs.some((i) => i.result.rows.some((r) => isPositive(r.graphUs)))) {
    throw new UsageError(`${inputs.map((i) => i.source).join(', ')}: no graph times (graphUs) to plot: bench replays calls from a CUDA graph on cuda only, at the sizes up to its graph bound; plot the eager times (--time eager)`);
  }
  const shared = FIELDS.filter((f) => new Set(inputs.map((i) => f.value(i.result))).size === 1);
  const differing = FIELDS.filter((f) => !shared.includes(f) && f.name !== 'date');
  const tags = distinctTags(inputs.map((input) => differing.map((f) => f.value(input.result))), inputs.map((i) => i.source));
  const series: Series[] = [];
  const omitted: string[] = [];
  for (const [k, input] of inputs.entries()) {
    const tag = inputs.length === 1 ? '' : ` (${tags[k]})`;
    const byBackend = groupRows(input.result);
    // A table of backends names each reference's owner only when more than one of them has one.
    const owned = [...byBackend.values()].filter((rows) => rows.some((r) => isPositive(r.refUs))).length > 1;
    const refs: Series[] = [];
    for (const [backend, rows] of byBackend) {
      const colourOf = series.filter((s) => !s.reference).length;
      const timed = rows.filter((r) => isPositive(timeOf(r)));
      if (timed.length > 0) series.push({ label: `${backend}${tag}`, reference: false, colourOf, points: pointsOf(timed, timeOf) });
      else omitted.push(`${backend}${tag}`);
      const refRows = rows.filter((r) => isPositive(r.refUs));
      if (refRows.length === 0) continue;
      const kinds = [...new Set(refRows.map((r) => r.ref ?? 'copy'))].join('/');
      refs.push({ label: `${kinds} ref${owned ? ` of ${backend}` : ''}${tag}`, reference: true, colourOf, points: pointsOf(refRows, (r) => r.refUs) });
    }
    series.push(...refs);
  }
  const title = `a2av bench: ${shared.map((f) => f.value(inputs[0].result)).filter((v) => v !== '').join(', ')}`;
  return { title, timing, series, omitted };
}

/**
 * Each input's tag: what differs in its JSON; where that leaves two alike, its file's name, then
 * its path, then its place in the list, so no two lines share a label.
 */
function distinctTags(parts: readonly string[][], sources: readonly string[]): string[] {
  const extras = [() => [], (k: number) => [baseName(sources[k])], (k: number) => [sources[k]], (k: number) => [sources[k], `#${k + 1}`]];
  const level = parts.map(() => 0);
  const tagsNow = () => parts.map((p, k) => [...p, ...extras[level[k]](k)].join(', '));
  for (let step = 1; step < extras.length; step++) {
    const tags = tagsNow();
    const clashing = tags.map((t) => tags.indexOf(t) !== tags.lastIndexOf(t));
    if (!clashing.includes(true)) break;
    clashing.forEach((clash, k) => clash && (level[k] = step));
  }
  return tagsNow();
}

/** Rows by backend, in the order they first appear; a single-backend result's rows under its name. */
function groupRows(result: BenchResult): Map<string, BenchRow[]> {
  const groups = new Map<string, BenchRow[]>();
  for (const row of result.rows) {
    const backend = row.backend ?? result.backend;
    groups.set(backend, [...(groups.get(backend) ?? []), row]);
  }
  return groups;
}

function pointsOf(rows: readonly BenchRow[], micros: (row: BenchRow) => number): Point[] {
  return rows.map((r) => ({ bytes: r.bytes, gbps: r.bytes / micros(r) / 1e3 })).sort((a, b) => a.bytes - b.bytes);
}

/** `docs/results/run/bench-w2.json` → `bench-w2`. */
function baseName(path: string): string {
  return path.replace(/^.*[\\/]/, '').replace(/\.json$/i, '');
}

/** JSON read back has null where a row had NaN. */
function isPositive(x: unknown): x is number {
  return typeof x === 'number' && Number.isFinite(x) && x > 0;
}
