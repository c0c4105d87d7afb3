// `a2av bench pipeline`: a synthetic DLRM-like training step timed per arm (src/pipeline), with its progress on stderr.
import { InvalidArgumentError, Option, type Command } from 'commander';
import type { BackendName } from '../backends/backend.js';
import { counted } from '../bench/table.js';
import { checkWritable } from '../output-file.js';
import type { PipelineEvents } from '../pipeline/run.js';
import { SHAPE_NAMES, type ShapeName } from '../pipeline/shapes.js';
import { ARMS, type Arm } from '../pipeline/train.js';
import { backendList, backendsAndRanks, eachBackend } from './backends.js';
import { fail } from './exit.js';
import { integer, listItems, once, seedInteger, RANKS_HELP, TIMEOUT_HELP, timeoutMs } from './options.js';
import { ProgressBar } from './progress-bar.js';

/** commander's parse of `a2av bench pipeline`; unset counts take the backend's defaults (PIPELINE_DEFAULTS). */
interface PipelineFlags {
  backend?: BackendName[];
  ranks?: number;
  shape?: ShapeName;
  arms: Arm[];
  iters?: number;
  warmup?: number;
  seed: number;
  timeoutMs?: number;
  json?: boolean;
  trace?: string;
  inputDistBlocks?: number;
  gemm?: 'kernel' | 'cublas' | 'auto';
}

/**
 * GPU runs time >= 200 steps after a warm-up; cpu runs the tiny shape, whose steps are host loops
 * (the first few dozen run slow while the JIT warms up).
 */
const PIPELINE_DEFAULTS = {
  gpu: { shape: 'dlrm', iters: 200 },
  cpu: { shape: 'tiny', iters: 100 },
} as const;

/** Adds `pipeline` to `a2av bench`. */
export function addBenchPipeline(bench: Command): void {
  bench
    .command('pipeline')
    // bench's own leniency (its words are sub-commands) is inherited: a stray word here is a typo, not a sub-command.
    .allowExcessArguments(false)
    .description("A synthetic DLRM-like training step in TorchRec's sparse-data-dist order (input dist of the next batch with device splits, " +
      'embedding lookup, output dist, dense forward and backward, gradient all-to-all, embedding update, gradient all-reduce, SGD), timed per arm: ' +
      'one-lane (every collective on lane 0), two-lanes (the input dist on lane 1), two-lanes-serialized (lane 1, but each collective waits for ' +
      'the one before: the control). Every arm must end with the same loss, tables and weights; a difference ends the run with exit status 1')
    .option('--backend <names>', 'backend, or several: cuda, nccl (host-side splits: TorchRec\'s way), cpu (default: cuda when a GPU is visible, else cpu)', backendList)
    .option('--ranks <n>', RANKS_HELP, integer(1))
    .addOption(new Option('--shape <name>', 'tiny; dlrm (26 features, dim 64, 100k rows, batch 8192, dense 512-256-64 over 512-512-256-1); ' +
      'dlrm-128 (dim 128); many-tables (170 features, dim 256, pooling 30, batch 32768) (default: dlrm, or tiny where cpu is one of the backends)').choices(SHAPE_NAMES))
    .addOption(new Option('--arms <list>', 'arms to run, in this order').argParser(armList).default([...ARMS], ARMS.join(',')))
    .option('--iters <n>', 'timed steps per arm: the median and spread are over them (default 200; 100 with cpu; with --warmup at most 10^7)', integer(1))
    .option('--warmup <n>', 'untimed steps before them (default 20)', integer(0))
    .option('--seed <n>', 'seed of the synthetic batches and the initial weights', seedInteger, 1)
    .option('--timeout-ms <ms>', TIMEOUT_HELP, timeoutMs)
    .option('--input-dist-blocks <n>', 'at most this many thread blocks for each input-dist all-to-all on cuda: the SM budget of the lane that ' +
      'overlaps the compute (default: the launch plan\'s)', integer(1))
    .addOption(new Option('--gemm <kind>', "cuda and nccl: the dense layers' GEMMs in kernel (the pipeline's own, bit-exact against the cpu backend), " +
      "cublas (cuBLAS's sgemm, checked against the kernel before the steps) or auto (cuBLAS where its library loads) " +
      '(default: auto; kernel where cpu is one of the backends)').choices(['kernel', 'cublas', 'auto']))
    .option('--json', 'print only the JSON result to stdout')
    .option('--trace <file.json>', 'write the timed steps as Chrome trace events (ui.perfetto.dev opens them): per arm and rank, a track for ' +
      'the compute stream, one for the data stream, one per lane')
    .action((flags: PipelineFlags) => benchPipeline(flags));
}

/** --arms's parser: arms to run, in the order given. */
function armList(text: string): Arm[] {
  const names = listItems(text, 'arms');
  const odd = names.find((n) => !(ARMS as readonly string[]).includes(n));
  if (odd !== undefined) throw new InvalidArgumentError(`unknown arm '${odd}' (choose from ${ARMS.join(', ')})`);
  return once(names, 'arm') as Arm[];
}

