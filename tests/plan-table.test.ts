// Measured plan tables (src/tune/table.ts): lookup by shape and size bucket, buckets made from
// measured sizes, table files checked with named errors, A2AV_PLAN read before the shipped tables;
// the default plan takes a table's plan only where it can be resident, and every plan keeps within
// a call's block budget.
import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { UsageError } from '../src/errors.js';
import { defaultPlan, fairBlocks, GRID_MIN_BYTES, heuristicPlan, launchesEarly, withinBudget, type PlanContext } from '../src/tune/plan.js';
import { bucketize, loadTables, lookupPlan, parseTable, shippedTablesDir, TABLE_FORMAT, type PlanShape, type PlanTable } from '../src/tune/table.js';

const shape: PlanShape = { gpu: 'NVIDIA H200', gpus: 2, world: 2, ranksPerGpu: 1, lanes: 2 };
const MiB = 1 << 20;
const ctx = (inputBytes: number, more: Partial<PlanContext> = {}): PlanContext => ({
  residentBlocks: (threads) => 132 * Math.floor(2048 / threads),
  ranksOnDevice: 1,
  inputBytes,
  allOnDevice: false,
  ...more,
});
/** The default plan's view of `tables` for calls of `s` (as the cuda backend builds it). */
const from = (tables: PlanTable[], s: PlanShape = shape) => (bytes: number) => lookupPlan(tables, s, bytes)?.plan;
const table = (entries: PlanTable['entries']): PlanTable => ({ format: TABLE_FORMAT, entries });

test('lookup: same GPU, GPU count, world, ranks per GPU and lanes, size inside [minBytes, maxBytes)', () => {
  const t = table([
    { ...shape, minBytes: 0, maxBytes: MiB, plan: { blocks: 4, threads: 256 } },
    { ...shape, minBytes: MiB, maxBytes: 64 * MiB, plan: { blocks: 64, threads: 512 } },
  ]);
  assert.equal(lookupPlan([t], shape, 0)?.plan.blocks, 4);
  assert.equal(lookupPlan([t], shape, MiB - 1)?.plan.blocks, 4);
  assert.equal(lookupPlan([t], shape, MiB)?.plan.blocks, 64);
  assert.equal(lookupPlan([t], shape, 64 * MiB), undefined);
  for (const other of [{ gpu: 'NVIDIA H100' }, { gpus: 1 }, { world: 4 }, { ranksPerGpu: 2 }, { lanes: 1 }, { lanes: 3 }]) {
    assert.equal(lookupPlan([t], { ...shape, ...other }, 0), undefined, JSON.stringify(other));
  }
  // The first table that has the shape wins (A2AV_PLAN's comes first).
  const first = table([{ ...shape, minBytes: 0, maxBytes: MiB, plan: { blocks: 2, threads: 128 } }]);
  assert.equal(lookupPlan([first, t], shape, 10)?.plan.blocks, 2);
});

test('buckets: neighbours with one plan merge, edges halfway between sizes, sizes the heuristic wins and sizes below the smallest measured stay out', () => {
  const a = { blocks: 8, threads: 512 };
  const b = { blocks: 1, threads: 256, grid: { threads: 256 } };
  const sizes = [
    { bytes: 4 * MiB, plan: a, us: 10, defaultUs: 12, timing: 'graph' as const },
    { bytes: MiB, plan: a, us: 5, defaultUs: 6, timing: 'graph' as const },
    { bytes: 16 * MiB, plan: b, us: 30, defaultUs: 40, timing: 'eager' as const },
    { bytes: 64 * MiB, plan: b, us: 100, defaultUs: 101, timing: 'eager' as const }, // within 2 %: the heuristic keeps it
    { bytes: 256 * MiB, plan: b, us: 300, defaultUs: 400, timing: 'eager' as const },
  ];
  const entries = bucketize(shape, sizes);
  assert.deepEqual(
    entries.map((e) => [e.minBytes, e.maxBytes, e.plan, e.timing]),
    [
      [Math.round(MiB / Math.SQRT2), 8 * MiB, a, 'graph'],
      [8 * MiB, 32 * MiB, b, 'eager'],
      [128 * MiB, Number.MAX_SAFE_INTEGER, b, 'eager'],
    ],
  );
  assert.deepEqual(entries[0]!.us, [5, 10]);
  assert.deepEqual(entries[0]!.defaultUs, [6, 12]);
  // Neighbours of one plan timed differently keep apart: their figures are not of one kind.
  const mixed = bucketize(shape, [
    { bytes: MiB, plan: a, us: 5, defaultUs: 6, timing: 'graph' },
    { bytes: 8 * MiB, plan: a, us: 20, defaultUs: 30, timing: 'eager' },
  ]);
  assert.deepEqual(
    mixed.map((e) => [e.maxBytes, e.timing, e.us]),
    [
      [Math.round(Math.sqrt(8) * MiB), 'graph', [5]],
      [Number.MAX_SAFE_INTEGER, 'eager', [20]],
    ],
  );
  for (const e of entries) assert.deepEqual({ gpu: e.gpu, gpus: e.gpus, world: e.world, ranksPerGpu: e.ranksPerGpu, lanes: e.lanes }, shape);
});

