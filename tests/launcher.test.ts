// launch(): rank environment and store, output prefixes, teardown on failure, signal forwarding.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { once } from 'node:events';
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { createServer } from 'node:net';
import { describe, test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { CommAbortedError, TimeoutError, UsageError } from '../src/errors.js';
import { describeError, describeTimeouts, waitedFor } from '../src/launch/exit-report.js';
import { launch } from '../src/launch/launcher.js';
import { readExitRecord, recordExitError, type ExitRecord } from '../src/world/exit-record.js';
import { TcpStoreServer } from '../src/world/tcp-store.js';
import { linesOf, runLaunch } from './support/launch-capture.js';

const T = { timeout: 5000 };
const node = process.execPath;
const fixture = (name: string) => fileURLToPath(new URL(`../../tests/fixtures/${name}`, import.meta.url));

/** What a test of a SIGKILLed launcher leaves when it fails half-way: the launcher and its ranks' pids, SIGKILLed. */
function killAll(launcher: ReturnType<typeof spawn>, pids: readonly number[]): void {
  launcher.kill('SIGKILL');
  for (const pid of pids) {
    try {
      process.kill(pid, 'SIGKILL');
    } catch {
      // gone
    }
  }
}

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
  // A rank whose output is not shown fails with no record of its own: the summary quotes its last stderr line.
  const fails = `if (process.env.RANK === '1') { console.error('loading config'); console.error('Error: no config.json'); process.exit(2); } else setInterval(() => {}, 1000);`;
  const hidden = await runLaunch({ nprocs: 2, command: [node, '-e', fails], outputRanks: [0] });
  assert.equal(hidden.code, 2);
  assert.match(hidden.stderr, /rank 1 \(pid \d+\) failed first: exit code 2 \(its last line on stderr, not shown: Error: no config\.json\)/);
  // An uncaught error: its message, not the stack or Node's version that end the trace.
  const throws = `if (process.env.RANK === '1') throw new RangeError('boom before init'); setInterval(() => {}, 1000);`;
  const uncaught = await runLaunch({ nprocs: 2, command: [node, '-e', throws], outputRanks: [0] });
  assert.equal(uncaught.code, 1);
  assert.match(uncaught.stderr, /rank 1 \(pid \d+\) failed first: exit code 1 \(its last line on stderr, not shown: RangeError: boom before init\)/);
});

test('a failing rank stops the others, and nothing it started outlives the launcher', T, async () => {
  const command = [node, fixture('fail-rank.mjs'), '1', '3', 'grandchild'];
  const { code, stdout, stderr, ms } = await runLaunch({ nprocs: 3, command, graceMs: 3000 });
  assert.equal(code, 3);
  assert.ok(ms < 2500, `took ${ms} ms`);
  const lines = stderr.trim().split('\n');
  assert.match(lines.at(-1)!, /^a2av launch: rank 1 \(pid \d+\) failed first: exit code 3; stopped ranks 0, 2, still running then$/);
  assert.equal(lines.filter((l) => l.startsWith('a2av launch:')).length, 1, 'one line');
  for (const r of [0, 2]) {
    const pids = linesOf(stdout, r)[0]!.split(' ').slice(1).map(Number);
    assert.equal(pids.length, 2);
    for (const pid of pids) assert.ok(await gone(pid), `rank ${r} process ${pid} is gone`);
  }
});

