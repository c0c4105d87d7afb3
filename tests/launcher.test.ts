// launch(): rank environment and store, output prefixes, teardown on failure, signal forwarding.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { readFileSync } from 'node:fs';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { UsageError } from '../src/errors.js';
import { launch } from '../src/launch/launcher.js';
import { linesOf, runLaunch } from './support/launch-capture.js';

const T = { timeout: 5000 };
const node = process.execPath;
const fixture = (name: string) => fileURLToPath(new URL(`../../tests/fixtures/${name}`, import.meta.url));

/** True while `pid` runs. A zombie counts as gone: it is dead, only waiting for init to reap it. */
function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
  } catch {
    return false;
  }
  try {
    return readFileSync(`/proc/${pid}/stat`, 'utf8').replace(/^.*\) /s, '')[0] !== 'Z';
  } catch {
    return false;
  }
}

/** A killed process may take a moment to die; wait for that, but briefly. */
async function gone(pid: number, withinMs = 1000): Promise<boolean> {
  for (const until = Date.now() + withinMs; Date.now() < until; await new Promise((r) => setTimeout(r, 20))) {
    if (!alive(pid)) return true;
  }
  return !alive(pid);
}

test('ranks see torchrun variables and meet through the launcher store', T, async () => {
  const { code, stdout, stderr } = await runLaunch({ nprocs: 3, command: [node, fixture('store-rank.mjs')] });
  assert.equal(code, 0, stderr);
  assert.equal(stderr, '');
  const seen = [0, 1, 2].map((r) => JSON.parse(linesOf(stdout, r)[0]!));
  for (const [r, env] of seen.entries()) {
    assert.equal(env.launcher, 'torchrun');
    assert.equal(env.rank, r);
    assert.equal(env.localRank, r);
    assert.equal(env.worldSize, 3);
    assert.equal(env.localWorldSize, 3);
    assert.equal(env.groupRank, '0');
    assert.equal(env.masterAddr, '127.0.0.1');
    assert.ok(env.masterPort > 0, 'port 0 was replaced by the real one');
    assert.equal(env.tokenLength, 64);
    assert.equal(env.tokenDigest, seen[0].tokenDigest, 'one token per job');
    assert.equal(env.next, `from ${(r + 1) % 3}`);
  }
  assert.deepEqual(seen.map((e) => e.arrivals).sort(), [1, 2, 3]);
  assert.doesNotMatch(stdout + stderr, /[0-9a-f]{64}/, 'nothing token-like is printed');
  assert.equal(process.env.A2AV_STORE_TOKEN, undefined, "the launcher's own environment is untouched");
});

test('output lines are prefixed per rank; partial last lines are flushed', T, async () => {
  const script = `process.stdout.write('one\\ntwo\\nthr'); setTimeout(() => { process.stdout.write('ee\\npartial'); process.stderr.write('err line\\n'); }, 20);`;
  const { code, stdout, stderr } = await runLaunch({ nprocs: 2, command: [node, '-e', script] });
  assert.equal(code, 0);
  for (const r of [0, 1]) {
    assert.deepEqual(linesOf(stdout, r), ['one', 'two', 'three', 'partial']);
    assert.deepEqual(linesOf(stderr, r), ['err line']);
  }
  assert.equal(stdout.split('\n').filter((l) => l !== '' && !/^\[rank [01]\] /.test(l)).length, 0, 'no unprefixed lines');
});

test('output of chosen ranks only, and without prefixes for piping one rank on', T, async () => {
  const script = `const r = process.env.RANK; console.log(JSON.stringify({ r })); console.error('err ' + r);`;
  const some = await runLaunch({ nprocs: 3, command: [node, '-e', script], outputRanks: [0, 2] });
  assert.equal(some.code, 0, some.stderr);
  assert.deepEqual([0, 1, 2].map((r) => linesOf(some.stdout, r).length), [1, 0, 1]);
  assert.deepEqual(linesOf(some.stderr, 1), [], "rank 1's stderr is dropped too");
  const one = await runLaunch({ nprocs: 3, command: [node, '-e', script], outputRanks: [1], prefix: false });
  assert.equal(one.code, 0, one.stderr);
  assert.deepEqual(JSON.parse(one.stdout), { r: '1' }, 'stdout is exactly rank 1\'s JSON');
  await assert.rejects(runLaunch({ nprocs: 2, command: [node, '-e', ''], outputRanks: [2] }), /outputRanks/);
});

