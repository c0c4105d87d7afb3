// The conformance suite: every rank program of tests/conformance/cases.ts on every backend, against
// the host reference on fresh random data. A failure prints the seed; A2AV_SEED=<seed> replays it.
import { randomInt } from 'node:crypto';
import { describe, test } from 'node:test';
import type { BackendName } from '../src/backends/backend.js';
import { runRanks } from '../src/world/threads.js';
import { caseArg, notFor, suite, type Case } from './conformance/suite.js';

const seed = process.env.A2AV_SEED !== undefined ? Number(process.env.A2AV_SEED) : randomInt(2 ** 31);
const cases = new URL('./conformance/cases.js', import.meta.url);

/** Why `backend` cannot run here, or undefined when it can; and how many GPUs there are. */
async function unavailable(backend: BackendName): Promise<{ why?: string; gpus: number }> {
  if (backend === 'cpu') return { gpus: 0 };
  let why: string;
  let gpus = 0;
  try {
    const probe = await import('../src/cuda/probe.js');
    gpus = probe.cudaDeviceCount();
    why = probe.cudaUnavailableReason() ?? 'the driver reports none';
  } catch (err) {
    why = `the probe failed: ${(err as Error).message}`;
  }
  // The loader's reason lists every path it searched; the first clause is what a reader needs.
  if (gpus === 0) return { why: `no CUDA GPU: ${why.split(/;|\n/)[0]}`, gpus };
  if (backend === 'nccl') {
    const { ncclUnavailableReason } = await import('../src/nccl/library.js');
    const noNccl = ncclUnavailableReason();
    if (noNccl !== undefined) return { why: `no NCCL: ${noNccl.split(/; searched/)[0]}`, gpus };
  }
  return { gpus };
}
const availability = { cpu: unavailable('cpu'), cuda: unavailable('cuda'), nccl: unavailable('nccl') };

// 'cuda grid': the cuda backend with every call in grid mode (kernels/a2av.cu), which by default
// only large calls take; 'MoE slice grid': the MoE cases with every call whose ranks share a GPU on
// x_copy_slices (kernels/exchange-slices.cuh), which by default only calls from 16 MiB take, so
// its index, its spans across chunks and its loops under an SM budget meet the suite's odd shapes.
/** The MoE cases that move data (not the host-side usage checks, not the timeout). */
const MOE_DATA = /^(moe(Exchange|Plans|PlanReplay|Replay|Errors|Mismatch|Lanes|Tokens|TokenReplay|TokenErrors|TokenReplayErrors)|planRefusals)$/;
type Run = { backend: BackendName; title: string; env?: Record<string, string>; cases?: (c: Case) => boolean };
const runs: Run[] = [
  { backend: 'cpu', title: 'cpu' },
  { backend: 'cuda', title: 'cuda' },
  { backend: 'cuda', title: 'cuda, grid mode (A2AV_GRID_COPY=always)', env: { A2AV_GRID_COPY: 'always' } },
  { backend: 'cuda', title: 'cuda, MoE slice grid (A2AV_MOE_GRID=always)', env: { A2AV_MOE_GRID: 'always' }, cases: (c) => MOE_DATA.test(c.fn) },
  { backend: 'nccl', title: 'nccl' },
];

// A2AV_CONFORMANCE_RUN=words: only the runs whose title holds one of them (comma-separated), so a
// GPU run can take one, e.g. A2AV_CONFORMANCE_RUN='slice grid'.
const wanted = (process.env.A2AV_CONFORMANCE_RUN ?? '').split(',').map((w) => w.trim()).filter((w) => w !== '');
const picked = runs.filter((r) => wanted.length === 0 || wanted.some((w) => r.title.includes(w)));
if (picked.length === 0) throw new Error(`A2AV_CONFORMANCE_RUN=${process.env.A2AV_CONFORMANCE_RUN}: no run's title holds it (${runs.map((r) => r.title).join('; ')})`);

for (const { backend, title, env = {}, cases: chosen = () => true } of picked) {
  describe(`conformance on ${title}`, () => {
    for (const c of suite.filter(chosen)) {
      test(c.name, async (t) => {
        const { why, gpus } = await availability[backend];
        // NCCL refuses two ranks on one GPU, so on nccl a case needs as many GPUs as ranks.
        const skip = why ?? notFor(backend, c) ??
          (backend === 'nccl' && c.ranks > gpus ? `nccl needs one GPU per rank: W=${c.ranks} needs ${c.ranks} GPUs, this machine has ${gpus}` : undefined);
        if (skip !== undefined) return t.skip(skip);
        const arg = caseArg(c, seed);
        try {
          await withEnv(env, () => runRanks({ backend, ranks: c.ranks, timeoutMs: c.timeoutMs ?? 30_000, lanes: c.lanes ?? 2 }, cases, c.fn, arg));
        } catch (err) {
          throw new Error(`${backend} ${c.fn} W=${c.ranks} failed with seed ${seed} (rerun: A2AV_SEED=${seed}): ${(err as Error).message}`, { cause: err });
        }
      });
    }
  });
}

/** Runs `fn` with `vars` set in process.env (rank threads copy it when they start), then restores it. */
async function withEnv<T>(vars: Record<string, string>, fn: () => Promise<T>): Promise<T> {
  const saved = Object.keys(vars).map((k) => [k, process.env[k]] as const);
  Object.assign(process.env, vars);
  try {
    return await fn();
  } finally {
    for (const [k, v] of saved) {
      if (v === undefined) delete process.env[k];
      else process.env[k] = v;
    }
  }
}
