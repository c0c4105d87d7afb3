// Ranks on several GPUs synchronise with system-scope flags and fences; on one GPU the backend picks
// the cheaper device scope. This runs the exchange and allReduce cases with system scope forced, so
// the flag code that multi-GPU machines use is checked on any GPU.
import { randomInt } from 'node:crypto';
import { test } from 'node:test';
import { runRanks } from '../src/world/threads.js';

const seed = process.env.A2AV_SEED !== undefined ? Number(process.env.A2AV_SEED) : randomInt(2 ** 31);

test('cuda exchange W=4 with system-scope flags (the multi-GPU path)', async (t) => {
  const probe = await import('../src/cuda/probe.js');
  if (probe.cudaDeviceCount() === 0) return t.skip(`no CUDA GPU: ${(probe.cudaUnavailableReason() ?? '').split(/;|\n/)[0]}`);
  // Rank threads copy the environment when they start.
  const before = process.env.A2AV_FORCE_SYSTEM_SCOPE;
  process.env.A2AV_FORCE_SYSTEM_SCOPE = '1';
  try {
    await runRanks({ backend: 'cuda', ranks: 4, timeoutMs: 30_000 }, new URL('./conformance/cases.js', import.meta.url), 'exchange', {
      seed,
      calls: 20,
      budget: 8192,
    });
  } catch (err) {
    throw new Error(`failed with seed ${seed} (rerun: A2AV_SEED=${seed}): ${(err as Error).message}`, { cause: err });
  } finally {
    if (before === undefined) delete process.env.A2AV_FORCE_SYSTEM_SCOPE;
    else process.env.A2AV_FORCE_SYSTEM_SCOPE = before;
  }
});

test('cuda allReduce W=3 with system-scope flags (the multi-GPU path): one-shot and rounds', async (t) => {
  const probe = await import('../src/cuda/probe.js');
  if (probe.cudaDeviceCount() === 0) return t.skip(`no CUDA GPU: ${(probe.cudaUnavailableReason() ?? '').split(/;|\n/)[0]}`);
  const before = process.env.A2AV_FORCE_SYSTEM_SCOPE;
  process.env.A2AV_FORCE_SYSTEM_SCOPE = '1';
  try {
    await runRanks({ backend: 'cuda', ranks: 3, timeoutMs: 30_000 }, new URL('./conformance/cases.js', import.meta.url), 'allReduce', {
      seed,
      counts: [1, 4099, 300_007],
    });
  } catch (err) {
    throw new Error(`failed with seed ${seed} (rerun: A2AV_SEED=${seed}): ${(err as Error).message}`, { cause: err });
  } finally {
    if (before === undefined) delete process.env.A2AV_FORCE_SYSTEM_SCOPE;
    else process.env.A2AV_FORCE_SYSTEM_SCOPE = before;
  }
});