async function orphaned(extra: string[]): Promise<void> {
  // The launcher in a process of its own, to be SIGKILLed: nothing of it can stop the ranks.
  const cli = fileURLToPath(new URL('../src/cli.js', import.meta.url));
  const launcher = spawn(node, [cli, 'launch', '-n', '2', '--', node, fixture('orphan-rank.mjs'), 'alloc', 'spin', ...extra], { stdio: ['ignore', 'pipe', 'pipe'] });
  let stdout = '';
  launcher.stdout.on('data', (chunk: Buffer) => (stdout += chunk));
  const pids: number[] = [];
  try {
    const said = (r: number, what: string) => linesOf(stdout, r).some((l) => l.startsWith(what));
    for (const until = Date.now() + 15_000; !(said(0, 'ready ') && said(1, 'ready ') && said(1, 'job ')); await new Promise((r) => setTimeout(r, 20))) {
      if (Date.now() > until) throw new Error(`the ranks never got ready; stdout:\n${stdout}`);
    }
    for (const r of [0, 1]) pids.push(...linesOf(stdout, r).find((l) => l.startsWith('ready '))!.split(' ').slice(1).map(Number));
    assert.equal(pids.length, 4, stdout);
    assert.ok(pids.every(alive), 'ranks and their children run');
    const [job, recordFile] = linesOf(stdout, 1).find((l) => l.startsWith('job '))!.split(' ').slice(1) as [string, string];
    const jobFiles = () => readdirSync('/dev/shm').filter((f) => f.startsWith(`a2av-${job}-`));
    // Rank 1 waits in allocSymmetric: its memory is made and named, for a rank 0 that never maps it.
    for (const until = Date.now() + 5000; !jobFiles().some((f) => f.startsWith(`a2av-${job}-r1-`)); await new Promise((r) => setTimeout(r, 20))) {
      if (Date.now() > until) throw new Error(`rank 1 made no shared memory; /dev/shm: ${jobFiles()}`);
    }
    assert.ok(existsSync(dirname(recordFile)), 'the launcher\'s folder of exit records is there');
    launcher.kill('SIGKILL');
    for (const pid of pids) assert.ok(await gone(pid, 10_000), `pid ${pid} (a rank or its child) outlived the SIGKILLed launcher: ${alive(pid) ? readFileSync(`/proc/${pid}/cmdline`, 'utf8') : 'gone'}; ${stdout}`);
    assert.deepEqual(jobFiles(), [], 'shared memory the job left in /dev/shm');
    assert.ok(!existsSync(dirname(recordFile)), `the launcher's folder ${dirname(recordFile)} is left`);
  } finally {
    killAll(launcher, pids);
  }
}

test('a SIGKILLed launcher leaves no rank running, nor its files: the ranks see its store go (from a thread of their own: one computes for good), stop their process groups and remove what it would have', { timeout: 20_000 }, () => orphaned([]));

test('a SIGKILLed launcher\'s ranks that handle SIGTERM (closing their communicator, and carrying on) are SIGKILLed after the grace, as the launcher would have', { timeout: 25_000 }, () => orphaned(['deaf']));

test('orphaned ranks give their process groups the launcher\'s own grace before SIGKILL', { timeout: 20_000 }, async () => {
  // launch() with a grace of 600 ms, in a process of its own to SIGKILL; ranks that shrug SIGTERM off.
  const options = { nprocs: 2, command: [node, fixture('orphan-rank.mjs'), 'deaf'], graceMs: 600 };
  const driver = spawn(node, [fixture('launch-driver.mjs'), JSON.stringify(options)], { stdio: ['ignore', 'pipe', 'ignore'] });
  let stdout = '';
  driver.stdout!.on('data', (chunk: Buffer) => (stdout += chunk));
  const pids: number[] = [];
  try {
    const ready = (r: number) => linesOf(stdout, r).find((l) => l.startsWith('ready '));
    for (const until = Date.now() + 15_000; !(ready(0) && ready(1)); await new Promise((r) => setTimeout(r, 20))) {
      if (Date.now() > until) throw new Error(`the ranks never got ready; stdout:\n${stdout}`);
    }
    for (const r of [0, 1]) pids.push(...ready(r)!.split(' ').slice(1).map(Number));
    driver.kill('SIGKILL');
    const killedAt = performance.now();
    for (const pid of pids) assert.ok(await gone(pid, 10_000), `pid ${pid} outlived the SIGKILLed launcher`);
    // The launcher's 600 ms, not the 5 s default, after the ranks saw it go.
    assert.ok(performance.now() - killedAt < 3500, `the ranks went ${Math.round(performance.now() - killedAt)} ms after the launcher`);
  } finally {
    killAll(driver, pids);
  }
});

