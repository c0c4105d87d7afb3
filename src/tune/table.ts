// Measured launch plans: `a2av tune` times candidate plans of the 1-D call on the machine it runs on
// and writes the fastest per shape and size bucket; the cuda backend's default plan reads the tables
// shipped in plans/ (and an override file named by A2AV_PLAN first) and falls back to the heuristic
// (plan.ts) for shapes no table has measured.
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { UsageError } from '../errors.js';
import type { LaunchPlan } from './plan.js';

export const TABLE_FORMAT = 'a2av-plan-table/1';

/** Where a plan was measured: it applies to calls of the same shape only. */
export interface PlanShape {
  /** The GPU's name as the driver gives it, e.g. "NVIDIA H200". */
  gpu: string;
  /** GPUs holding the job's ranks. */
  gpus: number;
  /** Ranks in the job. */
  world: number;
  /** Ranks sharing each GPU. */
  ranksPerGpu: number;
  /**
   * The lanes a rank's resident blocks are shared among (the communicator's lane count; 1 with
   * A2AV_LANE_SHARES=0): a lane's share sets the fair block count and which plans launch early, so
   * a plan measured under one share is not the fastest under another. A file without it was
   * measured with whole shares, and reads as 1.
   */
  lanes: number;
}

/** One size bucket of one shape: calls with input bytes in [minBytes, maxBytes) get `plan`. */
export interface PlanEntry extends PlanShape {
  minBytes: number;
  maxBytes: number;
  plan: LaunchPlan;
  /** What tune measured at the bucket's sizes (µs per call): the plan chosen, and the heuristic. */
  us?: number[];
  defaultUs?: number[];
  /** How those were timed: 'graph' (device time per call in a replayed graph), or eagerly (absent in older files). */
  timing?: Timing;
  /** Graph-timed entries: the plan's and the heuristic's eager times too (a plan may not lose eagerly what it wins in a graph: pickPlan). */
  eagerUs?: number[];
  defaultEagerUs?: number[];
}

/** How tune timed a size: calls replayed in a CUDA graph, or launched one by one. */
export type Timing = 'graph' | 'eager';

/** Where a table's figures come from. */
export interface Measured {
  date?: string;
  commit?: string;
  command?: string;
  note?: string;
  kept?: readonly Measured[];
}

export interface PlanTable {
  format: typeof TABLE_FORMAT;
  /** How the table was made: date, commit, command; `kept`: how the entries kept from a table merged into were (mergeTables). */
  measured?: Measured;
  entries: PlanEntry[];
}

/** The entry for a call of `inputBytes` on `shape`, if a table has measured it. */
export function lookupPlan(tables: readonly PlanTable[], shape: PlanShape, inputBytes: number): PlanEntry | undefined {
  for (const table of tables) {
    const hit = table.entries.find(
      (e) =>
        e.gpu === shape.gpu &&
        e.gpus === shape.gpus &&
        e.world === shape.world &&
        e.ranksPerGpu === shape.ranksPerGpu &&
        e.lanes === shape.lanes &&
        inputBytes >= e.minBytes &&
        inputBytes < e.maxBytes,
    );
    if (hit) return hit;
  }
  return undefined;
}

/** One measured size: the fastest plan there (and the heuristic's time, for the record). */
export interface MeasuredSize {
  bytes: number;
  plan: LaunchPlan;
  us: number;
  defaultUs: number;
  timing: Timing;
  /** Graph-timed sizes: the eager times of the plan kept and of the heuristic. */
  eagerUs?: number;
  defaultEagerUs?: number;
}

/** A plan's times at one size: `us` the figure it is chosen by (graph or eager), and its eager time. */
export interface Timed {
  plan: LaunchPlan;
  us: number;
  eager: number;
}

/**
 * Eager time a plan chosen by its graph time may lose against the heuristic: this fraction, or
 * EAGER_SLACK_US where more. A plan faster in a graph may be far slower launched eagerly (2026-12-03,
 * one H200, W = 8, 2 MiB: 33x256 13.9 µs in a graph against 14.9, and 26.5 eagerly against 17.7).
 */
export const EAGER_SLACK = 0.03;
export const EAGER_SLACK_US = 0.5;

/** The fastest of `timed` by `us`, among those whose eager time is within the slack of the heuristic's (`fallback`); else the heuristic. */
export function pickPlan(fallback: Timed, timed: readonly Timed[]): Timed {
  const eagerLimit = fallback.eager + Math.max(EAGER_SLACK * fallback.eager, EAGER_SLACK_US);
  let best = fallback;
  for (const t of timed) if (t.us < best.us && t.eager <= eagerLimit) best = t;
  return best;
}

const samePlan = (a: LaunchPlan, b: LaunchPlan): boolean =>
  a.blocks === b.blocks && a.threads === b.threads && a.grid?.threads === b.grid?.threads;

/**
 * Size buckets from measured sizes (ascending): neighbours with the same plan share a bucket, and
 * bucket edges fall halfway (geometrically) between measured sizes; the first bucket starts as far
 * below the smallest size (half a doubling), the last one is open-ended. Smaller calls, never
 * measured, and sizes where the heuristic was as fast (within `slack`) keep the heuristic: no
 * entry, so the fallback applies.
 */
