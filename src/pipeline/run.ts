// The driving side of `a2av bench pipeline`: starts the ranks as threads (or, in a process started
// by a launcher, runs this rank's part), turns rank 0's reports into events, returns its result.
import type { BackendName } from '../backends/backend.js';
import { shown, UsageError } from '../errors.js';
import { hostShare } from '../bench/host-share.js';
import { runJob } from '../world/job.js';
import { checkPipelineArg, checkPipelineBackend, withPipelineDefaults, type PipelineInput } from './options.js';
import type { ArmResult, PipelineArg, PipelineRankResult, PipelineReport } from './rank.js';
import { SHAPES, type Shape } from './shapes.js';
import type { ArmTrace } from './trace.js';

/** The run: the rank program's argument (PipelineArg), and where it runs. */
/** The pipeline's options (PipelineInput: arms, warmup, seed and trace have the CLI's defaults), and the runner's. */
export type PipelineOptions = PipelineInput & {
  /** Default: as runRanks and init() pick (cuda where a GPU is visible, else cpu). */
  backend?: BackendName;
  ranks: number;
  timeoutMs?: number;
};

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
  /** cpu: the host's cores, and its 1-minute load average when the run started (host-share.ts). */
  cores?: number;
  load?: number;
  /** Where the step times come from. */
  clock: string;
  /** What computed the dense layers' GEMMs. */
  gemm: string;
  arms: ArmResult[];
  traces?: ArmTrace[];
}

export interface PipelineEvents {
  onStart?(r: Extract<PipelineReport, { type: 'start' }>): void;
  onStep?(r: Extract<PipelineReport, { type: 'step' }>): void;
}

/** Runs every arm on `opts.backend`; rank 0's result (undefined on a launched job's other ranks). */
export async function runPipeline(opts: PipelineOptions, events: PipelineEvents = {}): Promise<PipelineResult | undefined> {
  // Else a bare TypeError from the destructuring below, where runRanks names its own refusal.
  if (opts === null || typeof opts !== 'object') throw new UsageError(`runPipeline takes one object of options, got ${shown(opts)}`);
  // The CLI's default (2 on cpu, one per GPU) needs the driver to count GPUs: the caller says.
  if (opts.ranks === undefined) throw new UsageError('runPipeline: ranks is required (the ranks to start as threads; under a launcher, the job\'s size)');
  const date = new Date().toISOString();
  // Read before the ranks start; kept if they turn out to be cpu's.
  const share = hostShare('cpu');
  // The ranks get the rank program's options only (they refuse keys it does not know).
  const { backend: _backend, ranks: _ranks, timeoutMs: _timeoutMs, ...given } = opts;
  const arg = withPipelineDefaults(given);
  // Checked here first: once, before any rank starts, and the same error whichever rank would have thrown it first.
  checkPipelineArg(arg, ['backend', 'ranks', 'timeoutMs']);
  if (opts.backend !== undefined) checkPipelineBackend(arg, opts.backend);
  const onReport = (_rank: number, message: unknown) => {
    const m = message as PipelineReport;
    if (m.type === 'start') events.onStart?.(m);
    else events.onStep?.(m);
  };
  const { result: rank0 } = await runJob<PipelineArg, PipelineRankResult | undefined>(
    { backend: opts.backend, ranks: opts.ranks, timeoutMs: opts.timeoutMs, onReport },
    new URL('./rank.js', import.meta.url),
    'pipelineRank',
    arg,
  );
  if (rank0 === undefined) return undefined;
  // The backend that ran, as rank 0 saw it: with none named the ranks pick one (resolving it here
  // first would start the driver before runRanks has set up the ranks' hardware queues).
  const backend = rank0.backend;
  return {
    backend,
    ranks: opts.ranks,
    shape: SHAPES[opts.shape],
    device: rank0.device,
    date,
    ...(backend === 'cpu' ? share : {}),
    warmup: arg.warmup,
    iters: arg.iters,
    ...(opts.inputDistBlocks === undefined ? {} : { inputDistBlocks: opts.inputDistBlocks }),
    seed: arg.seed,
    clock: backend === 'cpu'
      ? 'host clock (performance.now) around each phase; the cpu backend runs each collective in the calling thread'
      : 'device events recorded around each phase on its stream, cuEventElapsedTime; ranks lined up by an all-reduce before the timed steps',
    gemm: rank0.gemm,
    arms: rank0.arms,
    traces: rank0.traces,
  };
}
