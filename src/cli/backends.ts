// --backend and --ranks: the backends a command runs, how many ranks, and running each backend in turn.
import { InvalidArgumentError } from 'commander';
import type { BackendName } from '../backends/backend.js';
import { MAX_CPU_WORLD } from '../backends/cpu/world.js';
import { checkKnobs } from '../knobs.js';
import { rankEnv } from '../world/env.js';
import { errorLine, fail } from './exit.js';
import { listItems, once } from './options.js';
import { DEFAULT_MAX } from './sizes.js';

const BACKENDS = Object.keys(DEFAULT_MAX) as BackendName[];
const DEFAULT_CPU_RANKS = 2;

/** --backend's parser: one name, or several to compare in one table. */
export function backendList(text: string): BackendName[] {
  const names = listItems(text, 'backends');
  const odd = names.find((n) => !(BACKENDS as string[]).includes(n));
  if (odd !== undefined) throw new InvalidArgumentError(`unknown backend '${odd}' (choose from ${BACKENDS.join(', ')})`);
  return once(names, 'backend') as BackendName[];
}

/**
 * The backends a bench command runs (--backend, else the default) and its ranks: --ranks, else a
 * launched job's, else one per GPU, or DEFAULT_CPU_RANKS on cpu.
 */
export async function backendsAndRanks(flags: { backend?: BackendName[]; ranks?: number }): Promise<{ names: BackendName[]; ranks: number }> {
  // Every rank's communicator would refuse a bad A2AV_* switch: said once, before any starts.
  checkKnobs();
  const names = flags.backend ?? [await (await import('../backends/create.js')).defaultBackend()];
  // runRanks refuses it too (checkCpuWorld), but only when cpu's turn comes: after cuda's whole sweep
  // with --backend cuda,cpu. Said here, naming the option, before any backend runs.
  if (flags.ranks !== undefined && flags.ranks > MAX_CPU_WORLD && names.includes('cpu')) {
    fail(`--ranks ${flags.ranks}: the cpu backend runs at most ${MAX_CPU_WORLD} ranks (each a thread of this process, with its own buffers)`);
  }
  const gpu = names.some((n) => n !== 'cpu');
  return { names, ranks: flags.ranks ?? rankEnv()?.worldSize ?? (gpu ? await gpuCount(names.join(',')) : DEFAULT_CPU_RANKS) };
}

/** A GPU run's ranks unless --ranks says: one per visible GPU; none is refused, saying why and what to use. */
export async function gpuCount(backend: string): Promise<number> {
  const { cudaDeviceCount, cudaUnavailableReason } = await import('../cuda/probe.js');
  const n = cudaDeviceCount();
  if (n === 0) {
    const { overrideProblem } = await import('../native/find-library.js');
    const bad = overrideProblem('A2AV_LIBCUDA');
    if (bad) fail(`--backend ${backend}: A2AV_LIBCUDA=${process.env.A2AV_LIBCUDA}: it does not load (${bad})`);
    // The driver's error may already end in the way out (LibraryNotFoundError: "... use the cpu
    // backend (--backend cpu), ..."): say it once.
    const reason = (cudaUnavailableReason() ?? 'none visible').replace(/\.$/, '');
    // cpu already among them: the way out is to leave the GPU backends out, not to use cpu.
    const names = backend.split(',');
    if (names.includes('cpu')) {
      const gpus = names.filter((n) => n !== 'cpu');
      const cause = reason.replace(/: use the cpu backend.*$/, '');
      const driver = reason.includes('A2AV_LIBCUDA') ? ", or set A2AV_LIBCUDA to the driver's path" : '';
      fail(`--backend ${backend}: ${gpus.join(' and ')} need${gpus.length === 1 ? 's' : ''} a GPU and none is usable here (${cause}): run --backend cpu alone${driver}`);
    }
    fail(reason.includes('--backend cpu') ? `--backend ${backend}: no GPU: ${reason}` : `--backend ${backend}: no GPU (${reason}); use --backend cpu`);
  }
  return n;
}

/**
 * Runs `run` for each backend in turn; with several, one that cannot run (no NCCL here) still
 * leaves the others' results, its error one line on stderr and the exit status 1. Launched ranks
 * other than 0 get no result: the job prints one table.
 */
export async function eachBackend<R>(names: readonly BackendName[], run: (backend: BackendName, label: string) => Promise<R | undefined>): Promise<R[]> {
  const results: R[] = [];
  for (const backend of names) {
    try {
      const result = await run(backend, names.length > 1 ? `${backend}: ` : '');
      if (result !== undefined) results.push(result);
    } catch (err) {
      if (names.length === 1) throw err;
      process.stderr.write(`a2av: ${backend}: ${errorLine(err)}\n`);
      process.exitCode = 1;
    }
  }
  return results;
}
