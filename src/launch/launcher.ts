// The launcher: one process per GPU, torchrun-style. Serves the job's rendezvous store (on node
// rank 0), starts the ranks of this node with the torchrun variables, and tears the job down as a
// unit: if one rank fails, or the launcher is signalled, no rank is left running. Its one line about
// a failure names the rank that the ranks' TimeoutErrors named (their exit records), not only the
// rank that failed first, which is usually one that gave up waiting for it.
import { randomBytes } from 'node:crypto';
import { constants } from 'node:os';
import type { Writable } from 'node:stream';
import { UsageError } from '../errors.js';
import { JOB_ID_ENV, LAUNCH_GRACE_ENV, STORE_PORT_ENV, STORE_TOKEN_ENV } from '../world/env.js';
import { ERROR_FILE_ENV } from '../world/exit-record.js';
import { joinedKey } from '../world/init.js';
import { removeShmFiles } from '../world/shm-files.js';
import { TcpStoreServer, type TcpStoreClient } from '../world/tcp-store.js';
import { describeError, describeTimeouts, ExitRecordDir, waitedFor } from './exit-report.js';
import { meetNodes } from './node-meeting.js';
import { RankProcess, type RankExit } from './rank-process.js';

/** Options of `launch`, named after torchrun's flags (--nproc-per-node, --nnodes, --node-rank, ...). */
export interface LaunchOptions {
  /** Ranks on this node (one per GPU). */
  nprocs: number;
  /** Nodes in the job (default 1). */
  nnodes?: number;
  /** This node's index, 0..nnodes-1 (default 0). Node 0 serves the store. */
  nodeRank?: number;
  /** Host of the store, as ranks reach it (default 127.0.0.1). Node 0 binds exactly this address. */
  masterAddr?: string;
  /** Port of the store (default 0: pick a free one; single node only, since other nodes must know it). */
  masterPort?: number;
  /** Program and arguments every rank runs. */
  command: readonly string[];
  /**
   * Variables added to (or, when undefined, removed from) this process's environment for the
   * ranks. With nnodes > 1, A2AV_STORE_TOKEN must come from here or this process's environment and
   * be the same on every node; a single-node job generates its own.
   */
  env?: Record<string, string | undefined>;
  /** How long ranks get to exit after SIGTERM before SIGKILL (default 5000 ms). */
  graceMs?: number;
  /** Where prefixed output and the launcher's own messages go (default process.stdout / stderr). */
  stdout?: Writable;
  stderr?: Writable;
  /** Ranks (global) whose output is shown; the others' is discarded. Default: every rank. */
  outputRanks?: readonly number[];
  /** "[rank R] " before each line (default true); off, for piping one rank's output (JSON) on. */
  prefix?: boolean;
  /**
   * How errors name the options: as here (outputRanks; the default), or by a2av launch's flags
   * (--output-ranks), for errors the a2av command shows its user.
   */
  namesInErrors?: 'options' | 'flags';
  /** nnodes > 1: how long this node waits for the others to join at node 0's store before its ranks start (default 900 s). */
  joinTimeoutMs?: number;
}

/** The options validate() checks, by a2av launch's flag (graceMs has none). */
const FLAGS = {
  nprocs: '--nproc-per-node',
  nnodes: '--nnodes',
  nodeRank: '--node-rank',
  masterAddr: '--master-addr',
  masterPort: '--master-port',
  graceMs: 'graceMs',
  command: '<command...>',
  outputRanks: '--output-ranks',
} as const;
type Checked = keyof typeof FLAGS;

/** As torchrun's agent forwards them: a closed terminal or ssh session (SIGHUP) must not leave the ranks running. */
const FORWARDED_SIGNALS = ['SIGINT', 'SIGTERM', 'SIGHUP', 'SIGQUIT'] as const;
/** After a rank exits with an error status, how long the others may take to end on their own before SIGTERM. */
const SETTLE_MS = 500;
/** How long node 0 keeps the job's store up for the other nodes' ranks after its own have ended (torchrun's exit barrier: 300 s). */
const EXIT_WAIT_MS = 300_000;
/** How often the store is read for peers left waiting in an init() by a rank that exited with status 0. */
const STRANDED_POLL_MS = 100;

