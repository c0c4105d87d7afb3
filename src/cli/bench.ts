// `a2av bench`: sweeps all-to-all-v (or, with --op, the MoE calls) over sizes (src/bench), with its
// progress on stderr; its sub-commands (pipeline, allreduce) and the moe-* ops are in their own files.
import { InvalidArgumentError, Option, type Command } from 'commander';
import { MAX_EXPERTS_PER_RANK, type BackendName } from '../backends/backend.js';
import { MAX_MAJOR_ALIGN } from '../collectives/check.js';
import { BENCH_OPS } from '../bench/ops.js';
import type { PlanReport, ProgressReport, RowReport } from '../bench/rank.js';
import type { BenchEvents, BenchOptions } from '../bench/run.js';
import { SPLITS_KINDS } from '../bench/splits.js';
import { formatGBps, formatJson, formatMicros, formatRatio, formatTable, type BenchResult } from '../bench/table.js';
import { formatBytes, formatBytesExact, parseSize } from '../bench/units.js';
import { backendList, backendsAndRanks, eachBackend } from './backends.js';
import { benchMoeTokens, countList, MOE_TOKEN_OPS, type MoeTokenFlags, type MoeTokenOp } from './bench-moe-tokens.js';
import { fail } from './exit.js';
import { integer, RANKS_HELP, repeatsInteger, seedInteger, size, TIMEOUT_HELP, timeoutMs } from './options.js';
import { PartialResults, sizeRange, SweepProgress } from './sweep-progress.js';
import { boundName, checkSizeRange, DEFAULT_MAX, DEFAULT_ROW_BYTES, sweepNote } from './sizes.js';

const DEFAULT_MIN = '512K';
/** The MoE ops' experts per rank unless --experts says: the issue's small MoE step (and a common EP layout). */
const DEFAULT_EXPERTS = 16;
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

/** commander's parse of `a2av bench`: runBench's options, with several backends and optional bounds, and the token MoE group's (--op moe-*). */
interface BenchFlags extends Pick<BenchOptions, 'splits' | 'rowBytes' | 'seed' | 'iters' | 'repeats' | 'timeoutMs' | 'align' | 'maxBlocks'>,
  Pick<MoeTokenFlags, 'tokens' | 'numExperts' | 'topk' | 'hidden' | 'layout'> {
  backend?: BackendName[];
  ranks?: number;
  min: number;
  max?: number;
  op: NonNullable<BenchOptions['op']> | MoeTokenOp;
  experts?: number;
  rowsPerExpert?: number;
  json?: boolean;
  plot?: string;
}