test('a launcher SIGKILLed while its ranks wait in init(): they fail on its store and remove its folder of exit records', { timeout: 20_000 }, async () => {
  const cli = fileURLToPath(new URL('../src/cli.js', import.meta.url));
  const launcher = spawn(node, [cli, 'launch', '-n', '3', '--', node, fixture('init-wait-rank.mjs')], { stdio: ['ignore', 'pipe', 'pipe'] });
  let stdout = '';
  launcher.stdout.on('data', (chunk: Buffer) => (stdout += chunk));
  const pids: number[] = [];
  try {
    const said = (r: number) => linesOf(stdout, r).find((l) => l.startsWith('before init '));
    for (const until = Date.now() + 15_000; ![0, 1, 2].every(said); await new Promise((r) => setTimeout(r, 20))) {
      if (Date.now() > until) throw new Error(`the ranks never started; stdout:\n${stdout}`);
    }
    for (const r of [0, 1, 2]) pids.push(Number(said(r)!.split(' ')[2]));
    const folder = dirname(said(0)!.split(' ')[3]!);
    assert.ok(existsSync(folder));
    // Ranks 0 and 1 wait in init() for rank 2, which has not called it yet.
    await new Promise((r) => setTimeout(r, 1000));
    launcher.kill('SIGKILL');
    for (const pid of pids.slice(0, 2)) assert.ok(await gone(pid, 5000), `rank pid ${pid} still waits in init()`);
    assert.ok(!existsSync(folder), `the launcher's folder ${folder} is left`);
  } finally {
    killAll(launcher, pids);
  }
});

