#!/usr/bin/env node
// The `a2av` command: argument parsing and output only; the work is in src/bench and src/launch.
import { readFileSync, writeFileSync } from 'node:fs';
import { resolve } from 'node:path';
import { Writable } from 'node:stream';
import { Command, InvalidArgumentError, Option } from 'commander';
import { SingleBar } from 'cli-progress';
import { addBench } from './cli/bench.js';
import { addBenchAllReduce } from './cli/bench-all-reduce.js';
import { addBenchPipeline } from './cli/bench-pipeline.js';
import { gpuCount } from './cli/backends.js';
import { fail, HelpShown, reportError, stdoutFailed, watchStdout } from './cli/exit.js';
import { integer, listItems, once, size, sizeOrZero } from './cli/options.js';
import { checkSizeRange, DEFAULT_MAX, DEFAULT_ROW_BYTES, shortOfMax } from './cli/sizes.js';
import { checkKnobs } from './knobs.js';
import { counted } from './bench/table.js';
import { doublingSizes, formatBytes, parseSize } from './bench/units.js';
import { rankEnv } from './world/env.js';
import type { LaunchOptions } from './launch/launcher.js';

/**
 * tune starts lower than bench: a table covers only the sizes it measured (from half a doubling
 * below its smallest), and calls of 64-256 KiB are where a launch plan's few blocks matter most.
 */
const TUNE_MIN = '64K';

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

// Sub-commands take the program's output and exit settings when added: they come after them.
const bench = addBench(program);
addBenchPipeline(bench);
addBenchAllReduce(bench);

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
