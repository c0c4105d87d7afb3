// a2av tune's parts that need no GPU: the candidate plans, merging a re-tuned shape into a table,
// the report, and the refusal on a backend without launch plans. The sweep itself runs on a GPU
// (scripts/gpu-check.sh).
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { test } from 'node:test';
import { cudaDeviceCount } from '../src/cuda/probe.js';
import { UsageError } from '../src/errors.js';
import { runRanks } from '../src/world/threads.js';
import { formatTune, mergeTables } from '../src/tune/run.js';
import { candidates } from '../src/tune/sweep.js';
import { pickPlan, TABLE_FORMAT, type PlanShape, type Timed } from '../src/tune/table.js';

test('candidates: powers of two up to the useful share, the share itself, per block size, and grid mode', () => {
  const probe = { fairBlocks: (threads: number) => (132 * 2048) / threads / 2 };
  const big = candidates(probe, [512], 1 << 30);
  assert.deepEqual(
    big.map((p) => p.blocks),
    [1, 2, 4, 8, 16, 32, 64, 128, 256, 264, 1],
  );
  assert.deepEqual(big[big.length - 1], { blocks: 1, threads: 256, grid: { threads: 256 } });
  // A small call: no more blocks than 16-byte words per thread it holds.
  const small = candidates(probe, [256, 1024], 64 << 10);
  assert.deepEqual(
    small.filter((p) => !p.grid).map((p) => `${p.blocks}x${p.threads}`),
    ['1x256', '2x256', '4x256', '8x256', '16x256', '1x1024', '2x1024', '4x1024'],
  );
  for (const p of small) assert.ok(p.blocks >= 1 && p.blocks <= probe.fairBlocks(p.threads));
});

test('a plan faster in a graph is kept only where it launches eagerly within the slack of the heuristic', () => {
  const plan = (blocks: number) => ({ blocks, threads: 256 });
  const heuristic: Timed = { plan: plan(8), us: 14.9, eager: 17.7 };
  // 2 MiB at W = 8 on one H200: 33x256 a microsecond faster in a graph, 9 µs slower eagerly.
  assert.equal(pickPlan(heuristic, [{ plan: plan(33), us: 13.9, eager: 26.5 }]), heuristic);
  // Within 3% eagerly: the graph's figure decides, the fastest of those allowed.
  const near: Timed = { plan: plan(16), us: 14.2, eager: 18.2 };
  const nearer: Timed = { plan: plan(12), us: 14.0, eager: 18.0 };
  const over: Timed = { plan: plan(10), us: 13.5, eager: 18.3 }; // 18.23 is the limit
  assert.equal(pickPlan(heuristic, [near, { plan: plan(33), us: 13.0, eager: 26.5 }, over, nearer]), nearer);
  // Small calls: 0.5 µs however small 3% is.
  const small: Timed = { plan: plan(8), us: 5.4, eager: 6.4 };
  assert.equal(pickPlan(small, [{ plan: plan(4), us: 5.0, eager: 6.85 }]).plan.blocks, 4);
  assert.equal(pickPlan(small, [{ plan: plan(4), us: 5.0, eager: 6.95 }]), small);
  // Eager sizes carry us = eager: the fastest wins.
  const e: Timed = { plan: plan(8), us: 100, eager: 100 };
  assert.equal(pickPlan(e, [{ plan: plan(16), us: 90, eager: 90 }]).plan.blocks, 16);
});

test('re-tuning a shape replaces its entries and keeps the other shapes', () => {
  const a: PlanShape = { gpu: 'NVIDIA H200', gpus: 1, world: 8, ranksPerGpu: 8, lanes: 2 };
  const b: PlanShape = { ...a, gpus: 2, world: 2, ranksPerGpu: 1 };
  // The same ranks with whole shares (lanes 1) are another shape: their entries stay.
  const c: PlanShape = { ...a, lanes: 1 };
  const old = {
    format: TABLE_FORMAT,
    measured: { date: 'before', command: 'a2av tune', kept: [{ date: 'long ago' }] },
    entries: [
      { ...a, minBytes: 0, maxBytes: 10, plan: { blocks: 1, threads: 256 } },
      { ...b, minBytes: 0, maxBytes: 10, plan: { blocks: 2, threads: 256 } },
      { ...c, minBytes: 0, maxBytes: 10, plan: { blocks: 3, threads: 256 } },
    ],
  } as const;
  const fresh = { format: TABLE_FORMAT, measured: { date: 'now' }, entries: [{ ...a, minBytes: 0, maxBytes: 99, plan: { blocks: 9, threads: 512 } }] } as const;
  const merged = mergeTables({ ...old, entries: [...old.entries] }, { ...fresh, entries: [...fresh.entries] }, a);
  assert.deepEqual(
    merged.entries.map((e) => [e.world, e.lanes, e.plan.blocks]),
    [
      [2, 2, 2],
      [8, 1, 3],
      [8, 2, 9],
    ],
  );
  // Where the kept entries' figures came from stays in the file.
  assert.deepEqual(merged.measured, { date: 'now', kept: [{ date: 'before', command: 'a2av tune' }, { date: 'long ago' }] });
  // Re-tuned where the heuristic was as fast everywhere: no entry of that shape is left.
  const none = mergeTables({ ...old, entries: [...old.entries] }, { format: TABLE_FORMAT, measured: { date: 'later' }, entries: [] }, a);
  assert.deepEqual(
    none.entries.map((e) => [e.world, e.lanes, e.plan.blocks]),
    [
      [2, 2, 2],
      [8, 1, 3],
    ],
  );
});

