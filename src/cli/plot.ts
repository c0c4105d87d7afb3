// `a2av plot`: draws bench results (their JSON) as an SVG plot (src/plot).
import { resolve } from 'node:path';
import { Option, type Command } from 'commander';
import { fail } from './exit.js';

/** Adds `a2av plot`. */
export function addPlot(program: Command): void {
  program
    .command('plot')
    .description('Draw bench results (the JSON of a2av bench --json; not of its moe-* ops or of bench allreduce) as an SVG plot: algbw against input bytes per rank, log scales, ' +
      'a line per backend (and op, and file) and the same-run reference dashed, each named at its right end')
    .argument('<results.json...>', 'bench results; several are drawn together, their differences (splits, ranks...) in the line names')
    .requiredOption('-o, --output <file.svg>', 'the SVG file to write')
    .addOption(new Option('--time <which>', 'the measured lines\' times: eager (each call launched from the host), or graph (cuda: the calls replayed from a CUDA graph, at the sizes bench timed so; the references stay eager)').choices(['eager', 'graph']).default('eager'))
    .action((files: string[], flags: { output: string; time: 'eager' | 'graph' }) => plot(files, flags.output, flags.time));
}

async function plot(files: string[], output: string, timing: 'eager' | 'graph'): Promise<void> {
  const { checkOutput, readResultFile, writePlot } = await import('../plot/index.js');
  checkOutput(output);
  const twice = files.find((f, i) => files.findIndex((g) => resolve(g) === resolve(f)) !== i);
  if (twice !== undefined) fail(`${twice} is given twice: its lines would be drawn on each other`);
  const omitted = await writePlot(files.map(readResultFile), output, timing);
  // Said, not only drawn: a line missing from the picture is easy to miss too.
  if (omitted.length > 0) process.stderr.write(`a2av: not drawn, no graph times (bench replays from a CUDA graph on cuda only): ${omitted.join(', ')}; --time eager draws them\n`);
}