/**
 * Runs the job's ranks of this node and resolves with the launcher's exit code: 0 when every rank
 * exited 0; else the first failed rank's exit code (128 + signal number if it was killed), or
 * 128 + signal number when the launcher itself was interrupted. Throws UsageError on bad options
 * and StoreError when the store cannot listen.
 */
export async function launch(options: LaunchOptions): Promise<number> {
  const plan = validate(options);
  const token = plan.nnodes > 1 ? sharedToken(options) : randomBytes(32).toString('hex');
  const server = plan.nodeRank === 0 ? await TcpStoreServer.listen({ token, host: plan.masterAddr, port: plan.masterPort }) : undefined;
  let met: TcpStoreClient | undefined;
  try {
    const port = server?.port ?? plan.masterPort;
    // Held while the ranks run: a second launcher of this node rank is refused until it closes.
    if (plan.nnodes > 1) met = await meetNodes({ ...plan, port, token, joinTimeoutMs: options.joinTimeoutMs });
    const code = await new Job(plan, token, port, server).run();
    // Node 0's store serves every node's ranks: after a good end here it stays up until the other
    // nodes' launchers (each holds its meeting's connection while its ranks run) have ended, as
    // torchrun's exit barrier does.
    if (server !== undefined && plan.nnodes > 1 && code === 0) {
      await met?.close();
      met = undefined;
      const said = setTimeout(() => plan.stderr.write(`a2av launch: node 0's ranks are done; its store stays up for the other nodes' ranks (up to ${EXIT_WAIT_MS / 1000} s)\n`), 5000);
      await server.idle(EXIT_WAIT_MS);
      clearTimeout(said);
    }
    return code;
  } finally {
    await met?.close();
    await server?.close();
  }
}

type Plan = Required<Omit<LaunchOptions, 'env' | 'namesInErrors' | 'joinTimeoutMs'>> & Pick<LaunchOptions, 'env'>;

function validate(options: LaunchOptions): Plan {
  const { nprocs, nnodes = 1, nodeRank = 0, masterAddr = '127.0.0.1', masterPort = 0, command, graceMs = 5000 } = options;
  const name = (option: Checked): string => (options.namesInErrors === 'flags' ? FLAGS[option] : option);
  const count = (option: Checked, value: number, min: number, max = Number.MAX_SAFE_INTEGER) => {
    if (!Number.isInteger(value) || value < min || value > max) throw new UsageError(`launch: ${name(option)} must be an integer in ${min}..${max}, got ${value}`);
  };
  count('nprocs', nprocs, 1);
  count('nnodes', nnodes, 1);
  count('nodeRank', nodeRank, 0);
  if (nodeRank >= nnodes) throw new UsageError(`launch: ${name('nodeRank')} must be below ${name('nnodes')} (${nnodes}), got ${nodeRank}`);
  count('masterPort', masterPort, 0, 65535);
  count('graceMs', graceMs, 0);
  const join = options.joinTimeoutMs;
  if (join !== undefined && (!Number.isInteger(join) || join < 1 || join > 2 ** 31 - 1)) throw new UsageError(`launch: joinTimeoutMs must be an integer in 1..${2 ** 31 - 1}, got ${join}`);
  if (nnodes > 1 && masterPort === 0) throw new UsageError(`launch: a multi-node job needs an explicit ${name('masterPort')}, the same on every node`);
  if (typeof masterAddr !== 'string' || masterAddr === '') throw new UsageError(`launch: ${name('masterAddr')} must be a host name or address`);
  if (!Array.isArray(command) || command.length === 0 || command.some((arg) => typeof arg !== 'string') || command[0] === '') {
    throw new UsageError(`launch: ${name('command')} must be a non-empty list of strings (program, then arguments)`);
  }
  const stdout = options.stdout ?? process.stdout;
  const stderr = options.stderr ?? process.stderr;
  const world = nprocs * nnodes;
  const outputRanks = options.outputRanks ?? Array.from({ length: world }, (_, r) => r);
  if (!Array.isArray(outputRanks) || outputRanks.some((r) => !Number.isInteger(r) || r < 0 || r >= world))
    throw new UsageError(`launch: ${name('outputRanks')} must list ranks in 0..${world - 1}, got ${String(outputRanks)}`);
  const prefix = options.prefix ?? true;
  return { nprocs, nnodes, nodeRank, masterAddr, masterPort, command, graceMs, env: options.env, stdout, stderr, outputRanks, prefix };
}

