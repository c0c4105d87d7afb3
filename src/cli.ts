#!/usr/bin/env node
// The `a2av` command: argument parsing and output only; the work is in src/bench and src/launch.
import { readFileSync, writeFileSync } from 'node:fs';
import { resolve } from 'node:path';
import { Writable } from 'node:stream';
import { Command, InvalidArgumentError, Option } from 'commander';
import { SingleBar } from 'cli-progress';
import { MAX_EXPERTS_PER_RANK, type BackendName } from './backends/backend.js';
import { MAX_MAJOR_ALIGN } from './collectives/check.js';
import { backendList, backendsAndRanks, eachBackend, gpuCount } from './cli/backends.js';
import { fail, HelpShown, reportError, stdoutFailed, watchStdout } from './cli/exit.js';
import { integer, listItems, once, seedInteger, size, sizeOrZero } from './cli/options.js';
import { boundName, checkSizeRange, DEFAULT_MAX, DEFAULT_ROW_BYTES, shortOfMax } from './cli/sizes.js';
import { checkKnobs } from './knobs.js';
import { checkWritable } from './output-file.js';
import { BENCH_OPS } from './bench/ops.js';
import type { PlanReport, ProgressReport, RowReport } from './bench/rank.js';
import type { BenchEvents, BenchOptions } from './bench/run.js';
import { SPLITS_KINDS } from './bench/splits.js';
import { counted, formatGBps, formatJson, formatMicros, formatTable, type BenchResult } from './bench/table.js';
import { doublingSizes, formatBytes, holdsWholeUnit, parseSize } from './bench/units.js';
import { rankEnv } from './world/env.js';
import type { LaunchOptions } from './launch/launcher.js';
import type { PipelineEvents } from './pipeline/run.js';
import { SHAPE_NAMES, type ShapeName } from './pipeline/shapes.js';
import { ARMS, type Arm } from './pipeline/train.js';

const DEFAULT_MIN = '512K';
/**
 * tune starts lower than bench: a table covers only the sizes it measured (from half a doubling
 * below its smallest), and calls of 64-256 KiB are where a launch plan's few blocks matter most.
 */
const TUNE_MIN = '64K';
/** The MoE ops' experts per rank unless --experts says: the issue's small MoE step (and a common EP layout). */
const DEFAULT_EXPERTS = 16;
/** bench --op values that time a token MoE group (src/bench/moe-tokens.ts), not a split sweep. */
const MOE_TOKEN_OPS = ['moe-dispatch', 'moe-combine'] as const;
type MoeTokenOp = (typeof MOE_TOKEN_OPS)[number];
/** bench --op values with experts per rank (the 2-D calls). */
const EXPERT_OPS = BENCH_OPS.filter((op) => op !== 'alltoallv');
/** `a2av bench` sub-commands, which --op points to when named as an op. */
const BENCH_SUBCOMMANDS = ['allreduce', 'pipeline'];

/**
 * bench options that only some ops use, and those ops: an op that does not use one refuses it when
 * given, rather than run without it. Unlisted options (--backend, --ranks, --seed, --repeats,
 * --timeout-ms, --json) every op takes.
 */
const OPS_TAKING: Partial<Record<keyof BenchFlags, readonly string[]>> = {
  min: BENCH_OPS, max: BENCH_OPS, splits: BENCH_OPS, rowBytes: BENCH_OPS, iters: BENCH_OPS, plot: BENCH_OPS, maxBlocks: BENCH_OPS,
  experts: EXPERT_OPS, align: EXPERT_OPS, rowsPerExpert: EXPERT_OPS,
  tokens: MOE_TOKEN_OPS, numExperts: MOE_TOKEN_OPS, topk: MOE_TOKEN_OPS, hidden: MOE_TOKEN_OPS, layout: MOE_TOKEN_OPS,
};


/** commander's parse of `a2av bench`: runBench's options, with several backends and optional bounds. */
interface BenchFlags extends Pick<BenchOptions, 'splits' | 'rowBytes' | 'seed' | 'iters' | 'repeats' | 'timeoutMs' | 'align' | 'maxBlocks'> {
  backend?: BackendName[];
  ranks?: number;
  min: number;
  max?: number;
  op: NonNullable<BenchOptions['op']> | MoeTokenOp;
  experts?: number;
  rowsPerExpert?: number;
  json?: boolean;
  plot?: string;
  /** --op moe-dispatch|moe-combine (the token MoE group). */
  tokens?: number[];
  numExperts: number;
  topk: number;
  hidden: number;
  layout: 'expanded' | 'compact';
}

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
  gpu: { shape: 'dlrm', iters: 200, warmup: 20 },
  cpu: { shape: 'tiny', iters: 100, warmup: 20 },
} as const;

interface LaunchFlags {
  nprocPerNode: number;
  nnodes?: number;
  nodeRank?: number;
  masterAddr?: string;
  masterPort?: number;
  outputRanks?: number[];
  prefix: boolean;
}