export function bucketize(shape: PlanShape, sizes: readonly MeasuredSize[], slack = 0.02): PlanEntry[] {
  const sorted = [...sizes].sort((a, b) => a.bytes - b.bytes);
  const edge = (i: number): number => (i <= 0 ? Math.round(sorted[0]!.bytes / Math.SQRT2) : i >= sorted.length ? Number.MAX_SAFE_INTEGER : Math.round(Math.sqrt(sorted[i - 1]!.bytes * sorted[i]!.bytes)));
  const entries: PlanEntry[] = [];
  for (let i = 0; i < sorted.length; i++) {
    const s = sorted[i]!;
    if (s.us >= s.defaultUs * (1 - slack)) continue;
    const last = entries[entries.length - 1];
    if (last && samePlan(last.plan, s.plan) && last.maxBytes === edge(i) && last.timing === s.timing) {
      last.maxBytes = edge(i + 1);
      last.us!.push(s.us);
      last.defaultUs!.push(s.defaultUs);
      if (s.eagerUs !== undefined) last.eagerUs?.push(s.eagerUs);
      if (s.defaultEagerUs !== undefined) last.defaultEagerUs?.push(s.defaultEagerUs);
    } else {
      const entry: PlanEntry = { ...shape, minBytes: edge(i), maxBytes: edge(i + 1), plan: s.plan, us: [s.us], defaultUs: [s.defaultUs], timing: s.timing };
      if (s.eagerUs !== undefined && s.defaultEagerUs !== undefined) Object.assign(entry, { eagerUs: [s.eagerUs], defaultEagerUs: [s.defaultEagerUs] });
      entries.push(entry);
    }
  }
  return entries;
}

const isCount = (v: unknown): v is number => Number.isSafeInteger(v) && (v as number) >= 0;

/** Parses and checks a table file; `from` names it in errors. */
export function parseTable(text: string, from: string): PlanTable {
  let raw: unknown;
  try {
    raw = JSON.parse(text);
  } catch (err) {
    throw new UsageError(`${from}: not JSON (${(err as Error).message})`);
  }
  const t = raw as Partial<PlanTable>;
  if (typeof t !== 'object' || t === null || t.format !== TABLE_FORMAT || !Array.isArray(t.entries)) {
    throw new UsageError(`${from}: not a plan table (expected { "format": "${TABLE_FORMAT}", "entries": [...] }, as a2av tune writes)`);
  }
  for (const [i, e] of t.entries.entries()) {
    const bad = (what: string) => new UsageError(`${from}: entry ${i}: ${what}`);
    if (typeof e?.gpu !== 'string') throw bad('gpu must be the GPU name');
    for (const k of ['gpus', 'world', 'ranksPerGpu', 'minBytes', 'maxBytes'] as const) if (!isCount(e[k])) throw bad(`${k} must be a non-negative integer`);
    if (e.lanes === undefined) e.lanes = 1;
    else if (!isCount(e.lanes) || e.lanes < 1) throw bad('lanes must be a positive integer');
    if (e.minBytes >= e.maxBytes) throw bad(`minBytes ${e.minBytes} must be below maxBytes ${e.maxBytes}`);
    const p = e.plan as LaunchPlan | undefined;
    if (typeof p !== 'object' || p === null || !isCount(p.blocks) || !isCount(p.threads)) throw bad('plan must be { blocks, threads, grid? }');
    if (p.grid !== undefined && (typeof p.grid !== 'object' || p.grid === null || !isCount(p.grid.threads))) throw bad('plan.grid must be { threads }');
    if (e.timing !== undefined && e.timing !== 'graph' && e.timing !== 'eager') throw bad(`timing must be 'graph' or 'eager', got ${JSON.stringify(e.timing)}`);
  }
  return t as PlanTable;
}

/** The plans/ folder of the package (beside kernels/), or undefined when it has none. */
export function shippedTablesDir(): string | undefined {
  let dir = dirname(fileURLToPath(import.meta.url));
  for (let i = 0; i < 5; i++) {
    if (existsSync(join(dir, 'kernels'))) return existsSync(join(dir, 'plans')) ? join(dir, 'plans') : undefined;
    dir = dirname(dir);
  }
  return undefined;
}

/**
 * The tables a default plan consults, in order: the file A2AV_PLAN names (its errors are the
 * user's: UsageError), then every table shipped in plans/.
 */
export function loadTables(override = process.env.A2AV_PLAN, dir = shippedTablesDir()): PlanTable[] {
  const tables: PlanTable[] = [];
  if (override !== undefined && override !== '') tables.push(readTable(override, `A2AV_PLAN=${override}`));
  if (dir !== undefined) for (const f of readdirSync(dir).filter((n) => n.endsWith('.json')).sort()) tables.push(readTable(join(dir, f)));
  return tables;
}

/** A table file, read and checked; `label` names it in errors (UsageError). */
export function readTable(path: string, label = path): PlanTable {
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch (err) {
    throw new UsageError(`${label}: cannot read it (${(err as NodeJS.ErrnoException).code ?? (err as Error).message})`);
  }
  return parseTable(text, label);
}

/** What `a2av tune` needs from the cuda backend to pick candidate plans for its shape. */
export interface PlanProbe {
  readonly shape: PlanShape;
  /** Blocks of `threads` threads one rank may use: resident beside this GPU's other ranks. */
  fairBlocks(threads: number): number;
  /** The heuristic's plan for a call (no table consulted): what a table entry must beat. */
  heuristic(inputBytes: number, rowBytes: number): LaunchPlan;
}