test('table files: JSON, the format tag and every field checked, errors name the file and the entry', () => {
  const ok = table([{ ...shape, minBytes: 0, maxBytes: 10, plan: { blocks: 1, threads: 256 } }]);
  assert.deepEqual(parseTable(JSON.stringify(ok), 'f.json'), ok);
  const bad = (text: string, re: RegExp) => assert.throws(() => parseTable(text, 'f.json'), (e: Error) => e instanceof UsageError && re.test(e.message));
  bad('{', /f\.json: not JSON/);
  bad('{"entries": []}', /f\.json: not a plan table/);
  const entry = ok.entries[0]!;
  bad(JSON.stringify(table([{ ...entry, gpu: 3 as unknown as string }])), /entry 0: gpu/);
  bad(JSON.stringify(table([{ ...entry, world: -1 }])), /entry 0: world/);
  bad(JSON.stringify(table([{ ...entry, lanes: 0 }])), /entry 0: lanes must be a positive integer/);
  bad(JSON.stringify(table([{ ...entry, lanes: 1.5 }])), /entry 0: lanes must be a positive integer/);
  bad(JSON.stringify(table([{ ...entry, timing: 'host' as 'graph' }])), /entry 0: timing must be 'graph' or 'eager', got "host"/);
  // A file from before lanes were part of the shape was measured with whole shares: lanes 1.
  const { lanes: _, ...old } = entry;
  const read = parseTable(JSON.stringify(table([old as never])), 'f.json');
  assert.equal(read.entries[0]!.lanes, 1);
  assert.equal(lookupPlan([read], { ...shape, lanes: 1 }, 0)?.plan.blocks, 1);
  assert.equal(lookupPlan([read], shape, 0), undefined);
  bad(JSON.stringify(table([{ ...entry, minBytes: 10 }])), /entry 0: minBytes 10 must be below maxBytes 10/);
  bad(JSON.stringify(table([{ ...entry, plan: { blocks: 1 } as never }])), /entry 0: plan must be/);
  bad(JSON.stringify(table([{ ...entry, plan: { blocks: 1, threads: 256, grid: 5 } as never }])), /entry 0: plan.grid/);
});

