// The driving side of `a2av bench pipeline`: starts the ranks as threads (or, in a process started
// by a launcher, runs this rank's part), turns rank 0's reports into events, returns its result.
import type { BackendName } from '../backends/backend.js';
import { UsageError } from '../errors.js';
import { rankEnv } from '../world/env.js';
import { init } from '../world/init.js';
import { runRanks } from '../world/threads.js';
import { pipelineRank, type ArmResult, type PipelineArg, type PipelineRankResult, type PipelineReport } from './rank.js';
import { SHAPES, type Shape, type ShapeName } from './shapes.js';
import type { Arm } from './train.js';
import type { ArmTrace } from './trace.js';

export interface PipelineOptions {
  backend: BackendName;
  ranks: number;
  shape: ShapeName;
  arms: Arm[];
  warmup: number;
  iters: number;
  seed: number;
  trace: boolean;
  timeoutMs?: number;
  /** At most this many blocks for each input-dist all-to-all (cuda): its lane's SM budget. */
  inputDistBlocks?: number;
}

export interface PipelineResult {
  backend: BackendName;
  ranks: number;
  shape: Shape;
  device: string;
  /** ISO 8601, when the run started. */
  date: string;
  warmup: number;
  iters: number;
  seed: number;
  /** The input dist's block budget, when one was set. */
  inputDistBlocks?: number;
  /** Where the step times come from. */
  clock: string;
  arms: ArmResult[];
  traces?: ArmTrace[];
}

export interface PipelineEvents {
  onStart?(r: Extract<PipelineReport, { type: 'start' }>): void;
  onStep?(r: Extract<PipelineReport, { type: 'step' }>): void;
}

/** Runs every arm on `opts.backend`; rank 0's result (undefined on a launched job's other ranks). */
export async function runPipeline(opts: PipelineOptions, events: PipelineEvents = {}): Promise<PipelineResult | undefined> {
  const date = new Date().toISOString();
  const arg: PipelineArg = { shape: opts.shape, arms: opts.arms, warmup: opts.warmup, iters: opts.iters, seed: opts.seed, trace: opts.trace, inputDistBlocks: opts.inputDistBlocks };
  const onReport = (_rank: number, message: unknown) => {
    const m = message as PipelineReport;
    if (m.type === 'start') events.onStart?.(m);
    else events.onStep?.(m);
  };
  let rank0: PipelineRankResult | undefined;
  const env = rankEnv();
  if (env !== undefined) {
    if (opts.ranks !== env.worldSize) throw new UsageError(`${opts.ranks} ranks asked for, but the launcher started ${env.worldSize}`);
    const comm = await init({ backend: opts.backend, timeoutMs: opts.timeoutMs });
    try {
      rank0 = await pipelineRank(comm, arg, { report: (m) => onReport(comm.rank, m) });
    } finally {
      await comm.close();
    }
  } else {
    [rank0] = await runRanks<PipelineArg, PipelineRankResult | undefined>(
      { backend: opts.backend, ranks: opts.ranks, timeoutMs: opts.timeoutMs, onReport },
      new URL('./rank.js', import.meta.url),
      'pipelineRank',
      arg,
    );
  }
  if (rank0 === undefined) return undefined;
  return {
    backend: opts.backend,
    ranks: opts.ranks,
    shape: SHAPES[opts.shape],
    device: rank0.device,
    date,
    warmup: opts.warmup,
    iters: opts.iters,
    ...(opts.inputDistBlocks === undefined ? {} : { inputDistBlocks: opts.inputDistBlocks }),
    seed: opts.seed,
    clock: opts.backend === 'cpu'
      ? 'host clock (performance.now) around each phase; the cpu backend runs each collective in the calling thread'
      : 'device events recorded around each phase on its stream, cuEventElapsedTime; ranks lined up by an all-reduce before the timed steps',
    arms: rank0.arms,
    traces: rank0.traces,
  };
}
