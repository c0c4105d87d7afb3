// `a2av launch`: runs a command as the ranks of one job, one process per GPU (src/launch), their lines on stdout.
import { Writable } from 'node:stream';
import { InvalidArgumentError, type Command } from 'commander';
import { checkKnobs } from '../knobs.js';
import type { LaunchOptions } from '../launch/launcher.js';
import { JOB_ID_ENV } from '../world/env.js';
import { fail, stdoutFailed } from './exit.js';
import { integer, listItems, once } from './options.js';

interface LaunchFlags {
  nprocPerNode: number;
  nnodes?: number;
  nodeRank?: number;
  masterAddr?: string;
  masterPort?: number;
  outputRanks?: number[];
  prefix: boolean;
}

/** Adds `a2av launch`. */
export function addLaunch(program: Command): void {
  program
    .command('launch')
    .description('Run a command as the ranks of one job, one process a rank (torchrun-style: on GPUs one per GPU)')
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
}

/** --output-ranks's parser. */
function rankList(text: string): number[] {
  // An empty item is named as the other list options name it (Number('') would read as rank 0).
  const parts = listItems(text, 'rank numbers');
  const ranks = parts.map((t) => (/^\d+$/.test(t) ? Number(t) : NaN));
  if (ranks.some((r) => !Number.isSafeInteger(r))) throw new InvalidArgumentError(`not a list of ranks: '${text}' (give rank numbers separated by commas, e.g. 0 or 0,3)`);
  return once(ranks, 'rank');
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
  // `a2av launch -n 2 -- a2av launch -n 2 -- cmd` would start 4 ranks in two jobs of 2, each rank
  // told it is one of 2: a slip (the inner command meant), refused before anything starts.
  const outer = process.env[JOB_ID_ENV];
  if (outer !== undefined && process.env.RANK !== undefined) {
    fail(`launch: this process is rank ${process.env.RANK} of a job that a2av launch started (${JOB_ID_ENV}=${outer}): ` +
      `a launch here would start jobs within that job; give the command itself to the outer launch, or unset ${JOB_ID_ENV} to start a job of its own`);
  }
  // The ranks inherit the environment: a bad switch would fail every one of them.
  checkKnobs();
  const { launch } = await import('../launch/launcher.js');
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
