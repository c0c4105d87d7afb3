#!/usr/bin/env node
// The `a2av` command: builds the program and runs it. Each command's options and output are in
// src/cli/ (a file per command); the work is in src/bench, src/pipeline, src/tune and src/launch.
import { readFileSync } from 'node:fs';
import { Command } from 'commander';
import { addBench } from './cli/bench.js';
import { addBenchAllReduce } from './cli/bench-all-reduce.js';
import { addBenchPipeline } from './cli/bench-pipeline.js';
import { HelpShown, reportError, watchStdout } from './cli/exit.js';
import { addLaunch } from './cli/launch.js';
import { addPlot } from './cli/plot.js';
import { addTune } from './cli/tune.js';

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
addTune(program);
addPlot(program);
addLaunch(program);

// `a2av help bench pipeline`: commander's help command takes one word, so a nested command's help
// is asked of the command itself, as `a2av bench pipeline --help` would.
const args = process.argv.slice(2);
const nested = (words: string[]): boolean => {
  let at: Command | undefined = program;
  for (const w of words) at = at?.commands.find((c) => c.name() === w || c.aliases().includes(w));
  return at !== undefined;
};
const helpWords = args[0] === 'help' && args.length > 2 && nested(args.slice(1)) ? [...args.slice(1), '--help'] : undefined;

watchStdout();
try {
  // commander prints the whole help for `help <a word it does not know>`, and exits 1 unexplained.
  if (args[0] === 'help' && args.length > 1 && args[1] !== 'help' && !nested(args.slice(1))) program.error(`unknown command '${args.slice(1).join(' ')}' (a2av help lists the commands)`);
  await (helpWords ? program.parseAsync(helpWords, { from: 'user' }) : program.parseAsync());
} catch (err) {
  reportError(err);
}