function sharedToken(options: LaunchOptions): string {
  const token = options.env?.[STORE_TOKEN_ENV] ?? process.env[STORE_TOKEN_ENV];
  if (!token) {
    throw new UsageError(`launch: a multi-node job needs ${STORE_TOKEN_ENV} set to the same secret on every node (e.g. from: openssl rand -hex 32)`);
  }
  return token;
}

/** One launch of this node's ranks: spawning, failure teardown and signal forwarding. */
class Job {
  #plan: Plan;
  #token: string;
  #port: number;
  /** Names this node's part of the job: ranks prefix their shared-memory files with it. */
  #jobId = randomBytes(8).toString('hex');
  #ranks: RankProcess[] = [];
  #records = new ExitRecordDir();
  #exits: RankExit[] = [];
  #firstFailure: RankExit | undefined;
  #interrupt: NodeJS.Signals | undefined;
  /** Ranks this launcher stopped after a failure (they were still running then). */
  #stopped = new Set<number>();
  #killTimer: NodeJS.Timeout | undefined;
  /** The job's store where this node serves it (node 0): what the ranks have joined. */
  #server: TcpStoreServer | undefined;
  /** Ranks of this node that have exited, and those that exited with status 0. */
  #exited = new Set<number>();
  #cleanExits: RankExit[] = [];
  #strandedPoll: NodeJS.Timeout | undefined;
  /** A rank that exited with status 0 without joining an init() its peers joined: the job's failure. */
  #stranded: { exit: RankExit; init: number; waiting: number[] } | undefined;

  constructor(plan: Plan, token: string, port: number, server?: TcpStoreServer) {
    this.#plan = plan;
    this.#token = token;
    this.#port = port;
    this.#server = server;
  }

