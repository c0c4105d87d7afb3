// Where this process sits in a job, read from the variables a launcher sets: ours or torchrun's
// (RANK...), Slurm's srun (SLURM_PROCID...), or Open MPI's mpirun (OMPI_COMM_WORLD_RANK...).
import { UsageError } from '../errors.js';

export type LauncherKind = 'torchrun' | 'slurm' | 'openmpi';

export interface RankEnv {
  /** Which family of variables this was read from. */
  readonly launcher: LauncherKind;
  readonly rank: number;
  readonly worldSize: number;
  /** Index among the ranks of this node (picks the GPU). */
  readonly localRank: number;
  readonly localWorldSize: number;
  /** Rendezvous host: MASTER_ADDR, else under Slurm the first host of the step's node list. */
  readonly masterAddr: string | undefined;
  /** Rendezvous port: MASTER_PORT, if set. */
  readonly masterPort: number | undefined;
}

/** Holds the job's store secret. Kept out of RankEnv so that logging a RankEnv cannot leak it. */
export const STORE_TOKEN_ENV = 'A2AV_STORE_TOKEN';

/**
 * Where no a2av launch serves the job's store (torchrun, srun, mpirun), the port rank 0 serves it
 * on, at MASTER_ADDR; every rank connects there. Unset: every rank connects to MASTER_PORT (a2av
 * launch's store, or a TcpStoreServer the job runs itself). Under torchrun MASTER_PORT is
 * torchrun's own store, whose protocol is not this one: give another port.
 */
export const STORE_PORT_ENV = 'A2AV_STORE_PORT';

/** A2AV_STORE_PORT as a port, or undefined when unset. */
export function storePort(env: Env = process.env): number | undefined {
  const text = env[STORE_PORT_ENV];
  if (text === undefined || text === '') return undefined;
  const port = Number(text.trim());
  if (!/^\d{1,5}$/.test(text.trim()) || port < 1 || port > 65535) throw new UsageError(`${STORE_PORT_ENV}=${JSON.stringify(text)} is not a port (1..65535)`);
  return port;
}

/**
 * Names the job on this node (a2av launch sets it): the cpu backend puts it in its shared-memory
 * file names, so that the launcher can remove what a killed rank left in /dev/shm.
 */
export const JOB_ID_ENV = 'A2AV_JOB_ID';

/**
 * The grace a2av launch gives a rank between SIGTERM and SIGKILL (its graceMs), for its ranks to
 * give their own process groups the same when they stop themselves after the launcher is gone.
 */
export const LAUNCH_GRACE_ENV = 'A2AV_LAUNCH_GRACE_MS';

type Env = Readonly<Record<string, string | undefined>>;

/** The launcher's grace in ms from A2AV_LAUNCH_GRACE_MS, or `fallback` where it is unset or not a whole number of ms. */
export function launchGraceMs(fallback: number, env: Env = process.env): number {
  const text = env[LAUNCH_GRACE_ENV];
  return text !== undefined && /^\d{1,10}$/.test(text) ? Number(text) : fallback;
}

/**
 * Reads this process's place in the job, or undefined when no launcher started it. Throws
 * UsageError when the variables are present but incomplete or inconsistent, because guessing would
 * make ranks wait for peers that do not exist.
 */
export function rankEnv(env: Env = process.env): RankEnv | undefined {
  if (env.RANK !== undefined || env.WORLD_SIZE !== undefined) return fromTorchrun(env);
  // A Slurm batch script has SLURM_PROCID=0 and the job's SLURM_NTASKS but is not a task of a
  // step; only srun tasks have a step id. Treating the batch shell as rank 0 would hang.
  if (env.SLURM_PROCID !== undefined && (env.SLURM_STEP_ID ?? env.SLURM_STEPID) !== undefined) return fromSlurm(env);
  if (env.OMPI_COMM_WORLD_RANK !== undefined) return fromOpenMpi(env);
  return undefined;
}

/** The job's store secret from A2AV_STORE_TOKEN, or undefined when unset. */
export function storeToken(env: Env = process.env): string | undefined {
  const token = env[STORE_TOKEN_ENV];
  return token === undefined || token === '' ? undefined : token;
}

/** The job id from A2AV_JOB_ID (letters and digits, at most 32), or undefined when unset. */
export function jobId(env: Env = process.env): string | undefined {
  const id = env[JOB_ID_ENV];
  if (id === undefined || id === '') return undefined;
  if (!/^[A-Za-z0-9]{1,32}$/.test(id)) throw new UsageError(`${JOB_ID_ENV}=${JSON.stringify(id)}: expected 1 to 32 letters and digits`);
  return id;
}

function fromTorchrun(env: Env): RankEnv {
  const rank = int(env, 'RANK');
  const worldSize = int(env, 'WORLD_SIZE');
  const hasLocal = env.LOCAL_RANK !== undefined || env.LOCAL_WORLD_SIZE !== undefined;
  // Hand-written env:// setups often set only RANK and WORLD_SIZE: that means one node.
  const localRank = hasLocal ? int(env, 'LOCAL_RANK') : rank;
  const localWorldSize = hasLocal ? int(env, 'LOCAL_WORLD_SIZE') : worldSize;
  return check({ launcher: 'torchrun', rank, worldSize, localRank, localWorldSize, ...master(env) });
}

