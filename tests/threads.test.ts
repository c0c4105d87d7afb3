// runRanks: results in rank order, reports, and failures that name the rank and keep their class.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { test } from 'node:test';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { SplitsError, TimeoutError, UsageError } from '../src/errors.js';
import { START_WAIT_FLOOR_MS } from '../src/world/set-up-waits.js';
import { runRanks, type RankFailure } from '../src/world/threads.js';

const programs = new URL('./threads/programs.js', import.meta.url);

test('runRanks returns every rank\'s result in rank order and forwards reports', async () => {
  const reports: [number, unknown][] = [];
  const results = await runRanks({ backend: 'cpu', ranks: 3, onReport: (rank, msg) => reports.push([rank, msg]) }, programs, 'echo', { tag: 'x' });
  assert.deepEqual(results, [0, 1, 2].map((rank) => ({ rank, world: 3, tag: 'x' })));
  assert.deepEqual(reports.map(([r]) => r).sort(), [0, 1, 2]);
});

test('a failing rank rejects with its own error class and fields, and the others are stopped', async () => {
  const started = performance.now();
  const err = (await runRanks({ backend: 'cpu', ranks: 3, timeoutMs: 60_000 }, programs, 'oneFails', { failing: 1 }).then(
    () => assert.fail('expected a rejection'),
    (e: unknown) => e,
  )) as RankFailure;
  assert.ok(err instanceof SplitsError, `got ${err}`);
  assert.equal(err.failedRank, 1);
  assert.equal(err.code, 'A2AV_SPLITS');
  assert.equal((err as SplitsError).needed, 12n);
  assert.match(err.message, /^rank 1 failed: /);
  // An uncaught rejection prints the stack: it says the same.
  assert.match(err.stack!, /^SplitsError: rank 1 failed: /);
  // The other ranks sat in a 60 s barrier; they were terminated after the grace period.
  assert.ok(performance.now() - started < 20_000);
});

test('a timeout inside a rank arrives as a TimeoutError naming the missing rank', async () => {
  const err = await runRanks({ backend: 'cpu', ranks: 2, timeoutMs: 300 }, programs, 'throwsTimeout', {}).catch((e: unknown) => e);
  assert.ok(err instanceof TimeoutError, `got ${err}`);
  assert.equal(err.missingRank, 1);
  assert.equal(err.rank, 0);
  assert.equal((err as unknown as RankFailure).failedRank, 0);
  // The rank is named once, though the communicator's own message starts with it too.
  assert.match(err.message, /^rank 0 failed: timed out after 300 ms waiting for rank 1 /);
});

test('after a timeout the cpu communicator refuses further collectives', async () => {
  const [r0] = await runRanks<unknown, string>({ backend: 'cpu', ranks: 2, timeoutMs: 300 }, programs, 'abortsAfterTimeout', {});
  assert.equal(r0, 'TimeoutError then CommAbortedError');
});

test('cpu set-up waits (allocSymmetric, barrier) outlast a short timeoutMs for a late rank; a collective keeps it', async () => {
  const timeoutMs = 300;
  const outcomes = await runRanks({ backend: 'cpu', ranks: 3, timeoutMs }, programs, 'lateSetUp', { lateMs: 4 * timeoutMs });
  assert.equal(outcomes[1], 'absent');
  for (const r of [0, 2]) {
    const o = outcomes[r] as { missingRank: number; waitedMs: number };
    assert.equal(o.missingRank, 1, `rank ${r}`);
    // Well under the set-up floor: a missing peer in a collective is found at the communicator's timeout.
    assert.ok(o.waitedMs >= timeoutMs / 2 && o.waitedMs < START_WAIT_FLOOR_MS / 2, `rank ${r} waited ${o.waitedMs} ms`);
  }
});

test('a missing export is a UsageError', async () => {
  const err = await runRanks({ backend: 'cpu', ranks: 2 }, programs, 'noSuchExport', {}).catch((e: unknown) => e);
  assert.ok(err instanceof UsageError, `got ${err}`);
});