  async run(): Promise<number> {
    const onSignal = (signal: NodeJS.Signals) => this.#onSignal(signal);
    // Last resort if this process exits without waiting (process.exit, uncaught error elsewhere).
    const onProcessExit = () => {
      this.#ranks.forEach((r) => r.signal('SIGKILL'));
      removeShmFiles(this.#jobId);
      this.#records.remove();
    };
    for (const signal of FORWARDED_SIGNALS) process.on(signal, onSignal);
    process.on('exit', onProcessExit);
    try {
      const { nprocs, nodeRank } = this.#plan;
      for (let local = 0; local < nprocs && !this.#stopping; local++) {
        const rank = nodeRank * nprocs + local;
        const shown = this.#plan.outputRanks.includes(rank);
        this.#ranks.push(
          new RankProcess({
            rank,
            command: this.#plan.command,
            env: this.#env(local),
            stdout: shown ? this.#plan.stdout : undefined,
            stderr: shown ? this.#plan.stderr : undefined,
            prefix: this.#plan.prefix ? `[rank ${rank}] ` : '',
            onExit: (exit) => this.#onRankExit(exit),
          }),
        );
      }
      this.#exits = await Promise.all(this.#ranks.map((r) => r.done));
      return this.#report();
    } finally {
      // Ranks unlink their shared memory once every peer has mapped it; one killed before that cannot.
      removeShmFiles(this.#jobId);
      clearTimeout(this.#killTimer);
      clearInterval(this.#strandedPoll);
      for (const signal of FORWARDED_SIGNALS) process.off(signal, onSignal);
      process.off('exit', onProcessExit);
      this.#records.remove();
    }
  }

  get #stopping(): boolean {
    return this.#firstFailure !== undefined || this.#interrupt !== undefined;
  }

  #env(localRank: number): Record<string, string | undefined> {
    const { nprocs, nnodes, nodeRank, masterAddr } = this.#plan;
    return {
      ...process.env,
      ...this.#plan.env,
      RANK: String(nodeRank * nprocs + localRank),
      WORLD_SIZE: String(nprocs * nnodes),
      LOCAL_RANK: String(localRank),
      LOCAL_WORLD_SIZE: String(nprocs),
      GROUP_RANK: String(nodeRank),
      GROUP_WORLD_SIZE: String(nnodes),
      MASTER_ADDR: masterAddr,
      MASTER_PORT: String(this.#port),
      [STORE_TOKEN_ENV]: this.#token,
      // This launcher serves the store at MASTER_PORT: a port from the caller's environment would
      // have rank 0 serve a second one.
      [STORE_PORT_ENV]: undefined,
      [JOB_ID_ENV]: this.#jobId,
      [LAUNCH_GRACE_ENV]: String(this.#plan.graceMs),
      // torchrun's variable, so that a rank writes the same record under either launcher.
      [ERROR_FILE_ENV]: this.#records.pathFor(nodeRank * nprocs + localRank),
    };
  }

  #onRankExit(exit: RankExit): void {
    this.#exited.add(exit.rank);
    const failed = exit.spawnError !== undefined || exit.code !== 0;
    if (!failed && this.#server !== undefined && !this.#stopping) {
      // A rank may end before its peers; but one that never joined the init() they wait in leaves
      // them waiting out their set-up timeout (60 s), saying nothing. Read the store until they end.
      this.#cleanExits.push(exit);
      this.#checkStranded();
      this.#strandedPoll ??= setInterval(() => this.#checkStranded(), STRANDED_POLL_MS).unref();
    }
    if (!failed || this.#stopping) return;
    this.#firstFailure = exit;
    // A rank that exited with a status usually failed with the others (a wrong result, a refused
    // call, a timeout): they learn it at the same moment and say so on their way out. SIGTERM at
    // once cut that short (a2av bench's other ranks lost their line about one run in four on a
    // loaded two-core machine), so they get SETTLE_MS first. A crash or a failed start: at once.
    if (exit.spawnError === undefined && exit.signal === null) setTimeout(() => this.#stopAll('SIGTERM'), SETTLE_MS).unref();
    else this.#stopAll('SIGTERM');
  }

  /**
   * Stops the job if a rank that exited with status 0 is missing from an init() that a rank still
   * running has joined (the store's join keys, init.ts): that rank waits for it and nothing else.
   */
  #checkStranded(): void {
    const server = this.#server!;
    if (this.#stopping || this.#exited.size === this.#ranks.length) return clearInterval(this.#strandedPoll);
    const world = this.#plan.nprocs * this.#plan.nnodes;
    const ranks = Array.from({ length: world }, (_, r) => r);
    for (let init = 0; ; init++) {
      const joined = ranks.filter((r) => server.has(joinedKey(init, r)));
      if (joined.length === 0) return;
      const waiting = joined.filter((r) => !this.#exited.has(r));
      const exit = this.#cleanExits.find((e) => !joined.includes(e.rank));
      if (exit === undefined || waiting.length === 0) continue;
      this.#stranded = { exit, init, waiting };
      this.#firstFailure = exit;
      this.#stopAll('SIGTERM');
      return;
    }
  }

  #onSignal(signal: NodeJS.Signals): void {
    // A second signal means "now": do not wait out the grace period.
    if (this.#interrupt !== undefined) return this.#ranks.forEach((r) => r.signal('SIGKILL'));
    this.#interrupt = signal;
    this.#stopAll(signal);
  }

  /** Sends `signal` to every running rank, then SIGKILL to any still running after the grace period. */
  #stopAll(signal: NodeJS.Signals): void {
    for (const rank of this.#ranks) {
      // Stopped for a failure: a signal to the launcher after it does not make them the signal's.
      if (rank.signal(signal) && this.#firstFailure !== undefined) this.#stopped.add(rank.rank);
    }
    this.#killTimer ??= setTimeout(() => this.#ranks.forEach((r) => r.signal('SIGKILL')), this.#plan.graceMs);
  }

  /** Prints at most one line, after the ranks' own output, and returns the exit code. */
  #report(): number {
    const say = (line: string) => this.#plan.stderr.write(`a2av launch: ${line}\n`);
    const failure = this.#firstFailure;
    if (this.#interrupt !== undefined && failure === undefined) {
      say(`received ${this.#interrupt}; stopped all ranks`);
      return 128 + (constants.signals[this.#interrupt] ?? 0);
    }
    if (failure === undefined) return 0;
    if (this.#stranded !== undefined) {
      const { exit, init, waiting } = this.#stranded;
      const where = init === 0 ? 'init()' : `its init() #${init + 1}`;
      say(`rank ${exit.rank} exited with status 0 without joining ${where}, where ${waiting.length === 1 ? 'rank' : 'ranks'} ${waiting.join(', ')} waited for it; stopped the job rather than let them wait out their set-up timeout`);
      return 1;
    }
    // A failure first, then maybe a signal (in the half second the others had to end): the failure is the job's outcome.
    const stopped = [...this.#stopped].sort((a, b) => a - b);
    const others =
      (this.#interrupt === undefined ? '' : `; received ${this.#interrupt}`) +
      (stopped.length === 0 ? '' : `; stopped ${stopped.length === 1 ? 'rank' : 'ranks'} ${stopped.join(', ')}, still running then`);
    if (failure.spawnError !== undefined) {
      say(`rank ${failure.rank} failed first: could not start ${JSON.stringify(this.#plan.command[0])}: ${failure.spawnError.message}${others}`);
      return 127;
    }
    // Only failed ranks' records count: one that exited 0 recovered from whatever it recorded.
    const failed = this.#exits.filter((e) => e.spawnError === undefined && (e.code !== 0 || e.signal !== null)).map((e) => e.rank);
    const records = this.#records.read(failed);
    const ended = new Set(this.#exits.filter((e) => e.spawnError === undefined && e.code === 0 && e.signal === null).map((e) => e.rank));
    const blame = describeTimeouts(records, ended, failure.rank);
    const own = describeError(records.get(failure.rank));
    const first = `${blame === undefined ? '' : `${blame}; `}rank ${failure.rank} (pid ${failure.pid}) failed first`;
    const waited = waitedFor(records, failure.rank);
    // No record (it failed before init(), or not through a2av), and its output not shown: its last word.
    const hidden = own === undefined ? this.#ranks.find((r) => r.rank === failure.rank)?.hiddenErrorLine : undefined;
    const said = own ?? (hidden === undefined ? undefined : `its last line on stderr, not shown: ${hidden}`);
    const why = (said === undefined ? '' : ` (${said})`) + (waited === undefined ? '' : `; ${waited}`);
    if (failure.signal !== null) {
      say(`${first}: killed by ${failure.signal}${why}${others}`);
      return 128 + (constants.signals[failure.signal] ?? 0);
    }
    say(`${first}: exit code ${failure.code}${why}${others}`);
    return failure.code ?? 1;
  }
}