test('a rank that reaches init() after its launcher was SIGKILLed ends at once: the refused store is the launcher gone, not one still starting', { timeout: 20_000 }, async () => {
  const cli = fileURLToPath(new URL('../src/cli.js', import.meta.url));
  // The last rank calls init() 1.5 s after it starts, when its launcher is gone.
  const launcher = spawn(node, [cli, 'launch', '-n', '2', '--', node, fixture('init-wait-rank.mjs'), '1500'], { stdio: ['ignore', 'pipe', 'pipe'] });
  let stdout = '';
  launcher.stdout.on('data', (chunk: Buffer) => (stdout += chunk));
  const pids: number[] = [];
  try {
    const said = (r: number) => linesOf(stdout, r).find((l) => l.startsWith('before init '));
    for (const until = Date.now() + 15_000; ![0, 1].every(said); await new Promise((r) => setTimeout(r, 20))) {
      if (Date.now() > until) throw new Error(`the ranks never started; stdout:\n${stdout}`);
    }
    for (const r of [0, 1]) pids.push(Number(said(r)!.split(' ')[2]));
    launcher.kill('SIGKILL');
    const killed = Date.now();
    // Retrying the refused connection, it ran on orphaned for the set-up floor (10 s) after its init().
    assert.ok(await gone(pids[1]!, 1500 + 3000), `rank 1 still runs ${Date.now() - killed} ms after its launcher was killed`);
  } finally {
    killAll(launcher, pids);
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

for (const [signal, exitCode] of [['SIGTERM', 143], ['SIGINT', 130], ['SIGHUP', 129], ['SIGQUIT', 131]] as const) {
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

test('a signal in the half second after a rank failed does not hide the failure: the line and the exit code are the failure\'s', { timeout: 15_000 }, async () => {
  const options = { nprocs: 2, command: [node, fixture('fail-rank.mjs'), '1', '3'], graceMs: 1000 };
  const driver = spawn(node, [fixture('launch-driver.mjs'), JSON.stringify(options)], { stdio: ['ignore', 'pipe', 'pipe'] });
  let stderr = '';
  driver.stderr.on('data', (chunk: Buffer) => (stderr += chunk));
  let stdout = '';
  await new Promise<void>((resolve) =>
    driver.stdout.on('data', (chunk: Buffer) => {
      stdout += chunk;
      if (linesOf(stdout, 1).includes('failing')) resolve();
    }),
  );
  // Past rank 1's exit, well inside the 500 ms the launcher gives the others before it stops them.
  await new Promise((resolve) => setTimeout(resolve, 200));
  driver.kill('SIGTERM');
  const [code] = await once(driver, 'close');
  assert.equal(code, 3, stderr);
  assert.match(stderr, /^a2av launch: rank 1 \(pid \d+\) failed first: exit code 3; received SIGTERM; stopped rank 0, still running then\n$/);
});

for (const [when, where] of [['first', 'init\\(\\)'], ['second', 'its init\\(\\) #2']] as const) {
  test(`a rank that exits with status 0 without joining the ${when} init() its peers wait in: the job stops at once, naming it, not after their 60 s set-up wait`, { timeout: 20_000 }, async () => {
    // Those of the others that have joined by then are named (both, or the one that got there first).
    const { code, stdout, stderr, ms } = await runLaunch({ nprocs: 3, command: [node, fixture('leave-rank.mjs'), when] });
    assert.equal(code, 1, stderr);
    assert.match(stderr, new RegExp(`^a2av launch: rank 2 exited with status 0 without joining ${where}, where (rank [01]|ranks 0, 1) waited for it; stopped the job rather than let them wait out their set-up timeout\\n$`, 'm'));
    assert.ok(ms < 10_000, `took ${ms} ms`);
    for (const line of stdout.split('\n').filter((l) => /waiting \d+$/.test(l))) assert.ok(await gone(Number(line.split(' ').at(-1))), line);
  });
}

test('ranks that end one by one, each after its last init(), are not stopped', T, async () => {
  const { code, stderr } = await runLaunch({ nprocs: 3, command: [node, '-e', `import(${JSON.stringify(new URL('../src/world/init.js', import.meta.url).href)}).then(async ({ init }) => { const comm = await init({ backend: 'cpu' }); await comm.close(); await new Promise((r) => setTimeout(r, 300 * Number(process.env.RANK))); })`] });
  assert.equal(code, 0, stderr);
  assert.equal(stderr, '');
});

test('a failed rank whose peers had all ended on their own says nothing of stopping them', T, async () => {
  const { code, stderr } = await runLaunch({ nprocs: 3, command: [node, '-e', 'if (process.env.RANK === "2") setTimeout(() => process.exit(4), 300)'] });
  assert.equal(code, 4);
  assert.match(stderr, /^a2av launch: rank 2 \(pid \d+\) failed first: exit code 4\n$/);
});

test('bad options throw UsageError before anything starts', T, async () => {
  const command = [node, '-e', ''];
  await assert.rejects(launch({ nprocs: 0, command }), UsageError);
  await assert.rejects(launch({ nprocs: 1, command: [] }), UsageError);
  await assert.rejects(launch({ nprocs: 1, nnodes: 2, nodeRank: 2, masterPort: 29500, command }), UsageError);
  await assert.rejects(launch({ nprocs: 1, nnodes: 2, command }), /explicit masterPort/);
  await assert.rejects(launch({ nprocs: 1, nnodes: 2, masterPort: 29500, command, env: { A2AV_STORE_TOKEN: undefined } }), /A2AV_STORE_TOKEN/);
});

describe('the nodes of a job meet before their ranks start (two launchers on this host as two nodes)', () => {
  const command = [node, '-e', 'console.log(process.env.RANK + "/" + process.env.WORLD_SIZE)'];
  const nodes = async () => {
    const probe = createServer().listen(0, '127.0.0.1');
    await once(probe, 'listening');
    const masterPort = (probe.address() as { port: number }).port;
    probe.close();
    return { nnodes: 2, masterPort, masterAddr: '127.0.0.1', env: { A2AV_STORE_TOKEN: randomBytes(16).toString('hex') }, command, joinTimeoutMs: 3000 };
  };

  test('with the same -n they run the job, ranks numbered across them', T, async () => {
    const job = await nodes();
    const [n0, n1] = await Promise.all([0, 1].map((nodeRank) => runLaunch({ ...job, nprocs: 2, nodeRank })));
    assert.equal(n0!.code, 0, n0!.stderr);
    assert.equal(n1!.code, 0, n1!.stderr);
    assert.deepEqual([0, 1, 2, 3].map((r) => linesOf(r < 2 ? n0!.stdout : n1!.stdout, r)), [['0/4'], ['1/4'], ['2/4'], ['3/4']]);
  });

  test('a node whose launcher left while it waited can be started again; another --nnodes is refused', { timeout: 30_000 }, async () => {
    const job = { ...(await nodes()), nnodes: 3, joinTimeoutMs: 20_000 };
    const cli = fileURLToPath(new URL('../src/cli.js', import.meta.url));
    const node0 = runLaunch({ ...job, nprocs: 1, nodeRank: 0 });
    // Node 1 joins, waits for node 2, and is interrupted; then it is started again, and node 2 comes.
    const first = spawn(node, [cli, 'launch', '-n', '1', '--nnodes', '3', '--node-rank', '1', '--master-addr', '127.0.0.1', '--master-port', String(job.masterPort), '--', ...command],
      { env: { ...process.env, ...job.env }, stdio: 'ignore' });
    await new Promise((r) => setTimeout(r, 1500));
    first.kill('SIGINT');
    await once(first, 'exit');
    const [n0, n1, n2] = await Promise.all([node0, runLaunch({ ...job, nprocs: 1, nodeRank: 1 }), runLaunch({ ...job, nprocs: 1, nodeRank: 2 })]);
    for (const n of [n0, n1, n2]) assert.equal(n.code, 0, n.stderr);
    assert.deepEqual(linesOf(n1.stdout, 1), ['1/3']);
    // --nnodes 2 on node 0, 3 on node 1: named, not a wait for a node 2 that node 0 does not expect.
    const other = await nodes();
    const outcomes = await Promise.all([2, 3].map((nnodes, nodeRank) => runLaunch({ ...other, nnodes, nprocs: 1, nodeRank }).then((r) => r.stdout, (e: Error) => e)));
    for (const o of outcomes) assert.ok(o instanceof UsageError && /^launch: node [01] was started with --nnodes [23] and node [01] with [23]: every node must give the same$/.test(o.message), String(o));
  });

  test("node 0's store stays up, after its ranks end, for the other nodes' ranks", T, async () => {
    const job = { ...(await nodes()), command: [node, fixture('late-store-rank.mjs')] };
    const [n0, n1] = await Promise.all([0, 1].map((nodeRank) => runLaunch({ ...job, nprocs: 1, nodeRank })));
    assert.equal(n0!.code, 0, n0!.stderr);
    assert.equal(n1!.code, 0, n1!.stderr);
    assert.deepEqual(linesOf(n1!.stdout, 1), ['from node 0'], 'rank 1 read the store 1.5 s after rank 0 had ended');
  });

  test('with another -n on each, both refuse before any rank starts', T, async () => {
    const job = await nodes();
    const outcomes = await Promise.all([[0, 2], [1, 1]].map(([nodeRank, nprocs]) => runLaunch({ ...job, nprocs: nprocs!, nodeRank: nodeRank! }).then((r) => r.stdout, (e: Error) => e)));
    for (const o of outcomes) assert.ok(o instanceof UsageError && /^launch: node [01] runs [12] ranks and node [01] [12]: every node must run as many/.test(o.message), String(o));
  });

  test('a node rank started twice is refused; a node alone is told which node did not join', T, async () => {
    // The job's ranks run for 2 s, while a second node 1 tries to join.
    const job = { ...(await nodes()), command: [node, '-e', 'setTimeout(() => {}, 2000)'] };
    const running = Promise.all([0, 1].map((nodeRank) => runLaunch({ ...job, nprocs: 1, nodeRank })));
    await new Promise((r) => setTimeout(r, 700));
    await assert.rejects(runLaunch({ ...job, nprocs: 1, nodeRank: 1 }), /^UsageError: launch: node 1 has joined this job already: another a2av launch of --node-rank 1 is running$/);
    for (const n of await running) assert.equal(n.code, 0, n.stderr);
    // Node 1 alone: node 0's launcher never answers.
    await assert.rejects(runLaunch({ ...(await nodes()), nprocs: 1, nodeRank: 1, joinTimeoutMs: 800 }), /^UsageError: launch: node 0's a2av launch did not answer at 127\.0\.0\.1:\d+ within 1 s/);
    // Node 0 alone: node 1 never joins.
    await assert.rejects(runLaunch({ ...(await nodes()), nprocs: 1, nodeRank: 0, joinTimeoutMs: 800 }), /^UsageError: launch: node 1 of 2 did not join within 1 s/);
  });
});

test("bad options are named by a2av launch's flags when it gave them, by the options' names otherwise", T, async () => {
  const command = [node, '-e', ''];
  const flags = { command, namesInErrors: 'flags' } as const;
  await assert.rejects(launch({ nprocs: 2, command, outputRanks: [5] }), /^UsageError: launch: outputRanks must list ranks in 0\.\.1, got 5$/);
  await assert.rejects(launch({ ...flags, nprocs: 2, outputRanks: [5] }), /^UsageError: launch: --output-ranks must list ranks in 0\.\.1, got 5$/);
  await assert.rejects(launch({ ...flags, nprocs: 1, masterPort: 99999 }), /^UsageError: launch: --master-port must be an integer in 0\.\.65535, got 99999$/);
  await assert.rejects(launch({ ...flags, nprocs: 1, nodeRank: 1 }), /^UsageError: launch: --node-rank must be below --nnodes \(1\), got 1$/);
  await assert.rejects(launch({ ...flags, nprocs: 1, nnodes: 2 }), /explicit --master-port,/);
  await assert.rejects(launch({ ...flags, nprocs: 1, masterAddr: '' }), /^UsageError: launch: --master-addr must be/);

  // The command passes them on: one line naming the flag, exit status 1, nothing started.
  const cli = fileURLToPath(new URL('../src/cli.js', import.meta.url));
  const run = spawn(node, [cli, 'launch', '-n', '2', '--output-ranks', '5', '--', node, '-e', ''], { stdio: ['ignore', 'pipe', 'pipe'] });
  let stderr = '';
  run.stderr.on('data', (d: Buffer) => (stderr += d));
  const [code] = await once(run, 'exit');
  assert.equal(code, 1);
  assert.equal(stderr, 'a2av: launch: --output-ranks must list ranks in 0..1, got 5\n');
  // An empty item is no rank (Number('') is 0), and a rank named twice is a slip.
  for (const [list, said] of [
    ['', /item 1 of '' is empty/],
    ['0,', /item 2 of '0,' is empty/],
    ['0,,1', /item 2 of '0,,1' is empty: give rank numbers separated by single commas/],
    ['a', /not a list of ranks: 'a'/],
    ['0,0', /rank 0 is named twice/],
  ] as const) {
    const bad = spawn(node, [cli, 'launch', '-n', '2', '--output-ranks', list, '--', node, '-e', ''], { stdio: ['ignore', 'pipe', 'pipe'] });
    let err = '';
    bad.stderr.on('data', (d: Buffer) => (err += d));
    const [status] = await once(bad, 'exit');
    assert.equal(status, 1, `--output-ranks '${list}'`);
    assert.match(err, said);
  }
});

test('a2av launch inside a launched rank is refused by name: it would start jobs within the job', { timeout: 20_000 }, async () => {
  const cli = fileURLToPath(new URL('../src/cli.js', import.meta.url));
  const run = spawn(node, [cli, 'launch', '-n', '2', '--', node, cli, 'launch', '-n', '2', '--', node, '-e', 'console.log("inner rank ran")'], { stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  run.stdout.on('data', (d: Buffer) => (out += d));
  run.stderr.on('data', (d: Buffer) => (out += d));
  const [code] = await once(run, 'exit');
  assert.equal(code, 1, out);
  assert.match(out, /\[rank [01]\] a2av: launch: this process is rank [01] of a job that a2av launch started \(A2AV_JOB_ID=\w+\): a launch here would start jobs within that job/);
  assert.doesNotMatch(out, /inner rank ran/);
});

test('eight ranks print nothing but their own lines (no listener-leak warning from the shared stdout and stderr)', T, async () => {
  const cli = fileURLToPath(new URL('../src/cli.js', import.meta.url));
  const run = spawn(node, [cli, 'launch', '-n', '8', '--', node, '-e', 'console.log("hi"); console.error("err")'], { stdio: ['ignore', 'pipe', 'pipe'] });
  let [stdout, stderr] = ['', ''];
  run.stdout.on('data', (d: Buffer) => (stdout += d));
  run.stderr.on('data', (d: Buffer) => (stderr += d));
  const [code] = await once(run, 'exit');
  assert.equal(code, 0, stderr);
  assert.deepEqual(stdout.trim().split('\n').sort(), Array.from({ length: 8 }, (_, r) => `[rank ${r}] hi`).sort());
  assert.deepEqual(stderr.trim().split('\n').sort(), Array.from({ length: 8 }, (_, r) => `[rank ${r}] err`).sort());
});

/** The pid a hang-rank.mjs rank printed in its "ready <pid>" line. */
const readyPid = (stdout: string, rank: number) => Number(linesOf(stdout, rank).find((l) => l.startsWith('ready '))!.split(' ')[1]);

test('a rank that stops answering inside a collective is named, not the rank that timed out first', { timeout: 20_000 }, async () => {
  // The survivors ignore SIGTERM so that both live to time out (and record it) after the first exits.
  const command = [node, fixture('hang-rank.mjs'), '1000', '1', 'survivors-ignore-sigterm'];
  const { code, stdout, stderr, ms } = await runLaunch({ nprocs: 3, command, graceMs: 1000 });
  assert.equal(code, 1, stderr);
  const lines = stderr.trim().split('\n').filter((l) => l.startsWith('a2av launch:'));
  assert.equal(lines.length, 1, stderr);
  assert.match(lines[0]!, /^a2av launch: rank 1 stopped answering \(named by ranks 0, 2 in TimeoutError\); rank [02] \(pid \d+\) failed first: exit code 1; stopped (rank 1|ranks 0, 1|ranks 1, 2), still running then$/);
  assert.ok(await gone(readyPid(stdout, 1)), 'the hung rank, deaf to SIGTERM, was killed');
  assert.ok(ms < 10_000, `took ${ms} ms`);
});

test('a hung rank is named even when the launcher stops the other survivors before they time out', { timeout: 20_000 }, async () => {
  const command = [node, fixture('hang-rank.mjs'), '1000', '1'];
  const { code, stdout, stderr } = await runLaunch({ nprocs: 3, command, graceMs: 300 });
  assert.equal(code, 1, stderr);
  assert.match(stderr, /\na2av launch: rank 1 stopped answering \(named by (rank [02]|ranks 0, 2) in TimeoutError\); rank [02] \(pid \d+\) failed first: exit code 1; stopped (rank 1|ranks 0, 1|ranks 1, 2), still running then\n$/);
  assert.ok(await gone(readyPid(stdout, 1)));
});

test("under torchrun's variables a rank that times out leaves torchrun's error file, naming the hung rank", { timeout: 20_000 }, async () => {
  // torchrun serves no a2av store: the test does, and starts the ranks as torchrun would.
  const token = randomBytes(16).toString('hex');
  const server = await TcpStoreServer.listen({ token });
  const dir = mkdtempSync(join(tmpdir(), 'a2av-test-'));
  const errorFile = (r: number) => join(dir, `error-${r}.json`);
  let stderr = '';
  const ranks = [0, 1, 2].map((r) => {
    const torchrun = { RANK: `${r}`, WORLD_SIZE: '3', LOCAL_RANK: `${r}`, LOCAL_WORLD_SIZE: '3', MASTER_ADDR: '127.0.0.1', MASTER_PORT: `${server.port}` };
    const env = { ...process.env, ...torchrun, A2AV_STORE_TOKEN: token, TORCHELASTIC_ERROR_FILE: errorFile(r) };
    const child = spawn(node, [fixture('hang-rank.mjs'), '1000', '1'], { env, stdio: ['ignore', 'ignore', 'pipe'] });
    child.stderr.on('data', (chunk: Buffer) => (stderr += chunk));
    return child;
  });
  try {
    const codes = await Promise.all([0, 2].map(async (r) => (await once(ranks[r]!, 'exit'))[0]));
    assert.deepEqual(codes, [1, 1], stderr);
    for (const r of [0, 2]) {
      assert.ok(readExitRecord(errorFile(r)), `rank ${r} left a record; stderr:\n${stderr}`);
      const data = JSON.parse(readFileSync(errorFile(r), 'utf8'));
      assert.match(data.message.message, new RegExp(`^TimeoutError: rank ${r}: timed out after 1000 ms waiting for rank 1 `));
      assert.match(data.message.extraInfo.py_callstack, /^TimeoutError: [^\n]*\n +at /);
      assert.match(data.message.extraInfo.timestamp, /^\d+$/);
      assert.equal(data.a2av.code, 'A2AV_TIMEOUT');
      assert.deepEqual(data.a2av.timeout, { rank: r, missingRank: 1, timeoutMs: 1000 });
    }
    assert.equal(readExitRecord(errorFile(1)), undefined, 'the hung rank wrote nothing');
    const records = new Map([0, 2].map((r) => [r, readExitRecord(errorFile(r))!]));
    assert.equal(describeTimeouts(records), 'rank 1 stopped answering (named by ranks 0, 2 in TimeoutError)');
  } finally {
    ranks.forEach((child) => child.kill('SIGKILL'));
    rmSync(dir, { recursive: true, force: true });
    await server.close();
  }
});

test('the report lists every rank the survivors named, most-named first, and the failed rank\'s own error', () => {
  const timedOut = (missingRank: number): ExitRecord => ({ name: 'TimeoutError', code: 'A2AV_TIMEOUT', message: '…', missingRank });
  assert.equal(describeTimeouts(new Map()), undefined);
  assert.equal(describeTimeouts(new Map([[0, timedOut(3)]])), 'rank 3 stopped answering (named by rank 0 in TimeoutError)');
  const mixed = new Map([[5, timedOut(1)], [0, timedOut(3)], [2, timedOut(1)], [4, timedOut(-1)], [6, { name: 'UsageError', code: 'A2AV_USAGE', message: 'bad', missingRank: undefined }]]);
  assert.equal(
    describeTimeouts(mixed),
    'ranks 1, 3 stopped answering (named in TimeoutError: rank 1 by ranks 2, 5; rank 3 by rank 0); rank 4 timed out waiting for a peer they could not name (TimeoutError)',
  );
  // A named rank that had exited with status 0 left while the others waited: not "stopped answering".
  assert.equal(describeTimeouts(new Map([[0, timedOut(1)]]), new Set([1])), 'rank 1 exited with status 0 while rank 0 still waited for it (named in TimeoutError)');
  assert.equal(
    describeTimeouts(mixed, new Set([3])),
    'rank 3 exited with status 0 while rank 0 still waited for it (named in TimeoutError); rank 1 stopped answering (named by ranks 2, 5 in TimeoutError); rank 4 timed out waiting for a peer they could not name (TimeoutError)',
  );
  // The rank that failed first with its own error did not stop answering: its waiters are said after its error.
  assert.equal(describeTimeouts(mixed, new Set(), 1), 'rank 3 stopped answering (named by rank 0 in TimeoutError); rank 4 timed out waiting for a peer they could not name (TimeoutError)');
  assert.equal(waitedFor(mixed, 1), 'ranks 2, 5 timed out waiting for it (TimeoutError)');
  assert.equal(waitedFor(mixed, 6), undefined);
  assert.equal(describeError(mixed.get(6)), 'UsageError: bad');
  assert.equal(describeError(mixed.get(5)), undefined, 'a timeout is told by describeTimeouts');
  assert.equal(describeError({ name: undefined, code: undefined, message: 'ValueError: x', missingRank: undefined }), 'ValueError: x');
});

test('exit records: a timeout behind a later CommAbortedError still names the rank; torch\'s format is read; a garbled or oversized file is ignored', () => {
  const dir = mkdtempSync(join(tmpdir(), 'a2av-test-'));
  try {
    const aborted = new CommAbortedError(2, { cause: new TimeoutError(2, 5, 100, 'allToAllV') });
    recordExitError(aborted, join(dir, 'aborted.json'));
    assert.deepEqual(readExitRecord(join(dir, 'aborted.json')), { name: 'CommAbortedError', code: 'A2AV_ABORTED', message: aborted.message, missingRank: 5 });
    // A rank that gave up on a peer that had failed first (it was late): the record names nobody,
    // so the launcher does not report that peer as the one that stopped answering.
    const late = new TimeoutError(3, 0, 300, 'allToAllV on lane 0', { waitedMs: 5, peerFailed: true });
    recordExitError(late, join(dir, 'late.json'));
    assert.deepEqual(readExitRecord(join(dir, 'late.json')), { name: 'TimeoutError', code: 'A2AV_TIMEOUT', message: late.message, missingRank: undefined });
    recordExitError('a string', join(dir, 'string.json'));
    assert.equal(readExitRecord(join(dir, 'string.json'))?.message, 'non-error thrown: a string');
    const file = (name: string, text: string) => (writeFileSync(join(dir, name), text), join(dir, name));
    const torch = { message: { message: 'ValueError: bad input\nmore', extraInfo: { py_callstack: 'Traceback…', timestamp: '1' } } };
    assert.deepEqual(readExitRecord(file('torch.json', JSON.stringify(torch))), { name: undefined, code: undefined, message: 'ValueError: bad input', missingRank: undefined });
    assert.equal(readExitRecord(file('cut.json', '{"message": {"mess')), undefined);
    assert.equal(readExitRecord(file('big.json', JSON.stringify({ message: 'x'.repeat(2 << 20) }))), undefined);
    assert.equal(readExitRecord(join(dir, 'absent.json')), undefined);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('an output sink that fails does not hold the job: the ranks run to their end', T, async () => {
  const { Writable } = await import('node:stream');
  const failing = new Writable({ write: (_chunk, _enc, done) => done(Object.assign(new Error('no space'), { code: 'ENOSPC' })) });
  const errors: Error[] = [];
  failing.on('error', (e) => errors.push(e));
  // Far more than a pipe holds (64 KiB): the rank blocks on its stdout if nobody reads it.
  const script = `process.stdout.write('x'.repeat(1 << 20) + '\\n'); process.stdout.write('done\\n');`;
  const sink = new Writable({ write: (_c, _e, done) => done() });
  const code = await launch({ nprocs: 2, command: [node, '-e', script], stdout: failing, stderr: sink });
  assert.equal(code, 0);
  assert.ok(errors.length >= 1, 'the sink failed');
});