async function benchPipeline(flags: PipelineFlags): Promise<void> {
  const { names, ranks } = await backendsAndRanks(flags);
  // The budget binds cuda's kernels only: without cuda the table would name a budget nothing kept.
  if (flags.inputDistBlocks !== undefined && !names.includes('cuda')) fail(`--input-dist-blocks is the cuda backend's SM budget (the input dist's maxBlocks); ${names.join(' and ')} ${names.length > 1 ? 'have' : 'has'} none: run it with --backend cuda`);
  // A trace file that cannot be written ends the run before the arms, not after them.
  if (flags.trace !== undefined) checkWritable(flags.trace);
  // cuBLAS sums in its own order: beside the cpu backend's loops the rows' checksums could not agree.
  if (flags.gemm !== undefined && flags.gemm !== 'kernel' && names.includes('cpu')) fail(`--gemm ${flags.gemm} is for cuda and nccl (the cpu backend's GEMMs are host loops, bit-exact with the kernel): leave cpu out of --backend, or leave out --gemm`);
  // cuBLAS where it loads (3-4x pl_gemm on an H200: docs/perf.md); beside cpu the kernel, to agree with its loops.
  const gemm = flags.gemm ?? (names.includes('cpu') ? 'kernel' : 'auto');
  if (gemm === 'cublas') {
    // Missing here, it would fail inside the ranks: say where it was looked for, before they start.
    const [{ loadLibrary }, { cublasLibrarySpec }] = await Promise.all([import('../native/find-library.js'), import('../cuda/cublas.js')]);
    loadLibrary(cublasLibrarySpec());
  }
  const defaults = names.includes('cpu') ? PIPELINE_DEFAULTS.cpu : PIPELINE_DEFAULTS.gpu;
  const shape = flags.shape ?? defaults.shape;
  // The GPU shapes' GEMMs and lookups run as host loops on cpu: minutes a step (dlrm: about 3).
  if (names.includes('cpu') && shape !== 'tiny') process.stderr.write(`a2av: note: --shape ${shape} on the cpu backend takes minutes a step (its compute runs as host loops); --shape tiny is the cpu's\n`);
  const { runPipeline } = await import('../pipeline/run.js');
  const results = await eachBackend(names, async (backend, label) => {
    const progress = new PipelineProgress(label);
    try {
      return await runPipeline(
        { backend, ranks, shape, arms: flags.arms, iters: flags.iters ?? defaults.iters, warmup: flags.warmup, // unset: runPipeline's default (withPipelineDefaults)
          seed: flags.seed, trace: flags.trace !== undefined, timeoutMs: flags.timeoutMs, gemm,
          // cuda's budget only: nccl and cpu refuse one.
          inputDistBlocks: backend === 'cuda' ? flags.inputDistBlocks : undefined },
        progress,
      );
    } finally {
      progress.stop();
    }
  });
  // Launched ranks other than 0 have no result: the job prints one table.
  if (results.length === 0) return;
  const { formatPipelineJson, formatPipelineTable, pipelineRows } = await import('../pipeline/table.js');
  process.stdout.write(flags.json ? formatPipelineJson(results) : formatPipelineTable(results));
  if (flags.trace !== undefined) {
    const { chromeTrace, writeChromeTrace } = await import('../pipeline/trace.js');
    const clocks = results.map((r) => `${r.backend}: ${r.clock}`).join('; ');
    writeChromeTrace(flags.trace, chromeTrace(results.flatMap((r) => r.traces ?? []), clocks));
    process.stderr.write(`a2av: trace of ${results.length * flags.arms.length} arm${results.length * flags.arms.length > 1 ? 's' : ''} written to ${flags.trace}\n`);
  }
  const { problems } = pipelineRows(results);
  if (problems.length > 0) {
    process.stderr.write(`a2av: the arms trained to different results: ${problems[0]}\n`);
    process.exitCode = 1;
  }
}

/** Off a terminal, a step line at most this often (slow runs show they move, fast ones stay quiet). */
const STEP_LINE_MS = 10_000;

/** The pipeline's progress on stderr: a bar over every arm's steps on a terminal, else a line per arm (and per slow step). */
class PipelineProgress implements PipelineEvents {
  #bar: ProgressBar | undefined;
  #arms: Arm[] = [];
  #lineAt = Date.now();
  readonly #label: string;

  constructor(label = '') {
    this.#label = label;
  }

  onStart({ device, arms, steps }: { device: string; arms: Arm[]; steps: number }): void {
    this.#arms = arms;
    if (!process.stderr.isTTY) {
      process.stderr.write(`${this.#label}pipeline on ${device}: ${arms.join(', ')}, ${counted(steps, 'step')} each\n`);
      this.#lineAt = Date.now();
      return;
    }
    this.#bar = new ProgressBar({ format: `${this.#label}pipeline on ${device} {bar} {value}/{total} steps | {arm}` });
    this.#bar.start(arms.length * steps, 0, { arm: arms[0] });
  }

  onStep({ arm, step, steps }: { arm: Arm; step: number; steps: number }): void {
    if (this.#bar) this.#bar.update(this.#arms.indexOf(arm) * steps + step + 1, { arm });
    else if (step === 0 || Date.now() - this.#lineAt >= STEP_LINE_MS) {
      process.stderr.write(`${this.#label}pipeline: ${arm}, step ${step + 1} of ${steps}\n`);
      this.#lineAt = Date.now();
    }
  }

  stop(): void {
    this.#bar?.stop();
    this.#bar = undefined;
  }
}