/** Adds `a2av bench`; returns it, for its sub-commands. */
export function addBench(program: Command): Command {
  return program
    .command('bench')
    .enablePositionalOptions() // `bench pipeline --ranks 2`: the options after the sub-command are its own
    .description('Sweep all-to-all-v (or, with --op, the MoE dispatch and combine) over input sizes and compare with a same-run copy ' +
      'of the same bytes (across GPUs: peer copies between them); the MoE ops also with the 1-D call of the same bytes. Every size is ' +
      'checked first; a wrong result ends the run with exit status 1, naming the first wrong byte. ' +
      'Sub-commands: a2av bench allreduce (comm.allReduce), a2av bench pipeline (a training step); --help on each')
    .option('--backend <names>', 'backend, or several to compare in one table: cuda, nccl, cpu, e.g. cuda,nccl (default: cuda when a GPU is visible, else cpu)', backendList)
    .option('--ranks <n>', RANKS_HELP, integer(1))
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
    .option('--experts <E>', `--op dispatch, combine, roundtrip: experts per rank, at most ${MAX_EXPERTS_PER_RANK}; each rank's input is split over W×E (peer, expert) chunks (default ${DEFAULT_EXPERTS})`, integer(1, MAX_EXPERTS_PER_RANK, ' (MAX_EXPERTS_PER_RANK)'))
    .option('--align <A>', `--op dispatch, combine, roundtrip: the dispatch's majorAlign, rows each expert's block is aligned to, at most ${MAX_MAJOR_ALIGN} (default 1)`, integer(1))
    .option('--rows-per-expert <n>', '--op dispatch, combine, roundtrip: one size instead of --min/--max: W×E×n×row-bytes per rank, n rows per (peer, expert) chunk with uniform splits ' +
      '(the small MoE step: --op dispatch --experts 16 --rows-per-expert 4 --row-bytes 4096; its graph µs is µs per dispatch in a CUDA graph)', integer(1))
    .option('--max-blocks <n>', 'cuda: every call at most this many thread blocks (its maxBlocks, an SM budget that leaves the rest to compute beside it); ' +
      'run once per budget and plot the results together to see bandwidth against SMs used; not the moe-* ops', integer(1))
    .option('--seed <n>', 'seed of the zipf split layouts (uniform splits, having none, refuse it) and of the moe-* ops\' routing', seedInteger, 1)
    .option('--iters <n>', 'calls per timed loop (default: enough for >= 20 ms); not the moe-* ops, which always time loops of >= 20 ms', integer(1))
    .option('--repeats <n>', 'timed loops per size; the median is reported, with the fastest and slowest', repeatsInteger, 5)
    .option('--timeout-ms <ms>', TIMEOUT_HELP, timeoutMs)
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
    // A word after `bench` can only be a sub-command: a misspelt one is named as such, not counted
    // as an argument too many.
    .allowExcessArguments(true)
    .action((flags: BenchFlags, cmd: Command) => {
      if (cmd.args.length > 0) cmd.error(`unknown sub-command '${cmd.args[0]}' of a2av bench${closest(cmd.args[0]!, BENCH_SUBCOMMANDS)}: its sub-commands are ${BENCH_SUBCOMMANDS.join(' and ')}`);
      return bench(flags, cmd);
    });
}

/** " (did you mean x?)" for the choice within two edits of `word`, else "". */
function closest(word: string, choices: readonly string[]): string {
  const edits = (a: string, b: string): number => {
    let row = Array.from({ length: b.length + 1 }, (_, j) => j);
    for (let i = 1; i <= a.length; i++) {
      const next = [i];
      for (let j = 1; j <= b.length; j++) next[j] = Math.min(row[j]! + 1, next[j - 1]! + 1, row[j - 1]! + (a[i - 1] === b[j - 1] ? 0 : 1));
      row = next;
    }
    return row[b.length]!;
  };
  const best = choices.map((c) => ({ c, d: edits(word.toLowerCase(), c) })).sort((x, y) => x.d - y.d)[0];
  return best !== undefined && best.d <= 2 ? ` (did you mean ${best.c}?)` : '';
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
  const asked = { bytes: maxBytes, name: boundName(cmd, 'max'), short: sweepNote(cmd, minBytes, maxBytes, flags.rowBytes, `${formatBytesExact(flags.rowBytes)} rows`) };
  // Missing plot libraries, or a file that cannot be written, end the run before the sweep, not after it.
  const plotting = flags.plot === undefined ? undefined : await import('../plot/index.js');
  if (flags.plot !== undefined) plotting?.checkOutput(flags.plot);
  await plotting?.loadPlotLibraries();
  const { runBench } = await import('../bench/run.js');
  // A wrong result (WrongResultError, naming the first wrong byte) makes the exit status 1 too.
  // A signal mid-sweep: the sizes finished so far as the table (or JSON) the run would have ended
  // with, for each backend run or under way, then the end by that signal.
  const partial = new PartialResults<BenchResult>('size', 0, (results) => {
    for (const r of results) process.stdout.write(flags.json ? formatJson(r) : formatTable(r));
  });
  const results: BenchResult[] = await eachBackend(names, async (backend, label) => {
    const progress = new Progress(asked, label, partial);
    try {
      return await runBench(
        { backend, ranks, minBytes, maxBytes, splits: flags.splits, rowBytes: flags.rowBytes, seed: flags.seed, maxBlocks: flags.maxBlocks,
          iters: flags.iters, repeats: flags.repeats, timeoutMs: flags.timeoutMs,
          ...(moe ? { op: flags.op as NonNullable<BenchOptions['op']>, experts, align: flags.align ?? 1 } : {}) },
        progress,
      ).then((r) => partial.done(r && progress.withNote(r)));
    } finally {
      progress.stop();
    }
  });
  // Launched ranks other than 0 have no result: the job prints one table.
  if (results.length === 0) return;
  const { compareBackends } = await import('../bench/compare.js');
  const result = names.length > 1 ? compareBackends(results) : results[0];
  process.stdout.write(flags.json ? formatJson(result) : formatTable(result));
  if (plotting && flags.plot !== undefined) {
    await plotting.writePlot([{ source: 'bench', result }], flags.plot);
    process.stderr.write(`a2av: plot written to ${flags.plot}\n`);
  }
}