test('a failing rank stops the others, and nothing it started outlives the launcher', T, async () => {
  const command = [node, fixture('fail-rank.mjs'), '1', '3', 'grandchild'];
  const { code, stdout, stderr, ms } = await runLaunch({ nprocs: 3, command, graceMs: 3000 });
  assert.equal(code, 3);
  assert.ok(ms < 2500, `took ${ms} ms`);
  const lines = stderr.trim().split('\n');
  assert.match(lines.at(-1)!, /^a2av launch: rank 1 \(pid \d+\) failed first: exit code 3; stopped the other ranks$/);
  assert.equal(lines.filter((l) => l.startsWith('a2av launch:')).length, 1, 'one line');
  for (const r of [0, 2]) {
    const pids = linesOf(stdout, r)[0]!.split(' ').slice(1).map(Number);
    assert.equal(pids.length, 2);
    for (const pid of pids) assert.ok(await gone(pid), `rank ${r} process ${pid} is gone`);
  }
});

test('a rank that ignores SIGTERM is killed after the grace period', T, async () => {
  const command = [node, fixture('fail-rank.mjs'), '1', '1', 'ignore-sigterm'];
  const { code, stdout, stderr, ms } = await runLaunch({ nprocs: 2, command, graceMs: 300 });
  assert.equal(code, 1);
  assert.deepEqual(linesOf(stdout, 0).slice(1), ['ignoring SIGTERM']);
  assert.match(stderr, /rank 1 \(pid \d+\) failed first: exit code 1/);
  assert.ok(ms < 2500, `took ${ms} ms`);
});

test('a rank killed by a signal is reported by signal name', T, async () => {
  const script = `if (process.env.RANK === '0') process.kill(process.pid, 'SIGSEGV'); else setInterval(() => {}, 1000);`;
  const { code, stderr } = await runLaunch({ nprocs: 2, command: [node, '-e', script] });
  assert.equal(code, 128 + 11);
  assert.match(stderr, /rank 0 \(pid \d+\) failed first: killed by SIGSEGV/);
});

test('a command that cannot start fails with 127 and names it', T, async () => {
  const { code, stderr } = await runLaunch({ nprocs: 2, command: ['/nonexistent/a2av-no-such-program'] });
  assert.equal(code, 127);
  assert.match(stderr, /rank \d failed first: could not start "\/nonexistent\/a2av-no-such-program".*ENOENT/);
});

for (const [signal, exitCode] of [['SIGTERM', 143], ['SIGINT', 130]] as const) {
  test(`${signal} to the launcher is forwarded to every rank`, T, async () => {
    const script = `
      process.on('${signal}', () => { console.log('got ${signal}'); process.exit(0); });
      console.log('ready');
      setInterval(() => {}, 1000);`;
    const options = { nprocs: 2, command: [node, '-e', script], graceMs: 3000 };
    const driver = spawn(node, [fixture('launch-driver.mjs'), JSON.stringify(options)], { stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    driver.stderr.on('data', (chunk: Buffer) => (stderr += chunk));
    const ready = new Promise<void>((resolve) =>
      driver.stdout.on('data', (chunk: Buffer) => {
        stdout += chunk;
        if ((stdout.match(/\] ready\n/g) ?? []).length === 2) resolve();
      }),
    );
    await ready;
    driver.kill(signal);
    const [code] = await once(driver, 'close');
    assert.equal(code, exitCode, stderr);
    assert.deepEqual(linesOf(stdout, 0), ['ready', `got ${signal}`]);
    assert.deepEqual(linesOf(stdout, 1), ['ready', `got ${signal}`]);
    assert.match(stderr, new RegExp(`^a2av launch: received ${signal}; stopped all ranks\\n$`));
  });
}

test('bad options throw UsageError before anything starts', T, async () => {
  const command = [node, '-e', ''];
  await assert.rejects(launch({ nprocs: 0, command }), UsageError);
  await assert.rejects(launch({ nprocs: 1, command: [] }), UsageError);
  await assert.rejects(launch({ nprocs: 1, nnodes: 2, nodeRank: 2, masterPort: 29500, command }), UsageError);
  await assert.rejects(launch({ nprocs: 1, nnodes: 2, command }), /explicit masterPort/);
  await assert.rejects(launch({ nprocs: 1, nnodes: 2, masterPort: 29500, command, env: { A2AV_STORE_TOKEN: undefined } }), /A2AV_STORE_TOKEN/);
});
