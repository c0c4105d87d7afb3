// One rank's child process: spawned in its own process group, output prefixed, exit recorded.
import { spawn, type ChildProcess } from 'node:child_process';
import { finished } from 'node:stream/promises';
import type { Writable } from 'node:stream';
import { LinePrefixer } from './line-prefixer.js';

/** How a rank ended: an exit code, a signal, or a failure to start at all. */
export interface RankExit {
  readonly rank: number;
  readonly pid: number | undefined;
  readonly code: number | null;
  readonly signal: NodeJS.Signals | null;
  readonly spawnError: Error | undefined;
}

export interface RankProcessOptions {
  rank: number;
  command: readonly string[];
  env: Record<string, string | undefined>;
  /** Where the rank's lines go; undefined discards them (they are still read, so the rank never blocks). */
  stdout: Writable | undefined;
  stderr: Writable | undefined;
  /** Put before every line ('' for none). */
  prefix: string;
  /** Called as soon as the process has ended (before its output is drained), to start teardown early. */
  onExit(exit: RankExit): void;
}

/** The end of a hidden stderr kept for the failure summary. */
const HIDDEN_TAIL_CHARS = 4096;

export class RankProcess {
  readonly rank: number;
  /** Resolves once the process has ended and all of its output has been written out. */
  readonly done: Promise<RankExit>;
  #child: ChildProcess;
  #exit: RankExit | undefined;
  /** The end of stderr where its lines are not shown (--output-ranks): a failure's summary quotes its last line. */
  #hiddenTail = '';

  constructor(options: RankProcessOptions) {
    const { rank, command, env, onExit } = options;
    this.rank = rank;
    // Own process group (detached): a signal reaches the rank's whole tree (a shell wrapper and
    // what it runs), and a terminal's Ctrl-C reaches the ranks once, through the launcher.
    const child = spawn(command[0]!, command.slice(1), { env, stdio: ['ignore', 'pipe', 'pipe'], detached: true });
    this.#child = child;
    const outputs = [child.stdout!.pipe(new LinePrefixer(options.prefix)), child.stderr!.pipe(new LinePrefixer(options.prefix))];
    const sinks = [options.stdout, options.stderr];
    if (!options.stderr) {
      child.stderr!.on('data', (chunk: Buffer) => {
        this.#hiddenTail = (this.#hiddenTail + chunk.toString()).slice(-HIDDEN_TAIL_CHARS);
      });
    }
    outputs.forEach((lines, i) => {
      const sink = sinks[i];
      if (!sink) return void lines.resume();
      // Every rank adds two 'error' listeners to the launcher's shared stdout and stderr (pipe's and
      // the one below): six ranks would pass Node's default of ten and print a leak warning.
      sink.setMaxListeners(sink.getMaxListeners() + 2);
      finished(lines).then(() => sink.setMaxListeners(Math.max(10, sink.getMaxListeners() - 2)), () => {});
      lines.pipe(sink, { end: false });
      // A sink that fails (a full disk, a closed pipe) unpipes itself and the lines would stop
      // flowing: the rank then blocks on a full pipe and the job never ends. They go nowhere instead.
      sink.once('error', () => {
        lines.unpipe(sink);
        lines.resume();
      });
    });
    const record = (exit: Omit<RankExit, 'rank' | 'pid'>) => {
      if (this.#exit) return;
      this.#exit = { rank, pid: child.pid, ...exit };
      // Whatever the rank left behind in its group must not outlive it (or the launcher).
      if (child.pid !== undefined) this.#killGroup('SIGKILL');
      onExit(this.#exit);
    };
    child.on('exit', (code, signal) => record({ code, signal, spawnError: undefined }));
    // Only a failure to start ends the rank; later 'error's (a failed kill) do not.
    child.on('error', (error) => {
      if (child.pid === undefined) record({ code: null, signal: null, spawnError: error });
    });
    const closed = new Promise<void>((resolve) => child.once('close', () => resolve()));
    this.done = Promise.all([closed, ...outputs.map((s) => finished(s).catch(() => {}))]).then(() => this.#exit!);
  }

  get pid(): number | undefined {
    return this.#child.pid;
  }

  /**
   * What the rank said last on a stderr that was not shown: the last error line (an uncaught
   * error's trace ends in its stack and Node's version, not in its message), else the last line.
   */
  get hiddenErrorLine(): string | undefined {
    const lines = this.#hiddenTail.split('\n').map((l) => l.trim()).filter((l) => l !== '' && !/^Node\.js v\d/.test(l) && !/^at /.test(l) && !/^[\^~\s]+$/.test(l));
    const line = [...lines].reverse().find((l) => /^[\w.$]*(Error|Exception)\b/.test(l)) ?? lines.at(-1);
    return line === undefined ? undefined : line.length > 300 ? `${line.slice(0, 300)}...` : line;
  }

  get running(): boolean {
    return this.#exit === undefined && this.#child.pid !== undefined;
  }

  /** Sends `signal` to the rank's process group while the rank runs; says whether it did. */
  signal(signal: NodeJS.Signals): boolean {
    if (!this.running) return false;
    this.#killGroup(signal);
    return true;
  }

  #killGroup(signal: NodeJS.Signals): void {
    try {
      process.kill(-this.#child.pid!, signal);
    } catch {
      // ESRCH: the group is already gone.
    }
  }
}