const version = (JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8')) as { version: string }).version;

const program = new Command('a2av')
  .description('Variable-size all-to-all (all-to-all-v) between GPUs')
  .version(version)
  .enablePositionalOptions()
  .configureOutput({
    // Errors are one line, like every other a2av error.
    outputError: (text, write) => write(`a2av: ${text.replace(/^error: /, '').trim().replace(/\s*\n\s*/g, ' ')}\n`),
  })
  // Help and version end the run without exiting at once: a failed write of them to stdout (a full
  // disk) is reported on the way out and the status is 1. Other early ends exit as commander would.
  .exitOverride((err) => {
    if (err.exitCode === 0) throw new HelpShown(); // help or the version, asked for
    process.exit(err.exitCode);
  });

const benchCommand = program
  .command('bench')
  .enablePositionalOptions() // `bench pipeline --ranks 2`: the options after the sub-command are its own
  .description('Sweep all-to-all-v (or, with --op, the MoE dispatch and combine) over input sizes and compare with a same-run copy ' +
    'of the same bytes (across GPUs: peer copies between them); the MoE ops also with the 1-D call of the same bytes. Every size is ' +
    'checked first; a wrong result ends the run with exit status 1, naming the first wrong byte. ' +
    'Sub-commands: a2av bench allreduce (comm.allReduce), a2av bench pipeline (a training step); --help on each')
  .option('--backend <names>', 'backend, or several to compare in one table: cuda, nccl, cpu, e.g. cuda,nccl (default: cuda when a GPU is visible, else cpu)', backendList)
  .option('--ranks <n>', 'ranks, as threads of this process (default: one per GPU; 2 on cpu; under a2av launch: its processes)', integer(1))
  .addOption(new Option('--min <size>', 'smallest input per rank (512K, 4M, bytes); not the moe-* ops').argParser(size).default(parseSize(DEFAULT_MIN), DEFAULT_MIN))
  .option('--max <size>', 'largest input per rank: sizes double from --min and stop at the last one not past it (as nccl-tests\' -b/-e), ' +
    `or lower to fit memory; a note says where the sweep stops short of it; not the moe-* ops (default: ${DEFAULT_MAX.cuda} on cuda and nccl, ${DEFAULT_MAX.cpu} on cpu)`, size)
  .addOption(new Option('--splits <kind>', 'rows to each peer (--op dispatch, combine, roundtrip: to each (peer, expert) chunk): uniform (an even share), ' +
    'or zipf (exponent 1.1 over a per-sender permutation of them, drawn from --seed); not the moe-* ops').choices(SPLITS_KINDS).default('uniform'))
  .option('--row-bytes <size>', 'bytes per row (64, 4K, bytes); not the moe-* ops', size, DEFAULT_ROW_BYTES)
  .addOption(new Option('--op <op>', 'what is timed: alltoallv (the 1-D call), or the MoE ops: dispatch (allToAllV2d), combine ' +
    '(allToAllV2dOffset, fed by one untimed dispatch), roundtrip (dispatch then combine); the MoE ops show the 1-D call of the same bytes beside them; ' +
    'moe-dispatch, moe-combine: a token MoE group (createMoeGroup) per --tokens count, DeepSeek-V3\'s shape by default. ' +
    'An op refuses the options it does not use (--tokens with alltoallv, --min with moe-dispatch...)')
    .choices([...BENCH_OPS, ...MOE_TOKEN_OPS]).argParser(benchOp).default('alltoallv'))
  .option('--tokens <list>', 'moe-dispatch, moe-combine: tokens per rank, a row each (default 1,128,4096; 1,16,128 on cpu)', countList)
  .option('--num-experts <n>', 'moe-dispatch, moe-combine: experts of the whole job, a multiple of the ranks', integer(1), 256)
  .option('--topk <k>', 'moe-dispatch, moe-combine: experts per token', integer(1), 8)
  .option('--hidden <n>', 'moe-dispatch, moe-combine: bf16 elements per token row', integer(1), 7168)
  .addOption(new Option('--layout <layout>', 'moe-dispatch, moe-combine: the group\'s layout').choices(['expanded', 'compact']).default('expanded'))
  .option('--experts <E>', `--op dispatch, combine, roundtrip: experts per rank; each rank's input is split over W×E (peer, expert) chunks (default ${DEFAULT_EXPERTS})`, integer(1))
  .option('--align <A>', `--op dispatch, combine, roundtrip: the dispatch's majorAlign, rows each expert's block is aligned to, at most ${MAX_MAJOR_ALIGN} (default 1)`, integer(1))
  .option('--rows-per-expert <n>', '--op dispatch, combine, roundtrip: one size instead of --min/--max: W×E×n×row-bytes per rank, n rows per (peer, expert) chunk with uniform splits ' +
    '(the small MoE step: --op dispatch --experts 16 --rows-per-expert 4 --row-bytes 4096; its graph µs is µs per dispatch in a CUDA graph)', integer(1))
  .option('--max-blocks <n>', 'cuda: every call at most this many thread blocks (its maxBlocks, an SM budget that leaves the rest to compute beside it); ' +
    'run once per budget and plot the results together to see bandwidth against SMs used; not the moe-* ops', integer(1))
  .option('--seed <n>', 'seed of the zipf split layouts (uniform splits, having none, refuse it) and of the moe-* ops\' routing', seedInteger, 1)
  .option('--iters <n>', 'calls per timed loop (default: enough for >= 20 ms); not the moe-* ops, which always time loops of >= 20 ms', integer(1))
  .option('--repeats <n>', 'timed loops per size; the median is reported, with the fastest and slowest', integer(1), 5)
  .option('--timeout-ms <ms>', 'bound on every wait between ranks (default 60000)', integer(1))
  .option('--json', 'print only the JSON result to stdout')
  .option('--plot <file.svg>', 'also draw the result as an SVG plot of bandwidth against size (as a2av plot does; not the moe-* ops)')
  // `bench help pipeline`: without it, bench's own action takes `help` as an argument and refuses it.
  .helpCommand(true)
  // `bench --ranks 4 pipeline`: options before a sub-command are bench's own, which the sub-command
  // never reads; it would run with its defaults, as if they had not been given.
  .hook('preSubcommand', (cmd, sub) => {
    const before = cmd.options.filter((o) => cmd.getOptionValueSource(o.attributeName()) === 'cli').map((o) => o.long!);
    if (before.length > 0) {
      fail(`${before.join(', ')} ${before.length > 1 ? 'are' : 'is'} given before '${sub.name()}', where a2av bench ${sub.name()} does not read ` +
        `${before.length > 1 ? 'them' : 'it'}: give its options after its name (a2av bench ${sub.name()} --help lists them)`);
    }
  })
  .action((flags: BenchFlags, cmd: Command) => bench(flags, cmd));

benchCommand
  .command('pipeline')
  .description("A synthetic DLRM-like training step in TorchRec's sparse-data-dist order (input dist of the next batch with device splits, " +
    'embedding lookup, output dist, dense forward and backward, gradient all-to-all, embedding update, gradient all-reduce, SGD), timed per arm: ' +
    'one-lane (every collective on lane 0), two-lanes (the input dist on lane 1), two-lanes-serialized (lane 1, but each collective waits for ' +
    'the one before: the control). Every arm must end with the same loss, tables and weights; a difference ends the run with exit status 1')
  .option('--backend <names>', 'backend, or several: cuda, nccl (host-side splits: TorchRec\'s way), cpu (default: cuda when a GPU is visible, else cpu)', backendList)
  .option('--ranks <n>', 'ranks, as threads of this process (default: one per GPU; 2 on cpu; under a2av launch: its processes)', integer(1))
  .addOption(new Option('--shape <name>', 'tiny; dlrm (26 features, dim 64, 100k rows, batch 8192, dense 512-256-64 over 512-512-256-1); ' +
    'dlrm-128 (dim 128); many-tables (170 features, dim 256, pooling 30, batch 32768) (default: dlrm, or tiny where cpu is one of the backends)').choices(SHAPE_NAMES))
  .addOption(new Option('--arms <list>', 'arms to run, in this order').argParser(armList).default([...ARMS], ARMS.join(',')))
  .option('--iters <n>', 'timed steps per arm: the median and spread are over them (default 200; 100 with cpu)', integer(1))
  .option('--warmup <n>', 'untimed steps before them (default 20)', integer(0))
  .option('--seed <n>', 'seed of the synthetic batches and the initial weights', seedInteger, 1)
  .option('--timeout-ms <ms>', 'bound on every wait between ranks (default 60000)', integer(1))
  .option('--input-dist-blocks <n>', 'at most this many thread blocks for each input-dist all-to-all on cuda: the SM budget of the lane that ' +
    'overlaps the compute (default: the launch plan\'s)', integer(1))
  .addOption(new Option('--gemm <kind>', "cuda and nccl: the dense layers' GEMMs in kernel (the pipeline's own, bit-exact against the cpu backend), " +
    "cublas (cuBLAS's sgemm, checked against the kernel before the steps) or auto (cuBLAS where its library loads) " +
    '(default: auto; kernel where cpu is one of the backends)').choices(['kernel', 'cublas', 'auto']))
  .option('--json', 'print only the JSON result to stdout')
  .option('--trace <file.json>', 'write the timed steps as Chrome trace events (ui.perfetto.dev opens them): per arm and rank, a track for ' +
    'the compute stream, one for the data stream, one per lane')
  .action((flags: PipelineFlags) => benchPipeline(flags));

benchCommand
  .command('allreduce')
  .description('Sweep comm.allReduce over sizes (eager, and on cuda in graphs), every size checked against the host sum first; ' +
    'with several backends one table and each row against NCCL (vs nccl = NCCL time / its time)')
  .option('--backend <names>', 'backend, or several: cuda, nccl, cpu, e.g. cuda,nccl (default: cuda when a GPU is visible, else cpu)', backendList)
  .option('--ranks <n>', 'ranks, as threads of this process (default: one per GPU; 2 on cpu; under a2av launch: its processes)', integer(1))
  .addOption(new Option('--min <size>', 'smallest buffer per rank').argParser(size).default(4096, '4K'))
  .option('--max <size>', 'largest buffer per rank: sizes double from --min and stop at the last one not past it, said in a note ' +
    '(default: 256M on cuda and nccl, 16M on cpu)', size)
  .addOption(new Option('--dtype <dtype>', 'element type').choices(['f32', 'bf16']).default('f32'))
  .option('--iters <n>', 'calls per timed loop (default: enough for >= 20 ms)', integer(1))
  .option('--repeats <n>', 'timed loops per size; the median is reported, with the fastest and slowest', integer(1), 5)
  .option('--timeout-ms <ms>', 'bound on every wait between ranks (default 60000)', integer(1))
  .option('--json', 'print only the JSON result to stdout')
  .action((flags: AllReduceFlags, cmd: Command) => benchAllReduce(flags, cmd));

program
  .command('tune')
  .description("Time the cuda backend's 1-D call under candidate launch plans on this machine (blocks from one to the fair share, " +
    'block sizes, grid mode), size by size, and write the fastest as a plan table: point A2AV_PLAN at it, or add it to plans/ ' +
    'to ship it. Sizes where the built-in heuristic is as fast get no entry')
  .option('--ranks <n>', 'ranks, as threads of this process (default: one per GPU; under a2av launch: its processes)', integer(1))
  .addOption(new Option('--min <size>', 'smallest input per rank (smaller calls keep the heuristic)').argParser(size).default(parseSize(TUNE_MIN), TUNE_MIN))
  .addOption(new Option('--max <size>', 'largest input per rank: sizes double from --min and stop at the last one not past it, said in a note')
    .argParser(size).default(parseSize(DEFAULT_MAX.cuda), DEFAULT_MAX.cuda))
  .option('--row-bytes <size>', 'bytes per row, as --min takes them (16-byte multiples also try grid mode)', size, DEFAULT_ROW_BYTES)
  .option('--lanes <n>', "lanes of the communicator measured (default 2, init()'s): its plans apply to communicators with as many", integer(1))
  .addOption(new Option('--threads <list>', 'block sizes to try').argParser(threadList).default([256, 512, 1024], '256,512,1024'))
  .option('--repeats <n>', 'timed loops per plan and size; the median counts', integer(1), 3)
  .addOption(new Option('--graph-max <size>', 'sizes up to this are timed by replaying a CUDA graph of back-to-back calls, which measures ' +
    'the device (eager times of small calls are set by the host\'s launches); larger sizes are timed eagerly; 0 times every size eagerly').argParser(sizeOrZero).default(4 << 20, '4M'))
  .option('--timeout-ms <ms>', 'bound on every wait between ranks (default 60000)', integer(1))
  .option('-o, --output <file.json>', 'write the table here (default: stdout)')
  .option('--merge <file.json>', "an existing table: its other shapes' entries are kept, this shape's replaced")
  .action((flags: TuneFlags, cmd: Command) => tuneCommand(flags, cmd));

program
  .command('plot')
  .description('Draw bench results (the JSON of a2av bench --json; not of its moe-* ops or of bench allreduce) as an SVG plot: algbw against input bytes per rank, log scales, ' +
    'a line per backend (and op, and file) and the same-run reference dashed, each named at its right end')
  .argument('<results.json...>', 'bench results; several are drawn together, their differences (splits, ranks...) in the line names')
  .requiredOption('-o, --output <file.svg>', 'the SVG file to write')
  .addOption(new Option('--time <which>', 'the measured lines\' times: eager (each call launched from the host), or graph (cuda: the calls replayed from a CUDA graph, at the sizes bench timed so; the references stay eager)').choices(['eager', 'graph']).default('eager'))
  .action((files: string[], flags: { output: string; time: 'eager' | 'graph' }) => plot(files, flags.output, flags.time));

program
  .command('launch')
  .description('Run a command as the ranks of one job, one process per GPU (torchrun-style)')
  .requiredOption('-n, --nproc-per-node <n>', 'ranks on this node', integer(1))
  .option('--nnodes <n>', 'nodes in the job (default 1)', integer(1))
  .option('--node-rank <i>', "this node's index (default 0; node 0 serves the store)", integer(0))
  .option('--master-addr <host>', 'address of the rendezvous store (default 127.0.0.1)')
  .option('--master-port <port>', 'port of the store (default: a free one; needed with --nnodes > 1)', integer(0))
  .option('--output-ranks <list>', 'show only these ranks\' output, e.g. 0 or 0,3 (default: all)', rankList)
  .option('--no-prefix', 'print ranks\' lines without "[rank R] " (with --output-ranks 0: pipe rank 0\'s JSON on)')
  .argument('<command...>', 'program and arguments every rank runs (put -- before it when it has options)')
  .passThroughOptions()
  .action((command: string[], flags: LaunchFlags) => launchCommand(command, flags));

function rankList(text: string): number[] {
  const parts = text.split(',').map((t) => t.trim());
  // Number('') is 0: an empty item would read as rank 0.
  const ranks = parts.map((t) => (/^\d+$/.test(t) ? Number(t) : NaN));
  if (ranks.some((r) => !Number.isSafeInteger(r))) throw new InvalidArgumentError(`not a list of ranks: '${text}' (give rank numbers separated by commas, e.g. 0 or 0,3)`);
  if (new Set(ranks).size !== ranks.length) throw new InvalidArgumentError(`a rank is named twice: '${text}'`);
  return ranks;
}

function armList(text: string): Arm[] {
  const names = listItems(text, 'arms');
  const odd = names.find((n) => !(ARMS as readonly string[]).includes(n));
  if (odd !== undefined) throw new InvalidArgumentError(`unknown arm '${odd}' (choose from ${ARMS.join(', ')})`);
  return once(names, 'arm') as Arm[];
}

/** --op's parser: the choices, and a pointer to the sub-command for an op that is one. */
function benchOp(text: string): BenchFlags['op'] {
  if (BENCH_SUBCOMMANDS.includes(text)) throw new InvalidArgumentError(`${text} is a sub-command: a2av bench ${text} (a2av bench ${text} --help)`);
  const ops: readonly string[] = [...BENCH_OPS, ...MOE_TOKEN_OPS];
  if (!ops.includes(text)) throw new InvalidArgumentError(`Allowed choices are ${ops.join(', ')}; a2av bench ${BENCH_SUBCOMMANDS.join(' and a2av bench ')} are sub-commands.`);
  return text as BenchFlags['op'];
}

/** Refuses the options given on the command line that --op does not use, naming the ops that do. */
function checkOpOptions(flags: BenchFlags, cmd: Command): void {
  const byOps = new Map<string, string[]>();
  for (const option of cmd.options) {
    const ops = OPS_TAKING[option.attributeName() as keyof BenchFlags];
    if (ops === undefined || ops.includes(flags.op) || cmd.getOptionValueSource(option.attributeName()) !== 'cli') continue;
    const key = ops.join(', ').replace(/, ([^,]*)$/, ' or $1');
    byOps.set(key, [...(byOps.get(key) ?? []), option.long!]);
  }
  if (byOps.size === 0) return;
  const parts = [...byOps].map(([ops, names]) => `${names.join(', ')} (${names.length > 1 ? 'options' : 'an option'} of --op ${ops})`);
  fail(`--op ${flags.op} does not take ${parts.join('; ')}`);
}

async function bench(flags: BenchFlags, cmd: Command): Promise<void> {
  checkOpOptions(flags, cmd);
  if (flags.op === 'moe-dispatch' || flags.op === 'moe-combine') return benchMoeTokens(flags, flags.op);
  const moe = flags.op !== 'alltoallv';
  const experts = moe ? flags.experts ?? DEFAULT_EXPERTS : 1;
  if (experts > MAX_EXPERTS_PER_RANK) fail(`--experts ${experts}: at most ${MAX_EXPERTS_PER_RANK} experts per rank`);
  if (flags.align !== undefined && flags.align > MAX_MAJOR_ALIGN) fail(`--align ${flags.align}: the dispatch's majorAlign is at most ${MAX_MAJOR_ALIGN} (2^20) rows`);
  const explicitSizes = ['min', 'max'].filter((name) => cmd.getOptionValueSource(name) === 'cli');
  if (flags.rowsPerExpert !== undefined && explicitSizes.length > 0) fail(`--rows-per-expert sets the size: leave out --${explicitSizes.join(' and --')}`);
  // n rows in every chunk is uniform splits: zipf would spread the same total unevenly, not n a chunk.
  if (flags.rowsPerExpert !== undefined && flags.splits !== 'uniform') fail(`--rows-per-expert gives every (peer, expert) chunk n rows (uniform splits): leave out --splits ${flags.splits}, or give --min/--max`);
  // Uniform splits are the same whatever the seed: run as asked, it would change nothing, and the
  // result (which names no seed for them) could not say it was given.
  if (flags.splits === 'uniform' && cmd.getOptionValueSource('seed') === 'cli') {
    const splits = cmd.getOptionValueSource('splits') === 'cli' ? '--splits uniform' : 'the default --splits uniform';
    fail(`--seed only shapes zipf split layouts; ${splits} has none to shape: give --splits zipf, or leave out --seed`);
  }
  const { names, ranks } = await backendsAndRanks(flags);
  // The budget binds cuda's kernels only: beside another backend the table would compare unlike calls.
  const unbound = names.filter((n) => n !== 'cuda');
  if (flags.maxBlocks !== undefined && unbound.length > 0) fail(`--max-blocks is the cuda backend's SM budget (the calls' maxBlocks); ${unbound.join(' and ')} ${unbound.length > 1 ? 'have' : 'has'} none: run it with --backend cuda`);
  // --rows-per-expert: one size, every (peer, expert) chunk n rows (uniform splits).
  const stepBytes = flags.rowsPerExpert === undefined ? undefined : ranks * experts * flags.rowsPerExpert * flags.rowBytes;
  const minBytes = stepBytes ?? flags.min;
  const maxBytes = stepBytes ?? flags.max ?? Math.min(...names.map((n) => parseSize(DEFAULT_MAX[n])));
  checkSizeRange(cmd, { min: minBytes, max: maxBytes, rowBytes: flags.rowBytes });
  const asked = { bytes: maxBytes, name: boundName(cmd, 'max'), short: shortOfMax(cmd, minBytes, maxBytes, flags.rowBytes, `${formatBytes(flags.rowBytes)} rows`) };
  // Missing plot libraries, or a file that cannot be written, end the run before the sweep, not after it.
  const plotting = flags.plot === undefined ? undefined : await import('./plot/index.js');
  if (flags.plot !== undefined) plotting?.checkOutput(flags.plot);
  await plotting?.loadPlotLibraries();
  const { runBench } = await import('./bench/run.js');
  // A wrong result (WrongResultError, naming the first wrong byte) makes the exit status 1 too.
  const results: BenchResult[] = await eachBackend(names, async (backend, label) => {
    const progress = new Progress(asked, label);
    try {
      return await runBench(
        { backend, ranks, minBytes, maxBytes, splits: flags.splits, rowBytes: flags.rowBytes, seed: flags.seed, maxBlocks: flags.maxBlocks,
          iters: flags.iters, repeats: flags.repeats, timeoutMs: flags.timeoutMs,
          ...(moe ? { op: flags.op as NonNullable<BenchOptions['op']>, experts, align: flags.align ?? 1 } : {}) },
        progress,
      );
    } finally {
      progress.stop();
    }
  });
  // Launched ranks other than 0 have no result: the job prints one table.
  if (results.length === 0) return;
  const { compareBackends } = await import('./bench/compare.js');
  const result = names.length > 1 ? compareBackends(results) : results[0];
  process.stdout.write(flags.json ? formatJson(result) : formatTable(result));
  if (plotting && flags.plot !== undefined) await plotting.writePlot([{ source: 'bench', result }], flags.plot);
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
    const [{ loadLibrary }, { cublasLibrarySpec }] = await Promise.all([import('./native/find-library.js'), import('./cuda/cublas.js')]);
    loadLibrary(cublasLibrarySpec());
  }
  const defaults = names.includes('cpu') ? PIPELINE_DEFAULTS.cpu : PIPELINE_DEFAULTS.gpu;
  const shape = flags.shape ?? defaults.shape;
  // The GPU shapes' GEMMs and lookups run as host loops on cpu: minutes a step (dlrm: about 3).
  if (names.includes('cpu') && shape !== 'tiny') process.stderr.write(`a2av: note: --shape ${shape} on the cpu backend takes minutes a step (its compute runs as host loops); --shape tiny is the cpu's\n`);
  const { runPipeline } = await import('./pipeline/run.js');
  const results = await eachBackend(names, async (backend, label) => {
    const progress = new PipelineProgress(label);
    try {
      return await runPipeline(
        { backend, ranks, shape, arms: flags.arms, iters: flags.iters ?? defaults.iters, warmup: flags.warmup ?? defaults.warmup,
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
  const { formatPipelineJson, formatPipelineTable, pipelineRows } = await import('./pipeline/table.js');
  process.stdout.write(flags.json ? formatPipelineJson(results) : formatPipelineTable(results));
  if (flags.trace !== undefined) {
    const { chromeTrace, writeChromeTrace } = await import('./pipeline/trace.js');
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

function countList(text: string): number[] {
  const items = listItems(text, 'token counts');
  // Digits only: Number() would also read 0x10, 1e3 and 2.0.
  const bad = items.find((t) => !/^\d+$/.test(t) || !Number.isSafeInteger(Number(t)) || Number(t) < 1);
  if (bad !== undefined) throw new InvalidArgumentError(`token counts are whole numbers >= 1, got '${bad}'`);
  return once(items.map(Number), 'token count').sort((a, b) => a - b);
}

async function benchMoeTokens(flags: BenchFlags, op: MoeTokenOp): Promise<void> {
  const { names, ranks } = await backendsAndRanks(flags);
  // As the ranks would refuse them, before they start (moe-tokens.ts checks the same).
  if (flags.numExperts % ranks !== 0) fail(`--num-experts ${flags.numExperts} is not a multiple of the ${ranks} ranks`);
  const perRank = flags.numExperts / ranks;
  if (perRank > MAX_EXPERTS_PER_RANK) {
    fail(`--num-experts ${flags.numExperts} over ${ranks} ranks is ${perRank} experts a rank, more than the ${MAX_EXPERTS_PER_RANK} a rank ` +
      'the MoE calls take (MAX_EXPERTS_PER_RANK): lower --num-experts, or raise --ranks');
  }
  if (flags.topk > flags.numExperts) fail(`--topk ${flags.topk} is more than the ${flags.numExperts} experts`);
  const tokens = flags.tokens ?? (names.includes('cpu') ? [1, 16, 128] : [1, 128, 4096]);
  const { formatMoeTokenTable, runMoeTokenBench } = await import('./bench/moe-tokens.js');
  const results = await eachBackend(names, (backend, label) =>
    runMoeTokenBench(
      { backend, ranks, op, tokens, numExperts: flags.numExperts, topk: flags.topk, hidden: flags.hidden, layout: flags.layout, seed: flags.seed, repeats: flags.repeats, timeoutMs: flags.timeoutMs },
      (r) => process.stderr.write(`${label}[${r.index + 1}/${r.count}] ${counted(r.row.tokens, 'token')}: ${formatMicros(r.row.timeUs)} µs, ${formatGBps(r.row.GBps)} GB/s, 1-D ${formatMicros(r.row.oneDUs)} µs, checked\n`),
    ),
  );
  if (results.length === 0) return;
  process.stdout.write(flags.json ? JSON.stringify(results.length === 1 ? results[0] : results, null, 2) + '\n' : formatMoeTokenTable(results));
}

interface AllReduceFlags {
  backend?: BackendName[];
  ranks?: number;
  min: number;
  max?: number;
  dtype: 'f32' | 'bf16';
  iters?: number;
  repeats: number;
  timeoutMs?: number;
  json?: boolean;
}

async function benchAllReduce(flags: AllReduceFlags, cmd: Command): Promise<void> {
  const { names, ranks } = await backendsAndRanks(flags);
  // Refused before the ranks start (each would refuse it, after 65 threads had started).
  const { ALL_REDUCE_MAX_RANKS, formatAllReduceTable, runAllReduceBench } = await import('./bench/all-reduce.js');
  if (ranks > ALL_REDUCE_MAX_RANKS) fail(`bench allreduce: at most ${ALL_REDUCE_MAX_RANKS} ranks (the check's sums stay exact), got ${ranks}`);
  const max = flags.max ?? (names.includes('cpu') ? 16 << 20 : 256 << 20);
  checkSizeRange(cmd, { min: flags.min, max });
  const element = flags.dtype === 'f32' ? 4 : 2;
  if (flags.min < element) fail(`--min ${formatBytes(flags.min)} is smaller than one ${flags.dtype} element`);
  if (!holdsWholeUnit(flags.min, max, element)) fail(`no whole number of ${flags.dtype} elements lies between --min ${formatBytes(flags.min)} and --max ${formatBytes(max)}`);
  // Whole elements, each rounded up: no size below --min.
  const sizes = doublingSizes(flags.min, max, element);
  const short = shortOfMax(cmd, flags.min, max, element, `${flags.dtype} elements`);
  if (short) process.stderr.write(`a2av: note: ${short}\n`);
  const results = await eachBackend(names, (backend, label) =>
    runAllReduceBench({ backend, ranks, sizes, dtype: flags.dtype, repeats: flags.repeats, iters: flags.iters, timeoutMs: flags.timeoutMs }, (r) => {
      process.stderr.write(`${label}[${r.index + 1}/${r.count}] ${formatBytes(r.row.bytes)}: ${formatMicros(r.row.timeUs)} µs` +
        `${r.row.graphUs === undefined ? '' : `, graph ${formatMicros(r.row.graphUs)} µs`}, busbw ${formatGBps(r.row.busbwGBps)} GB/s, checked\n`);
    }),
  );
  if (results.length === 0) return;
  process.stdout.write(flags.json ? JSON.stringify(results.length === 1 ? results[0] : results, null, 2) + '\n' : formatAllReduceTable(results));
}

interface TuneFlags {
  ranks?: number;
  lanes?: number;
  min: number;
  max: number;
  rowBytes: number;
  threads: number[];
  repeats: number;
  graphMax: number;
  timeoutMs?: number;
  output?: string;
  merge?: string;
}

function threadList(text: string): number[] {
  const items = listItems(text, 'block sizes');
  const bad = items.find((t) => !/^\d+$/.test(t) || Number(t) < 32 || Number(t) > 1024 || Number(t) % 32 !== 0);
  if (bad !== undefined) throw new InvalidArgumentError(`block sizes are multiples of 32 in [32, 1024], got ${bad}`);
  return once(items.map(Number), 'block size');
}

async function tuneCommand(flags: TuneFlags, cmd: Command): Promise<void> {
  checkKnobs();
  checkSizeRange(cmd, { min: flags.min, max: flags.max, rowBytes: flags.rowBytes });
  const { formatTune, mergeTables, requireTuneGpu, runTune } = await import('./tune/run.js');
  // Before counting GPUs for the ranks: none is the one-line answer.
  requireTuneGpu();
  const ranks = flags.ranks ?? rankEnv()?.worldSize ?? (await gpuCount('cuda'));
  const { readTable } = await import('./tune/table.js');
  // A bad file to merge into ends the run before the sweep, not after it.
  const into = flags.merge === undefined ? undefined : readTable(flags.merge);
  const sizes = doublingSizes(flags.min, flags.max, flags.rowBytes);
  const short = shortOfMax(cmd, flags.min, flags.max, flags.rowBytes, `${formatBytes(flags.rowBytes)} rows`);
  if (short) process.stderr.write(`a2av: note: ${short}\n`);
  let bar: SingleBar | undefined;
  const out = await runTune(
    { ranks, lanes: flags.lanes, sizes, rowBytes: flags.rowBytes, repeats: flags.repeats, threads: flags.threads, graphMaxBytes: flags.graphMax, timeoutMs: flags.timeoutMs, command: `a2av ${process.argv.slice(2).join(' ')}` },
    (r) => {
      if (r.type === 'start') {
        process.stderr.write(`a2av tune: ${r.device}, W=${r.shape.world}, ${counted(r.shape.ranksPerGpu, 'rank')} per GPU, blocks shared by ${counted(r.shape.lanes, 'lane')}, ${counted(r.sizes.length, 'size')}\n`);
        if (process.stderr.isTTY) {
          bar = new SingleBar({ stream: process.stderr, format: 'tune {bar} {value}/{total} sizes | {last}', hideCursor: true, clearOnComplete: true });
          bar.start(r.sizes.length, 0, { last: '' });
        }
      } else {
        const last = `${formatBytes(r.size.bytes)}: ${r.size.plan.blocks}x${r.size.plan.threads}${r.size.plan.grid ? ' grid' : ''} ${r.size.us.toFixed(2)} µs ${r.size.timing} (heuristic ${r.size.defaultUs.toFixed(2)}, ${counted(r.candidates, 'plan')})`;
        if (bar) bar.update(r.index + 1, { last });
        else process.stderr.write(`${last}\n`);
      }
    },
  ).finally(() => bar?.stop());
  if (out === undefined) return; // launched ranks other than 0
  const table = into ? mergeTables(into, out.table, out.result.shape) : out.table;
  const json = JSON.stringify(table, null, 2) + '\n';
  if (flags.output === undefined) process.stdout.write(json);
  else writeFileSync(flags.output, json);
  process.stderr.write(formatTune(out.result));
}

async function plot(files: string[], output: string, timing: 'eager' | 'graph'): Promise<void> {
  const { checkOutput, readResultFile, writePlot } = await import('./plot/index.js');
  checkOutput(output);
  const twice = files.find((f, i) => files.findIndex((g) => resolve(g) === resolve(f)) !== i);
  if (twice !== undefined) fail(`${twice} is given twice: its lines would be drawn on each other`);
  await writePlot(files.map(readResultFile), output, timing);
}

/** The --max a sweep was asked for: its bytes, its name (--max, or the default --max), and shortOfMax's note. */
interface AskedMax {
  bytes: number;
  name: string;
  short?: string;
}

/** The sweep's progress on stderr: a bar on a terminal, else one line per size (logs, CI). */
class Progress implements BenchEvents {
  #bar: SingleBar | undefined;
  readonly #max: AskedMax;
  /** Names the backend when one run compares several. */
  readonly #label: string;

  constructor(max: AskedMax, label = '') {
    this.#max = max;
    this.#label = label;
  }

  onPlan({ sizes, dropped }: PlanReport): void {
    // Memory's limit, else the ladder's: one note saying what was asked and what will run.
    const { bytes, name, short } = this.#max;
    const note = dropped ? `lowered ${name} from ${formatBytes(bytes)} to ${formatBytes(sizes.at(-1)!)}: ${dropped}` : short;
    if (note) process.stderr.write(`a2av: note: ${this.#label}${note}\n`);
    if (!process.stderr.isTTY) {
      // Off a terminal the first line would otherwise come when the first size is done: 20 s at 2 GiB on cpu.
      const range = sizes.length > 1 ? `, ${formatBytes(sizes[0])} to ${formatBytes(sizes.at(-1)!)}` : `: ${formatBytes(sizes[0])}`;
      process.stderr.write(`${this.#label}bench: ${counted(sizes.length, 'size')}${range}, each checked then timed\n`);
      return;
    }
    this.#bar = new SingleBar({
      stream: process.stderr,
      format: `${this.#label}bench {bar} {value}/{total} sizes | {size} {stage} | {last}`,
      hideCursor: true,
      clearOnComplete: true,
    });
    this.#bar.start(sizes.length, 0, { size: formatBytes(sizes[0]), stage: 'verify', last: '' });
  }

  onProgress({ bytes, stage }: ProgressReport): void {
    this.#bar?.update({ size: formatBytes(bytes), stage });
  }

  onRow({ row, index, count }: RowReport): void {
    const line = `${this.#label}${formatBytes(row.bytes)}: ${formatMicros(row.timeUs)} µs ` +
      `(${formatMicros(row.timeMinUs)}-${formatMicros(row.timeMaxUs)}), ` +
      (Number.isFinite(row.graphUs) ? `graph ${formatMicros(row.graphUs)} µs, ` : '') +
      `${formatGBps(row.algbwGBps)} GB/s` +
      (row.ref === 'none' ? '' : `, ${row.refRatio.toFixed(2)}× the ${row.ref}`) +
      (row.hostSyncUs === undefined ? '' : `, host sync ${formatMicros(row.hostSyncUs)} µs`) +
      (row.vsOneD === undefined ? '' : `, ${row.vsOneD.toFixed(2)}× the 1-D call`) +
      `, checked ${row.checked.join('+')}`;
    if (this.#bar) this.#bar.increment({ last: line });
    else process.stderr.write(`[${index + 1}/${count}] ${line}\n`);
  }

  stop(): void {
    this.#bar?.stop();
    this.#bar = undefined;
  }
}

/** Off a terminal, a step line at most this often (slow runs show they move, fast ones stay quiet). */
const STEP_LINE_MS = 10_000;

/** The pipeline's progress on stderr: a bar over every arm's steps on a terminal, else a line per arm (and per slow step). */
class PipelineProgress implements PipelineEvents {
  #bar: SingleBar | undefined;
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
    this.#bar = new SingleBar({
      stream: process.stderr,
      format: `${this.#label}pipeline on ${device} {bar} {value}/{total} steps | {arm}`,
      hideCursor: true,
      clearOnComplete: true,
    });
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

/**
 * process.stdout for the ranks' lines, dropping them once stdout has failed: piped straight into a
 * failed stdout, a rank's line stream stops flowing, never ends, and the launcher waits on it forever.
 * The ranks run on to their end; the exit status says output was lost.
 */
function rankLinesOut(): Writable {
  return new Writable({
    write(chunk: Buffer, _encoding, callback) {
      if (stdoutFailed()) return callback();
      // Its error is stdout's 'error' too, said there: this stream must not fail with it.
      process.stdout.write(chunk, () => callback());
    },
  });
}

async function launchCommand(command: string[], flags: LaunchFlags): Promise<void> {
  // The ranks inherit the environment: a bad switch would fail every one of them.
  checkKnobs();
  const { launch } = await import('./launch/launcher.js');
  const options: LaunchOptions = {
    nprocs: flags.nprocPerNode,
    nnodes: flags.nnodes,
    nodeRank: flags.nodeRank,
    masterAddr: flags.masterAddr,
    masterPort: flags.masterPort,
    command,
    outputRanks: flags.outputRanks,
    prefix: flags.prefix,
    namesInErrors: 'flags',
    stdout: rankLinesOut(),
  };
  process.exitCode = await launch(options);
}

watchStdout();
try {
  await program.parseAsync();
} catch (err) {
  reportError(err);
}