test('A2AV_PLAN is read before the shipped tables; a missing or bad file is a UsageError naming it', () => {
  const dir = mkdtempSync(join(tmpdir(), 'a2av-plans-'));
  try {
    const shipped = join(dir, 'plans');
    const own = join(dir, 'own.json');
    mkdirSync(shipped);
    writeFileSync(join(shipped, 'h200.json'), JSON.stringify(table([{ ...shape, minBytes: 0, maxBytes: 10, plan: { blocks: 3, threads: 256 } }])));
    writeFileSync(own, JSON.stringify(table([{ ...shape, minBytes: 0, maxBytes: 10, plan: { blocks: 7, threads: 256 } }])));
    assert.deepEqual(loadTables(undefined, shipped).map((t) => t.entries[0]!.plan.blocks), [3]);
    assert.deepEqual(loadTables(own, shipped).map((t) => t.entries[0]!.plan.blocks), [7, 3]);
    mkdirSync(join(dir, 'empty'));
    assert.deepEqual(loadTables('', join(dir, 'empty')), []);
    assert.throws(() => loadTables(join(dir, 'nope.json'), shipped), (e: Error) => e instanceof UsageError && /A2AV_PLAN=.*nope\.json: cannot read it \(ENOENT\)/.test(e.message));
    writeFileSync(own, '[]');
    assert.throws(() => loadTables(own, shipped), (e: Error) => e instanceof UsageError && /A2AV_PLAN=.*own\.json: not a plan table/.test(e.message));
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('the default plan: a table plan where it fits, else the heuristic; grid plans only for 16-byte rows', () => {
  const t = table([
    { ...shape, minBytes: 0, maxBytes: MiB, plan: { blocks: 4, threads: 256 } },
    { ...shape, minBytes: MiB, maxBytes: 2 * MiB, plan: { blocks: 9999, threads: 512 } }, // cannot be resident
    { ...shape, minBytes: 2 * MiB, maxBytes: 4 * MiB, plan: { blocks: 1, threads: 256, grid: { threads: 256 } } },
  ]);
  assert.deepEqual(defaultPlan(ctx(1000, { measured: from([t]) })), { blocks: 4, threads: 256 });
  assert.deepEqual(defaultPlan(ctx(MiB, { measured: from([t]) })), heuristicPlan(ctx(MiB)));
  assert.deepEqual(defaultPlan(ctx(3 * MiB, { measured: from([t]), rowBytes: 64 })), { blocks: 1, threads: 256, grid: { threads: 256 } });
  assert.deepEqual(defaultPlan(ctx(3 * MiB, { measured: from([t]), rowBytes: 7 })), heuristicPlan(ctx(3 * MiB, { rowBytes: 7 })));
  // A2AV_GRID_COPY forcing a mode wins over tables.
  assert.deepEqual(defaultPlan(ctx(1000, { measured: from([t]), gridCopy: 'never' })), heuristicPlan(ctx(1000, { gridCopy: 'never' })));
  // Another shape: the heuristic.
  assert.deepEqual(defaultPlan(ctx(1000, { measured: from([t], { ...shape, world: 8 }) })), heuristicPlan(ctx(1000)));
});

test('the heuristic on one GPU: small calls take blocks that launch early, a 16 KiB tile each; large calls the grid', () => {
  // An H200's a2av_1d (64 registers a thread: 4 blocks of 256 an SM), two lanes' shares.
  const h200 = (ranks: number, inputBytes: number, more: Partial<PlanContext> = {}): PlanContext => ({
    residentBlocks: (threads) => (132 * Math.floor(65536 / (64 * threads))) / 2,
    ranksOnDevice: ranks,
    inputBytes,
    allOnDevice: true,
    ...more,
  });
  for (const ranks of [1, 2, 3, 8, 64]) {
    for (const bytes of [1, 4096, 64 << 10, 512 << 10, MiB, 3 * MiB, GRID_MIN_BYTES - 1]) {
      const c = h200(ranks, bytes);
      const plan = heuristicPlan(c);
      const at = `${ranks} ranks, ${bytes} B`;
      assert.equal(plan.threads, 256, at);
      assert.equal(plan.grid, undefined, at);
      assert.ok(launchesEarly(plan, c) || fairBlocks(c, 256) < 2, at);
      // As many blocks as 16 KiB tiles, up to half the share.
      assert.equal(plan.blocks, Math.max(1, Math.min(Math.ceil(bytes / (16 << 10)), Math.floor(fairBlocks(c, 256) / 2))), at);
    }
    assert.ok(heuristicPlan(h200(ranks, GRID_MIN_BYTES)).grid, `${ranks} ranks: grid from ${GRID_MIN_BYTES}`);
  }
  assert.deepEqual(heuristicPlan(h200(8, MiB)), { blocks: 16, threads: 256 });
  assert.deepEqual(heuristicPlan(h200(2, 4 * MiB)), { blocks: 66, threads: 256 });
  // Rows that are not 16-byte multiples keep the resident sweep, launched plainly, past the grid's size.
  assert.equal(heuristicPlan(h200(8, 64 * MiB, { rowBytes: 7 })).threads, 512);
  // Across GPUs: the fair share of 512-thread blocks (not measured there with the two-lane shares).
  assert.deepEqual(heuristicPlan(h200(1, 4 * MiB, { allOnDevice: false })), { blocks: 128, threads: 512 });
});

test('a block budget caps every plan, at least one block', () => {
  const big = ctx(1 << 30);
  const plan = heuristicPlan(big);
  assert.ok(plan.blocks > 16);
  assert.deepEqual(defaultPlan({ ...big, maxBlocks: 16 }), { ...plan, blocks: 16 });
  assert.deepEqual(defaultPlan({ ...big, maxBlocks: 100_000 }), plan);
  assert.deepEqual(withinBudget({ blocks: 5, threads: 128 }, 0), { blocks: 1, threads: 128 });
  assert.deepEqual(withinBudget({ blocks: 5, threads: 128 }, undefined), { blocks: 5, threads: 128 });
});

test('the tables shipped in plans/ are well-formed, each entry a size range of one measured shape', () => {
  const dir = shippedTablesDir();
  assert.ok(dir !== undefined, 'the package ships plans/');
  const tables = loadTables('', dir);
  assert.ok(tables.length > 0);
  for (const t of tables) {
    for (const e of t.entries) {
      assert.ok(e.minBytes < e.maxBytes && e.plan.blocks >= 1 && e.plan.threads % 32 === 0, JSON.stringify(e));
      assert.ok(e.world >= 1 && e.gpus >= 1 && e.ranksPerGpu * e.gpus === e.world, `${e.gpu} W=${e.world}: ${e.ranksPerGpu} a GPU on ${e.gpus}`);
      assert.ok(Number.isInteger(e.lanes) && e.lanes >= 1, JSON.stringify(e));
    }
  }
  // One plan a size for each shape, across every shipped file: no two entries of a shape overlap.
  const all = tables.flatMap((t) => t.entries);
  const key = (e: PlanShape) => `${e.gpu}/${e.gpus}/${e.world}/${e.ranksPerGpu}/${e.lanes}`;
  for (const [i, a] of all.entries()) {
    for (const b of all.slice(i + 1)) {
      if (key(a) === key(b)) assert.ok(a.maxBytes <= b.minBytes || b.maxBytes <= a.minBytes, `${key(a)}: [${a.minBytes}, ${a.maxBytes}) and [${b.minBytes}, ${b.maxBytes})`);
    }
  }
});
