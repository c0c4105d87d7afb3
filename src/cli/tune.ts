// `a2av tune`: times the cuda backend's launch plans size by size (src/tune) and writes the fastest as a plan table.
import { writeFileSync } from 'node:fs';
import { InvalidArgumentError, Option, type Command } from 'commander';
import { counted } from '../bench/table.js';
import { doublingSizes, formatBytes, formatBytesExact, parseSize } from '../bench/units.js';
import { checkKnobs } from '../knobs.js';
import { rankEnv } from '../world/env.js';
import { gpuCount } from './backends.js';
import { integer, listItems, once, repeatsInteger, size, sizeOrZero, TIMEOUT_HELP, timeoutMs } from './options.js';
import { ProgressBar } from './progress-bar.js';
import { checkSizeRange, DEFAULT_MAX, DEFAULT_ROW_BYTES, sweepNote } from './sizes.js';

/**
 * tune starts lower than bench: a table covers only the sizes it measured (from half a doubling
 * below its smallest), and calls of 64-256 KiB are where a launch plan's few blocks matter most.
 */
const TUNE_MIN = '64K';

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

/** Adds `a2av tune`. */
export function addTune(program: Command): void {
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
    .option('--repeats <n>', 'timed loops per plan and size; the median counts', repeatsInteger, 3)
    .addOption(new Option('--graph-max <size>', 'sizes up to this are timed by replaying a CUDA graph of back-to-back calls, which measures ' +
      'the device (eager times of small calls are set by the host\'s launches); larger sizes are timed eagerly; 0 times every size eagerly').argParser(sizeOrZero).default(4 << 20, '4M'))
    .option('--timeout-ms <ms>', TIMEOUT_HELP, timeoutMs)
    .option('-o, --output <file.json>', 'write the table here (default: stdout)')
    .option('--merge <file.json>', "an existing table: its other shapes' entries are kept, this shape's replaced")
    .action((flags: TuneFlags, cmd: Command) => tuneCommand(flags, cmd));
}

/** --threads's parser: block sizes to try. */
function threadList(text: string): number[] {
  const items = listItems(text, 'block sizes');
  const bad = items.find((t) => !/^\d+$/.test(t) || Number(t) < 32 || Number(t) > 1024 || Number(t) % 32 !== 0);
  if (bad !== undefined) throw new InvalidArgumentError(`block sizes are multiples of 32 in [32, 1024], got ${bad}`);
  return once(items.map(Number), 'block size');
}

async function tuneCommand(flags: TuneFlags, cmd: Command): Promise<void> {
  checkKnobs();
  checkSizeRange(cmd, { min: flags.min, max: flags.max, rowBytes: flags.rowBytes });
  const { formatTune, mergeTables, requireTuneGpu, runTune } = await import('../tune/run.js');
  // Before counting GPUs for the ranks: none is the one-line answer.
  requireTuneGpu();
  const ranks = flags.ranks ?? rankEnv()?.worldSize ?? (await gpuCount('cuda'));
  const { readTable } = await import('../tune/table.js');
  // A bad file to merge into ends the run before the sweep, not after it.
  const into = flags.merge === undefined ? undefined : readTable(flags.merge);
  const sizes = doublingSizes(flags.min, flags.max, flags.rowBytes);
  const short = sweepNote(cmd, flags.min, flags.max, flags.rowBytes, `${formatBytesExact(flags.rowBytes)} rows`);
  if (short) process.stderr.write(`a2av: note: ${short}\n`);
  let bar: ProgressBar | undefined;
  const out = await runTune(
    { ranks, lanes: flags.lanes, sizes, rowBytes: flags.rowBytes, repeats: flags.repeats, threads: flags.threads, graphMaxBytes: flags.graphMax, timeoutMs: flags.timeoutMs, command: `a2av ${process.argv.slice(2).join(' ')}` },
    (r) => {
      if (r.type === 'start') {
        process.stderr.write(`a2av tune: ${r.device}, W=${r.shape.world}, ${counted(r.shape.ranksPerGpu, 'rank')} per GPU, blocks shared by ${counted(r.shape.lanes, 'lane')}, ${counted(r.sizes.length, 'size')}\n`);
        if (process.stderr.isTTY) {
          bar = new ProgressBar({ format: 'tune {bar} {value}/{total} sizes | {last}' });
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