function fromSlurm(env: Env): RankEnv {
  const rank = int(env, 'SLURM_PROCID');
  const worldSize = env.SLURM_STEP_NUM_TASKS !== undefined ? int(env, 'SLURM_STEP_NUM_TASKS') : int(env, 'SLURM_NTASKS');
  const localRank = int(env, 'SLURM_LOCALID');
  const perNodeVar = env.SLURM_STEP_TASKS_PER_NODE !== undefined ? 'SLURM_STEP_TASKS_PER_NODE' : 'SLURM_TASKS_PER_NODE';
  const perNode = expandTasksPerNode(perNodeVar, env[perNodeVar]);
  const nodeId = env.SLURM_NODEID !== undefined ? int(env, 'SLURM_NODEID') : 0;
  const localWorldSize = perNode.length === 1 ? perNode[0]! : perNode[nodeId];
  if (localWorldSize === undefined) throw new UsageError(`${perNodeVar}=${env[perNodeVar]} has no entry for SLURM_NODEID=${nodeId}`);
  const nodeList = env.SLURM_STEP_NODELIST ?? env.SLURM_JOB_NODELIST ?? env.SLURM_NODELIST;
  const { masterAddr, masterPort } = master(env);
  return check({ launcher: 'slurm', rank, worldSize, localRank, localWorldSize, masterAddr: masterAddr ?? firstHost(nodeList), masterPort });
}

function fromOpenMpi(env: Env): RankEnv {
  return check({
    launcher: 'openmpi',
    rank: int(env, 'OMPI_COMM_WORLD_RANK'),
    worldSize: int(env, 'OMPI_COMM_WORLD_SIZE'),
    localRank: int(env, 'OMPI_COMM_WORLD_LOCAL_RANK'),
    localWorldSize: int(env, 'OMPI_COMM_WORLD_LOCAL_SIZE'),
    ...master(env),
  });
}

function master(env: Env): { masterAddr: string | undefined; masterPort: number | undefined } {
  const masterAddr = env.MASTER_ADDR;
  if (masterAddr !== undefined && masterAddr.trim() === '') throw new UsageError('MASTER_ADDR is set but empty');
  const masterPort = env.MASTER_PORT === undefined ? undefined : int(env, 'MASTER_PORT');
  if (masterPort !== undefined && (masterPort < 1 || masterPort > 65535)) throw new UsageError(`MASTER_PORT=${masterPort} is not a port (1..65535)`);
  return { masterAddr, masterPort };
}

function check(r: RankEnv): RankEnv {
  const where = `(${r.launcher} variables)`;
  if (r.worldSize < 1) throw new UsageError(`world size ${r.worldSize} must be at least 1 ${where}`);
  if (r.rank >= r.worldSize) throw new UsageError(`rank ${r.rank} is not below world size ${r.worldSize} ${where}`);
  if (r.localWorldSize < 1 || r.localWorldSize > r.worldSize) {
    throw new UsageError(`local world size ${r.localWorldSize} must be 1..${r.worldSize} ${where}`);
  }
  if (r.localRank >= r.localWorldSize) throw new UsageError(`local rank ${r.localRank} is not below local world size ${r.localWorldSize} ${where}`);
  return Object.freeze(r);
}

function int(env: Env, name: string): number {
  const text = env[name];
  if (text === undefined) throw new UsageError(`${name} is not set, but other launcher variables are`);
  if (!/^\d{1,9}$/.test(text.trim())) throw new UsageError(`${name}=${JSON.stringify(text)} is not a non-negative integer`);
  return Number(text.trim());
}

/** Slurm's compressed counts: "2(x3),1" means nodes 0..2 run 2 tasks and node 3 runs 1. */
function expandTasksPerNode(name: string, text: string | undefined): number[] {
  if (text === undefined) throw new UsageError(`${name} is not set, so the local world size is unknown`);
  const counts: number[] = [];
  for (const part of text.split(',')) {
    const match = /^(\d+)(?:\(x(\d+)\))?$/.exec(part.trim());
    if (!match) throw new UsageError(`${name}=${JSON.stringify(text)} does not parse`);
    for (let i = 0; i < Number(match[2] ?? 1); i++) counts.push(Number(match[1]));
  }
  return counts;
}

/** First host of a Slurm node list: "gpu[07-09,12],cpu1" gives "gpu07", "r[1-2]-n[3-4]" gives "r1-n3". */
export function firstHost(nodeList: string | undefined): string | undefined {
  let host = '';
  let rest = nodeList?.trim() ?? '';
  while (rest.length > 0 && rest[0] !== ',') {
    const open = rest.search(/[[,]/);
    if (open < 0 || rest[open] === ',') return host + (open < 0 ? rest : rest.slice(0, open));
    const close = rest.indexOf(']', open);
    if (close < 0) return undefined;
    // From each bracketed range take its first value, e.g. "07" from "07-09,12".
    host += rest.slice(0, open) + rest.slice(open + 1, close).split(/[,-]/)[0];
    rest = rest.slice(close + 1);
  }
  return host || undefined;
}