/** The --max a sweep was asked for: its bytes, its name (--max, or the default --max), and sweepNote's note. */
interface AskedMax {
  bytes: number;
  name: string;
  short?: string;
}

/** The sweep's progress on stderr (sweep-progress.ts), with memory's or the ladder's note first. */
class Progress implements BenchEvents {
  readonly #sweep: SweepProgress;
  readonly #max: AskedMax;
  /** Names the backend when one run compares several. */
  readonly #label: string;
  /** What a signal lets the run show: this backend's result as far as it got. */
  readonly #partial: PartialResults<BenchResult>;
  #head: BenchResult | undefined;
  /** The note of the sizes that run, when there is one: said on stderr, kept in the result. */
  note: string | undefined;

  constructor(max: AskedMax, label: string, partial: PartialResults<BenchResult>) {
    this.#max = max;
    this.#label = label;
    this.#partial = partial;
    this.#sweep = new SweepProgress('bench', label, 'size', partial.interrupted);
  }

  onHead(head: BenchResult): void {
    this.#head = this.withNote(head);
  }

  /** `result` with this sweep's note among its notes. */
  withNote(result: BenchResult): BenchResult {
    return this.note === undefined ? result : { ...result, notes: [...(result.notes ?? []), this.note] };
  }

  onPlan({ sizes, dropped }: PlanReport): void {
    // Memory's limit, else the ladder's: one note saying what was asked and what will run.
    const { bytes, name, short } = this.#max;
    const note = dropped ? `lowered ${name} from ${formatBytes(bytes)} to ${formatBytes(sizes.at(-1)!)}: ${dropped}` : short;
    if (note) {
      this.note = `${this.#label}${note}`;
      process.stderr.write(`a2av: note: ${this.note}\n`);
    }
    this.#partial.items = sizes.length;
    this.#sweep.start(sizes.map(formatBytes), `${sizeRange(sizes)}, each checked then timed`);
    this.#sweep.show(formatBytes(sizes[0]), 'verify');
  }

  onProgress({ bytes, stage }: ProgressReport): void {
    this.#sweep.show(formatBytes(bytes), stage);
  }

  onRow({ row, index }: RowReport): void {
    const line = `${formatBytesExact(row.bytes)}: ${formatMicros(row.timeUs)} µs ` +
      `(${formatMicros(row.timeMinUs)}-${formatMicros(row.timeMaxUs)}), ` +
      (Number.isFinite(row.graphUs) ? `graph ${formatMicros(row.graphUs)} µs, ` : '') +
      `${formatGBps(row.algbwGBps)} GB/s` +
      (row.ref === 'none' ? '' : `, ${formatRatio(row.refRatio)}× the ${row.ref}`) +
      (row.hostSyncUs === undefined ? '' : `, host sync ${formatMicros(row.hostSyncUs)} µs`) +
      (row.vsOneD === undefined ? '' : `, ${formatRatio(row.vsOneD)}× the 1-D call`) +
      `, checked ${row.checked.join('+')}`;
    this.#partial.current = { ...this.#head!, rows: [...(this.#partial.current?.rows ?? []), row] };
    this.#sweep.finished(index, line);
  }

  stop(): void {
    this.#sweep.stop();
  }
}
