// `a2av bench allreduce`: comm.allReduce swept over sizes, each checked against the host sum first.
import type { AllReduceBenchResult } from '../bench/all-reduce.js';
import { Option, type Command } from 'commander';
import type { BackendName } from '../backends/backend.js';
import { formatGBps, formatMicros } from '../bench/table.js';
import { doublingSizes, formatBytes, formatBytesExact, holdsWholeUnit } from '../bench/units.js';
import { backendList, backendsAndRanks, eachBackend } from './backends.js';
import { fail } from './exit.js';
import { integer, RANKS_HELP, repeatsInteger, size, TIMEOUT_HELP, timeoutMs } from './options.js';
import { checkSizeRange, sweepNote } from './sizes.js';
import { PartialResults, sizeRange, SweepProgress } from './sweep-progress.js';

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

/** Adds `allreduce` to `a2av bench`. */
export function addBenchAllReduce(bench: Command): void {
  bench
    .command('allreduce')
    // bench's own leniency (its words are sub-commands) is inherited: a stray word here is a typo, not a sub-command.
    .allowExcessArguments(false)
    .description('Sweep comm.allReduce over sizes (eager, and on cuda in graphs), every size checked against the host sum first; ' +
      'with several backends one table and each row against NCCL (vs nccl = NCCL time / its time)')
    .option('--backend <names>', 'backend, or several: cuda, nccl, cpu, e.g. cuda,nccl (default: cuda when a GPU is visible, else cpu)', backendList)
    .option('--ranks <n>', RANKS_HELP, integer(1))
    .addOption(new Option('--min <size>', 'smallest buffer per rank').argParser(size).default(4096, '4K'))
    .option('--max <size>', 'largest buffer per rank: sizes double from --min and stop at the last one not past it, said in a note ' +
      '(default: 256M on cuda and nccl, 16M on cpu)', size)
    .addOption(new Option('--dtype <dtype>', 'element type').choices(['f32', 'bf16']).default('f32'))
    .option('--iters <n>', 'calls per timed loop (default: enough for >= 20 ms)', integer(1))
    .option('--repeats <n>', 'timed loops per size; the median is reported, with the fastest and slowest', repeatsInteger, 5)
    .option('--timeout-ms <ms>', TIMEOUT_HELP, timeoutMs)
    .option('--json', 'print only the JSON result to stdout')
    .action((flags: AllReduceFlags, cmd: Command) => benchAllReduce(flags, cmd));
}

async function benchAllReduce(flags: AllReduceFlags, cmd: Command): Promise<void> {
  const { names, ranks } = await backendsAndRanks(flags);
  // Refused before the ranks start (each would refuse it, after 65 threads had started).
  const { ALL_REDUCE_MAX_RANKS, formatAllReduceTable, refuseCpuAllReduceSize, runAllReduceBench } = await import('../bench/all-reduce.js');
  if (ranks > ALL_REDUCE_MAX_RANKS) fail(`bench allreduce: at most ${ALL_REDUCE_MAX_RANKS} ranks (the check's sums stay exact), got ${ranks}`);
  const max = flags.max ?? (names.includes('cpu') ? 16 << 20 : 256 << 20);
  checkSizeRange(cmd, { min: flags.min, max });
  const element = flags.dtype === 'f32' ? 4 : 2;
  if (flags.min < element) fail(`--min ${formatBytes(flags.min)} is smaller than one ${flags.dtype} element`);
  if (!holdsWholeUnit(flags.min, max, element)) fail(`no whole number of ${flags.dtype} elements lies between --min ${formatBytes(flags.min)} and --max ${formatBytes(max)}`);
  // Whole elements, each rounded up: no size below --min.
  const sizes = doublingSizes(flags.min, max, element);
  const short = sweepNote(cmd, flags.min, max, element, `${flags.dtype} elements`);
  if (short) process.stderr.write(`a2av: note: ${short}\n`);
  // The note travels with the figures it explains (the table's readers saw it on stderr).
  const noted = (r: AllReduceBenchResult): AllReduceBenchResult => (short ? { ...r, notes: [short] } : r);
  const write = (results: AllReduceBenchResult[], apart = false) =>
    process.stdout.write(flags.json ? JSON.stringify(results.length === 1 ? noted(results[0]!) : results.map(noted), null, 2) + '\n' : apart ? results.map((r) => formatAllReduceTable([r])).join('') : formatAllReduceTable(results));
  // A signal mid-sweep: the backends run and the sizes finished, each its own table (their sizes differ).
  const partial = new PartialResults<AllReduceBenchResult>('size', sizes.length, (results) => write(results, true));
  const results = await eachBackend(names, async (backend, label) => {
    refuseCpuAllReduceSize(backend, sizes);
    const progress = new SweepProgress('bench allreduce', label, 'size', partial.interrupted);
    progress.start(sizes.map(formatBytes), `${sizeRange(sizes)} of ${flags.dtype}, each checked then timed`);
    try {
      return partial.done(await runAllReduceBench({ backend, ranks, sizes, dtype: flags.dtype, repeats: flags.repeats, iters: flags.iters, timeoutMs: flags.timeoutMs }, (r, soFar) => {
        partial.current = soFar;
        progress.finished(r.index, `${formatBytesExact(r.row.bytes)}: ${formatMicros(r.row.timeUs)} µs` +
          `${r.row.graphUs === undefined ? '' : `, graph ${formatMicros(r.row.graphUs)} µs`}, busbw ${formatGBps(r.row.busbwGBps)} GB/s, checked`);
      }));
    } finally {
      progress.stop();
    }
  });
  if (results.length === 0) return;
  write(results);
}