test('the report: one line per size with the plan kept, its time, the heuristic and the gain', () => {
  const text = formatTune({
    shape: { gpu: 'NVIDIA H200', gpus: 2, world: 2, ranksPerGpu: 1, lanes: 2 },
    sizes: [
      { bytes: 512 << 10, plan: { blocks: 4, threads: 256 }, us: 7.5, defaultUs: 8.25, timing: 'graph', eagerUs: 11.5, defaultEagerUs: 11.25 },
      { bytes: 1 << 30, plan: { blocks: 1, threads: 256, grid: { threads: 256 } }, us: 1500, defaultUs: 1650, timing: 'eager' },
    ],
  });
  const lines = text.trim().split('\n');
  assert.match(lines[0]!, /NVIDIA H200, 2 GPU\(s\), W=2, 1 rank\(s\) per GPU, blocks shared by 2 lane\(s\)/);
  assert.match(lines[2]!, /512 KiB\s+graph\s+4x256\s+7\.50\s+8\.25\s+1\.10x\s+11\.50 \(11\.25\)$/);
  assert.match(lines[3]!, /1 GiB\s+eager\s+1x256 grid 256\s+1500\.00\s+1650\.00\s+1\.10x/);
  assert.match(lines[4]!, /^timed: graph = device µs per call in a replayed CUDA graph/);
});

test('tune refuses a backend without launch plans, by name', { timeout: 30_000 }, async () => {
  await assert.rejects(
    runRanks({ backend: 'cpu', ranks: 2, timeoutMs: 10_000 }, new URL('../src/tune/sweep.js', import.meta.url), 'tune', { sizes: [1024], rowBytes: 64, repeats: 1, threads: [256], graphMaxBytes: 4 << 20 }),
    (err: Error) => err instanceof UsageError && /cuda backend's launch plans; this is cpu/.test(err.message),
  );
});

test('a2av tune without a GPU: one line saying it needs one, exit status 1; bad block sizes named', { timeout: 30_000 }, (t) => {
  const cli = fileURLToPath(new URL('../src/cli.js', import.meta.url));
  const bad = spawnSync(process.execPath, [cli, 'tune', '--threads', '256,100'], { encoding: 'utf8' });
  assert.notEqual(bad.status, 0);
  assert.match(bad.stderr, /block sizes are multiples of 32 in \[32, 1024\], got 100/);
  // Number('') is 0: an empty item is named by its place. A block size twice would be timed twice.
  for (const [list, said] of [
    ['256,,512', "item 2 of '256,,512' is empty: give block sizes separated by single commas"],
    ['256,512,256', 'block size 256 is named twice'],
    ['0x100', 'block sizes are multiples of 32 in [32, 1024], got 0x100'],
  ] as const) {
    const run = spawnSync(process.execPath, [cli, 'tune', '--threads', list], { encoding: 'utf8' });
    assert.equal(run.status, 1, list);
    assert.equal(run.stderr.trim(), `a2av: option '--threads <list>' argument '${list}' is invalid. ${said}`);
  }
  if (gpus() > 0) return t.skip('a GPU is visible: the refusal cannot be seen here');
  const run = spawnSync(process.execPath, [cli, 'tune', '--max', '1M'], { encoding: 'utf8', env: { ...process.env, RANK: undefined, WORLD_SIZE: undefined } });
  assert.equal(run.status, 1);
  assert.equal(run.stdout, '');
  assert.match(run.stderr.trim(), /^a2av: tune times the cuda backend's launch plans and needs a GPU: [^\n]+$/);

  // Launched, each rank says the same, not init()'s advice to use the cpu backend, which tune has not.
  const launched = spawnSync(process.execPath, [cli, 'launch', '-n', '2', '--', process.execPath, cli, 'tune', '--max', '1M'], { encoding: 'utf8' });
  assert.equal(launched.status, 1);
  assert.doesNotMatch(launched.stderr, /--backend/);
  assert.match(launched.stderr, /^\[rank [01]\] a2av: tune times the cuda backend's launch plans and needs a GPU: /m);
  assert.match(launched.stderr, /^a2av launch: rank [01] \(pid \d+\) failed first: exit code 1 \(UsageError: tune times the cuda backend's launch plans and needs a GPU: /m);
});

test('a2av tune --help: --graph-max says which sizes a graph replay times and which are eager', () => {
  const cli = fileURLToPath(new URL('../src/cli.js', import.meta.url));
  const help = spawnSync(process.execPath, [cli, 'tune', '--help'], { encoding: 'utf8' }).stdout.replace(/\s+/g, ' ');
  assert.match(help, /--graph-max <size> sizes up to this are timed by replaying a CUDA graph of back-to-back calls, which measures the device \(eager times of small calls are set by the host's launches\); larger sizes are timed eagerly; 0 times every size eagerly \(default: 4M\)/);
});

function gpus(): number {
  try {
    return cudaDeviceCount();
  } catch {
    return 0;
  }
}
