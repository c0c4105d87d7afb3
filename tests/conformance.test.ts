// The conformance suite: every rank program of tests/conformance/cases.ts on every backend, against
// the host reference on fresh random data. A failure prints the seed; A2AV_SEED=<seed> replays it.
import { randomInt } from 'node:crypto';
import { describe, test } from 'node:test';
import type { BackendName } from '../src/backends/backend.js';
import { runRanks } from '../src/world/threads.js';

const seed = process.env.A2AV_SEED !== undefined ? Number(process.env.A2AV_SEED) : randomInt(2 ** 31);
const cases = new URL('./conformance/cases.js', import.meta.url);
const TIMEOUT_CASE_MS = 300;

interface Case {
  name: string;
  fn: string;
  ranks: number;
  arg: Record<string, unknown>;
  timeoutMs?: number;
  lanes?: number;
}

const suite: Case[] = [
  ...[1, 2, 3, 4, 8].map((W) => ({
    name: `exchange W=${W}: random, sparse, zero, all-to-one and self splits, rows of 1 B to 16 KiB`,
    fn: 'exchange',
    ranks: W,
    arg: { calls: W === 8 ? 20 : 45, budget: W === 8 ? 4096 : 16384 },
  })),
  ...[2, 3].map((W) => ({ name: `graph replay W=${W}: new splits in the same buffers`, fn: 'replay', ranks: W, arg: { launches: 10, budget: 8192 } })),
  ...[1, 3, 4].map((W) => ({ name: `splits errors W=${W}: named error, nothing written, lane still usable`, fn: 'splitsErrors', ranks: W, arg: {} })),
  {
    name: `timeout W=3: a rank that never calls is named (${TIMEOUT_CASE_MS} ms)`,
    fn: 'timeout',
    ranks: 3,
    arg: { absent: -1, timeoutMs: TIMEOUT_CASE_MS },
    timeoutMs: TIMEOUT_CASE_MS,
  },
  ...[2, 3].map((W) => ({ name: `lanes W=${W}: a second lane works while the first holds an error`, fn: 'lanes', ranks: W, arg: { budget: 4096 } })),
  { name: 'usage W=2: host-side misuse throws UsageError at once', fn: 'usage', ranks: 2, arg: {} },
];

/** Why `backend` cannot run here, or undefined when it can. */
async function unavailable(backend: BackendName): Promise<string | undefined> {
  if (backend === 'cpu') return undefined;
  let why: string;
  try {
    const probe = await import('../src/cuda/probe.js');
    if (probe.cudaDeviceCount() > 0) return undefined;
    why = probe.cudaUnavailableReason() ?? 'the driver reports none';
  } catch (err) {
    why = `the probe failed: ${(err as Error).message}`;
  }
  // The loader's reason lists every path it searched; the first clause is what a reader needs.
  return `no CUDA GPU: ${why.split(/;|\n/)[0]}`;
}
const cudaSkip = unavailable('cuda');

for (const backend of ['cpu', 'cuda'] as const) {
  describe(`conformance on ${backend}`, () => {
    for (const c of suite) {
      test(c.name, async (t) => {
        const skip = backend === 'cuda' ? await cudaSkip : undefined;
        if (skip !== undefined) return t.skip(skip);
        const arg: Record<string, unknown> = { ...c.arg, seed };
        if (c.fn === 'timeout') arg.absent = seed % c.ranks;
        try {
          await runRanks({ backend, ranks: c.ranks, timeoutMs: c.timeoutMs ?? 30_000, lanes: c.lanes ?? 2 }, cases, c.fn, arg);
        } catch (err) {
          throw new Error(`${backend} ${c.fn} W=${c.ranks} failed with seed ${seed} (rerun: A2AV_SEED=${seed}): ${(err as Error).message}`, { cause: err });
        }
      });
    }
  });
}