test('a rank\'s return value that cannot be cloned is a UsageError naming the export, with the DataCloneError as cause', async () => {
  const err = (await runRanks({ backend: 'cpu', ranks: 2 }, programs, 'returnsFunction', {}).catch((e: unknown) => e)) as RankFailure;
  assert.ok(err instanceof UsageError, `got ${err}`);
  assert.match(err.message, new RegExp(`^rank ${err.failedRank} failed: the return value of 'returnsFunction' cannot be sent back to runRanks: it must be structured-cloneable`));
  assert.equal((err.cause as Error).name, 'DataCloneError');
});

test('a report that cannot be cloned is a UsageError of the reporting rank, with the DataCloneError as cause', async () => {
  const err = (await runRanks({ backend: 'cpu', ranks: 2, onReport: () => {} }, programs, 'reportsFunction', {}).catch((e: unknown) => e)) as RankFailure;
  assert.ok(err instanceof UsageError, `got ${err}`);
  assert.match(err.message, new RegExp(`^rank ${err.failedRank} failed: ctx\\.report\\(\\): the report cannot be sent to onReport: it must be structured-cloneable`));
  assert.equal((err.cause as Error).name, 'DataCloneError');
});

test('an argument that cannot be cloned is a UsageError of runRanks itself, before any rank starts', async () => {
  const reports: unknown[] = [];
  const err = (await runRanks({ backend: 'cpu', ranks: 2, onReport: (_r, m) => reports.push(m) }, programs, 'echo', { tag: () => 1 }).catch((e: unknown) => e)) as RankFailure;
  assert.ok(err instanceof UsageError, `got ${err}`);
  assert.match(err.message, /^runRanks: the argument for 'echo' cannot be sent to the rank threads: it must be structured-cloneable/);
  assert.equal((err.cause as Error).name, 'DataCloneError');
  assert.equal(err.failedRank, undefined);
  assert.deepEqual(reports, []);
});

test('a module path that names no file is one UsageError naming the path, before any rank starts', async () => {
  const missing = fileURLToPath(new URL('./threads/no-such-programs.js', import.meta.url));
  for (const module of [missing, pathToFileURL(missing)]) {
    const err = (await runRanks({ backend: 'cpu', ranks: 2 }, module, 'echo', {}).catch((e: unknown) => e)) as RankFailure;
    assert.ok(err instanceof UsageError, `got ${err}`);
    assert.equal(err.message, `runRanks: module ${missing} not found`);
    assert.equal((err.cause as NodeJS.ErrnoException).code, 'ENOENT');
    assert.equal(err.failedRank, undefined);
  }
  const relative = await runRanks({ backend: 'cpu', ranks: 2 }, 'no-such-dir/programs.js', 'echo', {}).catch((e: unknown) => e);
  assert.ok(relative instanceof UsageError, `got ${relative}`);
  assert.match(relative.message, /not found \(a relative path is resolved against the working directory; new URL\('\.\/rank\.js', import\.meta\.url\)/);
  const folder = fileURLToPath(new URL('./threads/', import.meta.url));
  await assert.rejects(runRanks({ backend: 'cpu', ranks: 2 }, folder, 'echo', {}), { name: 'UsageError', message: `runRanks: module ${folder} is not a file` });
});

test('a module that starts ranks at its top level gets a UsageError from its ranks, not threads without end', () => {
  const fixture = fileURLToPath(new URL('../../tests/fixtures/self-starting-ranks.mjs', import.meta.url));
  const r = spawnSync(process.execPath, [fixture], { encoding: 'utf8', timeout: 30_000 });
  assert.equal(r.signal, null, `ended by ${r.signal} (it started ranks without end): ${r.stdout.slice(0, 400)}`);
  assert.equal(r.status, 1, r.stderr);
  assert.match(r.stderr, /UsageError: rank [01] failed: runRanks: called in rank [01]'s thread, which imports the module given to runRanks; .*isMainThread/);
  assert.equal(r.stdout, '', 'no rank ran');
});

test('a data: module goes to the ranks as given', async () => {
  const module = `data:text/javascript,${encodeURIComponent('export const rank = (comm) => comm.rank;')}`;
  assert.deepEqual(await runRanks({ backend: 'cpu', ranks: 2 }, module, 'rank', {}), [0, 1]);
});

test('timeLoop runs its lead-in calls before the timed ones', async () => {
  const calls = await runRanks<unknown, number>({ backend: 'cpu', ranks: 2 }, programs, 'countsLeadIn', { iters: 3, leadIn: 2 });
  assert.deepEqual(calls, [5, 5]);
});
