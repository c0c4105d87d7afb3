// init() and the cpu backend's process memory outside the launcher: clear errors when not launched,
// when the store cannot be reached or goes away, and for shared-memory failures.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { once } from 'node:events';
import { createServer } from 'node:net';
import { mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { createComm } from '../src/backends/create.js';
import { ProcessMemory } from '../src/backends/cpu/process-memory.js';
import { SharedMemoryError, StoreError, TimeoutError, UsageError } from '../src/errors.js';
import { rankEnv } from '../src/world/env.js';
import { init } from '../src/world/init.js';
import { START_WAIT_FLOOR_MS } from '../src/world/set-up-waits.js';
import { SHM_DIR, shmPrefix } from '../src/world/shm-files.js';
import { TcpStoreClient, TcpStoreServer } from '../src/world/tcp-store.js';

const T = { timeout: 15_000 };
const rankProgram = fileURLToPath(new URL('./fixtures/process-rank.js', import.meta.url));
const a2avShmFiles = () => readdirSync(SHM_DIR).filter((name) => name.startsWith('a2av-'));
/**
 * A job id of a test's own and that job's files in /dev/shm: other test files run beside this one
 * and make files of their own, so "files that were not there before" can be theirs.
 */
function ownJob(): { id: string; files: () => string[] } {
  const id = randomBytes(8).toString('hex');
  return { id, files: () => readdirSync(SHM_DIR).filter((name) => name.startsWith(shmPrefix(id))) };
}
/** A store, two clients of it (two ranks' connections), a job id of the test's own, and Rendezvous: ranks set up by hand. */
async function byHand() {
  const token = randomBytes(16).toString('hex');
  const server = await TcpStoreServer.listen({ token });
  const clients = await Promise.all([0, 1].map(() => TcpStoreClient.connect({ host: '127.0.0.1', port: server.port, token })));
  const { Rendezvous } = await import('../src/backends/cpu/rendezvous.js');
  return { server, clients, job: ownJob(), Rendezvous };
}

/** `make()` with A2AV_JOB_ID set to `id` in this process (ProcessMemory names its files by it when made), until it settles. */
function madeInJob<T>(id: string, make: () => T): T {
  const was = process.env.A2AV_JOB_ID;
  const restore = () => {
    if (was === undefined) delete process.env.A2AV_JOB_ID;
    else process.env.A2AV_JOB_ID = was;
  };
  process.env.A2AV_JOB_ID = id;
  let made: T;
  try {
    made = make();
  } catch (err) {
    restore();
    throw err;
  }
  if (made instanceof Promise) return made.finally(restore) as T;
  restore();
  return made;
}

/** Runs the rank fixture's `program` (default: one exchange) with `env`; resolves with its one JSON line and when it exited (Date.now()). */
async function rankProcess(env: Record<string, string>, timeoutMs: number, program = 'exchange', arg: object = { seed: 1, calls: 1, budget: 64 }) {
  const child = spawn(process.execPath, [rankProgram, program, JSON.stringify(arg), String(timeoutMs)], {
    env: { ...process.env, ...env },
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  let out = '';
  child.stdout.on('data', (chunk: Buffer) => (out += chunk.toString()));
  const started = performance.now();
  const [code] = (await once(child, 'exit')) as [number];
  return { code, ms: performance.now() - started, exitedAt: Date.now(), line: JSON.parse(out.trim().split('\n').pop()!) };
}

test('init() outside a launcher is a UsageError that says how to start ranks', T, async (t) => {
  if (rankEnv() !== undefined) return t.skip('this test process is itself a launched rank');
  await assert.rejects(init({ backend: 'cpu' }), (err: Error) => err instanceof UsageError && /a2av launch/.test(err.message));
});

test('a store that cannot be reached ends init() with a StoreError after the set-up floor, not a hang', { timeout: 30_000 }, async () => {
  const probe = createServer().listen(0, '127.0.0.1');
  await once(probe, 'listening');
  const port = (probe.address() as { port: number }).port;
  probe.close(); // nothing listens there now
  const env = { RANK: '0', WORLD_SIZE: '1', MASTER_ADDR: '127.0.0.1', MASTER_PORT: String(port), A2AV_STORE_TOKEN: 'x'.repeat(16) };
  const { code, ms, line } = await rankProcess(env, 800);
  assert.equal(code, 1);
  assert.equal(line.error.code, 'A2AV_STORE');
  assert.equal(line.error.reason, 'unreachable');
  assert.match(line.error.message, /cannot reach the store at 127\.0\.0\.1:\d+ after 10000 ms/);
  // Retried for the set-up floor (a launcher on another node may not listen yet), not for ever.
  assert.ok(ms >= START_WAIT_FLOOR_MS && ms < START_WAIT_FLOOR_MS + 8000, `took ${ms} ms`);
});

/** A port nothing listens on now. */
async function freePort(): Promise<number> {
  const probe = createServer().listen(0, '127.0.0.1');
  await once(probe, 'listening');
  const port = (probe.address() as { port: number }).port;
  probe.close();
  await once(probe, 'close');
  return port;
}

test('ranks started without a2av launch (torchrun\'s, Slurm\'s, Open MPI\'s variables) meet at A2AV_STORE_PORT, served by rank 0', T, async () => {
  const [storeAt, unused] = [await freePort(), await freePort()];
  const token = randomBytes(16).toString('hex');
  const W = 3;
  const common = { WORLD_SIZE: String(W), LOCAL_WORLD_SIZE: String(W), MASTER_ADDR: '127.0.0.1', MASTER_PORT: String(unused), A2AV_STORE_PORT: String(storeAt), A2AV_STORE_TOKEN: token };
  // Rank 0 last: the others retry until its store is up.
  const ranks = [2, 1, 0].map((r) => rankProcess({ ...common, RANK: String(r), LOCAL_RANK: String(r) }, 10_000));
  const done = await Promise.all(ranks);
  for (const { code, line } of done) {
    assert.equal(code, 0, JSON.stringify(line));
    assert.ok(line.result > 0, JSON.stringify(line));
  }
  assert.deepEqual(done.map((d) => d.line.rank).sort(), [0, 1, 2]);
});

test('with a timeoutMs shorter than rank 0\'s start, the others wait for its store at A2AV_STORE_PORT (set-up waits have a floor)', T, async () => {
  const [storeAt, unused] = [await freePort(), await freePort()];
  const token = randomBytes(16).toString('hex');
  const timeoutMs = 1000;
  const common = { WORLD_SIZE: '2', LOCAL_WORLD_SIZE: '2', MASTER_ADDR: '127.0.0.1', MASTER_PORT: String(unused), A2AV_STORE_PORT: String(storeAt), A2AV_STORE_TOKEN: token };
  const rank1 = rankProcess({ ...common, RANK: '1', LOCAL_RANK: '1' }, timeoutMs);
  await new Promise((resolve) => setTimeout(resolve, 3 * timeoutMs));
  const rank0 = rankProcess({ ...common, RANK: '0', LOCAL_RANK: '0' }, timeoutMs);
  for (const { code, line } of await Promise.all([rank0, rank1])) {
    assert.equal(code, 0, JSON.stringify(line));
    assert.ok(line.result > 0, JSON.stringify(line));
  }
});

test('a timeoutMs of 1 ms bounds no store request at set-up: connecting, authenticating and the pads all take the floor', T, async () => {
  const [storeAt, unused] = [await freePort(), await freePort()];
  const token = randomBytes(16).toString('hex');
  const W = 4;
  const common = { WORLD_SIZE: String(W), LOCAL_WORLD_SIZE: String(W), MASTER_ADDR: '127.0.0.1', MASTER_PORT: String(unused), A2AV_STORE_PORT: String(storeAt), A2AV_STORE_TOKEN: token };
  const done = await Promise.all([0, 1, 2, 3].map((r) => rankProcess({ ...common, RANK: String(r), LOCAL_RANK: String(r) }, 1, 'leavesLate', { late: -1, ms: 0 })));
  for (const { code, line } of done) assert.equal(code, 0, JSON.stringify(line));
});

test('a MoE group made under a timeoutMs of 1 ms: its ranks compare their options with the set-up floor, not a lane\'s timeout', T, async () => {
  const [storeAt, unused] = [await freePort(), await freePort()];
  const token = randomBytes(16).toString('hex');
  const W = 4;
  const common = { WORLD_SIZE: String(W), LOCAL_WORLD_SIZE: String(W), MASTER_ADDR: '127.0.0.1', MASTER_PORT: String(unused), A2AV_STORE_PORT: String(storeAt), A2AV_STORE_TOKEN: token };
  const done = await Promise.all([0, 1, 2, 3].map((r) => rankProcess({ ...common, RANK: String(r), LOCAL_RANK: String(r) }, 1, 'moeGroupOnly', {})));
  for (const { code, line } of done) assert.equal(code, 0, JSON.stringify(line));
});

test('ranks started with other lanes, timeouts or world sizes are all refused with the same account, and rank 0\'s store outlasts their refusals', { timeout: 40_000 }, async () => {
  const floorish = START_WAIT_FLOOR_MS / 2;
  for (const [what, odd, message] of [
    ['lanes', { A2AV_TEST_LANES: '1' }, /^rank \d: init\(\): ranks disagree on lanes: 2 on ranks 0, 2; 1 on rank 1; every rank must be started with the same$/],
    ['timeoutMs', {}, /^rank \d: init\(\): ranks disagree on timeoutMs: 2000 on ranks 0, 2; 3000 on rank 1; every rank/],
    ['world size', { WORLD_SIZE: '2', LOCAL_WORLD_SIZE: '2' }, /^rank \d: init\(\): ranks disagree on the world size \(WORLD_SIZE or the launcher's\): [23] here, [23] on rank [01]; every rank/],
  ] as const) {
    const [storeAt, unused] = [await freePort(), await freePort()];
    const token = randomBytes(16).toString('hex');
    const common = { WORLD_SIZE: '3', LOCAL_WORLD_SIZE: '3', MASTER_ADDR: '127.0.0.1', MASTER_PORT: String(unused), A2AV_STORE_PORT: String(storeAt), A2AV_STORE_TOKEN: token };
    // Rank 1 is the odd one; rank 0, which serves the store, starts last, as it may under any launcher.
    const started = performance.now();
    const done = await Promise.all([2, 1, 0].map((r) => rankProcess({ ...common, RANK: String(r), LOCAL_RANK: String(r), ...(r === 1 ? odd : {}) }, r === 1 && what === 'timeoutMs' ? 3000 : 2000, 'leavesLate', { late: -1, ms: 0 })));
    for (const { code, line } of done) {
      assert.equal(code, 1, `${what}: ${JSON.stringify(line)}`);
      assert.equal(line.error?.name, 'UsageError', `${what}: ${JSON.stringify(line)}`);
      assert.match(line.error.message, message);
    }
    // No rank waited out a floor: each refused as soon as it had read what it needed.
    assert.ok(performance.now() - started < floorish, `${what}: took ${Math.round(performance.now() - started)} ms`);
  }
});

test('rank 0 serving the store does not wait in close() for a peer that exited without closing: the store sees its connection end', { timeout: 30_000 }, async () => {
  const [storeAt, unused] = [await freePort(), await freePort()];
  const token = randomBytes(16).toString('hex');
  const common = { WORLD_SIZE: '3', LOCAL_WORLD_SIZE: '3', MASTER_ADDR: '127.0.0.1', MASTER_PORT: String(unused), A2AV_STORE_PORT: String(storeAt), A2AV_STORE_TOKEN: token };
  // Rank 2 exits (process.exit) right after init(); ranks 0 and 1 close as usual.
  const started = performance.now();
  const done = await Promise.all(['0', '1', '2'].map((r) => rankProcess({ ...common, RANK: r, LOCAL_RANK: r }, 1000, 'exitsWithoutClose', { leaver: 2 }).catch(() => undefined)));
  assert.equal(done[0]?.code, 0, JSON.stringify(done[0]?.line));
  assert.equal(done[1]?.code, 0, JSON.stringify(done[1]?.line));
  // Well under the 10 s set-up floor rank 0's close() waited for rank 2's word before.
  assert.ok(performance.now() - started < START_WAIT_FLOOR_MS - 3000, `took ${Math.round(performance.now() - started)} ms`);
});

test('a rank that never starts is named by every rank, also by those that reached set-up after rank 0, which serves the store', { timeout: 40_000 }, async () => {
  const [storeAt, unused] = [await freePort(), await freePort()];
  const token = randomBytes(16).toString('hex');
  const common = { WORLD_SIZE: '3', LOCAL_WORLD_SIZE: '3', MASTER_ADDR: '127.0.0.1', MASTER_PORT: String(unused), A2AV_STORE_PORT: String(storeAt), A2AV_STORE_TOKEN: token };
  // Rank 2 never comes. Rank 1 starts a second after rank 0: its set-up deadline is later, and it
  // still waits on rank 0's store when rank 0's own wait ends.
  const rank0 = rankProcess({ ...common, RANK: '0', LOCAL_RANK: '0' }, 1000);
  await new Promise((resolve) => setTimeout(resolve, 1000));
  const rank1 = rankProcess({ ...common, RANK: '1', LOCAL_RANK: '1' }, 1000);
  for (const { code, line } of await Promise.all([rank0, rank1])) {
    assert.equal(code, 1, JSON.stringify(line));
    assert.equal(line.error.name, 'TimeoutError', JSON.stringify(line));
    assert.equal(line.error.missingRank, 2, JSON.stringify(line));
  }
});

test('a second process started as the same rank is refused by name; the job goes on with the first', { timeout: 30_000 }, async () => {
  const [storeAt, unused] = [await freePort(), await freePort()];
  const token = randomBytes(16).toString('hex');
  const common = { WORLD_SIZE: '2', LOCAL_WORLD_SIZE: '2', MASTER_ADDR: '127.0.0.1', MASTER_PORT: String(unused), A2AV_STORE_PORT: String(storeAt), A2AV_STORE_TOKEN: token };
  // Rank 0 keeps the job (and its store) up 3 s, so the later of the two rank 1s meets it too.
  const done = await Promise.all(['0', '1', '1'].map((r) => rankProcess({ ...common, RANK: r, LOCAL_RANK: r }, 5000, 'leavesLate', { late: 0, ms: 3000 })));
  const refused = done.filter((d) => d.code !== 0);
  assert.equal(refused.length, 1, JSON.stringify(done.map((d) => d.line)));
  assert.equal(refused[0]!.line.error.name, "UsageError", JSON.stringify(refused[0]!.line));
  assert.match(refused[0]!.line.error.message, /^rank 1: init\(\): another process at this store was started as rank 1 too/);
  for (const d of done.filter((x) => x.code === 0)) assert.ok(d.line.result > 0, JSON.stringify(d.line));
});

test('rank 0 keeps its store at A2AV_STORE_PORT up past a short timeoutMs until the others have closed (that wait has the set-up floor too)', T, async () => {
  const [storeAt, unused] = [await freePort(), await freePort()];
  const token = randomBytes(16).toString('hex');
  const timeoutMs = 200;
  const common = { WORLD_SIZE: '2', LOCAL_WORLD_SIZE: '2', MASTER_ADDR: '127.0.0.1', MASTER_PORT: String(unused), A2AV_STORE_PORT: String(storeAt), A2AV_STORE_TOKEN: token };
  const arg = { late: 1, ms: 10 * timeoutMs };
  const [rank0, rank1] = await Promise.all(['0', '1'].map((r) => rankProcess({ ...common, RANK: r, LOCAL_RANK: r }, timeoutMs, 'leavesLate', arg)));
  for (const { code, line } of [rank0, rank1]) assert.equal(code, 0, JSON.stringify(line));
  // Rank 1 closes after its program returned (its result: when it did); rank 0's store waited for that.
  assert.ok(rank0!.exitedAt >= rank1!.line.result, `rank 0 exited ${rank1!.line.result - rank0!.exitedAt} ms before rank 1's program returned`);
});

/**
 * Two ranks by hand at A2AV_STORE_PORT; rank `victim` stops itself (SIGSTOP) before its fourth call,
 * hung, its store connection open. The other's call times out naming it, then the other closes:
 * its outcome, and how long it ran.
 */
async function survivorOfHung(victim: 0 | 1) {
  const [storeAt, unused] = [await freePort(), await freePort()];
  const token = randomBytes(16).toString('hex');
  const common = { WORLD_SIZE: '2', LOCAL_WORLD_SIZE: '2', MASTER_ADDR: '127.0.0.1', MASTER_PORT: String(unused), A2AV_STORE_PORT: String(storeAt), A2AV_STORE_TOKEN: token };
  const timeoutMs = 1000;
  const arg = { seed: 3, victim, calls: 3, ignoreSigterm: false, hangs: true };
  const [hung, survivor] = [String(victim), String(1 - victim)];
  const stopped = spawn(process.execPath, [rankProgram, 'faultyRun', JSON.stringify(arg), String(timeoutMs)], { env: { ...process.env, ...common, RANK: hung, LOCAL_RANK: hung }, stdio: 'ignore' });
  const result = (await rankProcess({ ...common, RANK: survivor, LOCAL_RANK: survivor }, timeoutMs, 'faultyRun', arg).finally(() => stopped.kill('SIGKILL')))!;
  assert.equal(result.code, 1, JSON.stringify(result.line));
  assert.equal(result.line.error.code, 'A2AV_TIMEOUT', JSON.stringify(result.line));
  assert.equal(result.line.error.missingRank, victim);
  return result;
}

test('rank 0 serving the store does not wait in close() for a rank its timeout named (it hung or died: it will never say it left)', { timeout: 30_000 }, async () => {
  // Nothing but rank 0's own timeout says the hung rank 1 will not leave.
  const rank0 = await survivorOfHung(1);
  // Its set-up, three calls and the 1 s timeout: well under the 10 s it waited in close() for rank 1.
  assert.ok(rank0.ms < START_WAIT_FLOOR_MS - 2000, `rank 0 took ${Math.round(rank0.ms)} ms`);
});

test('a rank whose timeout named rank 0 (hung, with the store it serves) does not wait in close() to say it left', { timeout: 30_000 }, async () => {
  // Rank 0's store thread stopped with it: a word to it would wait out the 10 s floor.
  const rank1 = await survivorOfHung(0);
  assert.ok(rank1.ms < START_WAIT_FLOOR_MS - 2000, `rank 1 took ${Math.round(rank1.ms)} ms`);
});

test('a process that closes its communicator and calls init() again gets a working one, under a2av launch and at A2AV_STORE_PORT', { timeout: 60_000 }, async () => {
  const program = fileURLToPath(new URL('./fixtures/reinit-rank.js', import.meta.url));
  // Under a2av launch: its store outlives each communicator, which keep their keys apart.
  const cli = fileURLToPath(new URL('../src/cli.js', import.meta.url));
  const launched = spawn(process.execPath, [cli, 'launch', '-n', '3', '--no-prefix', '--', process.execPath, program, '3', '5000'], { stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  let err = '';
  launched.stdout.on('data', (c: Buffer) => (out += c));
  launched.stderr.on('data', (c: Buffer) => (err += c));
  const [code] = (await once(launched, 'exit')) as [number];
  assert.equal(code, 0, `${out}${err}`);
  assert.deepEqual(out.trim().split('\n').map((l) => JSON.parse(l)).sort((a, b) => a.rank - b.rank), [0, 1, 2].map((rank) => ({ rank, rounds: 3 })));
  // By hand: rank 0 serves each communicator's store in turn; a peer that reaches the last one
  // while it closes connects again, to the next.
  const [storeAt, unused] = [await freePort(), await freePort()];
  const token = randomBytes(16).toString('hex');
  const common = { WORLD_SIZE: '2', LOCAL_WORLD_SIZE: '2', MASTER_ADDR: '127.0.0.1', MASTER_PORT: String(unused), A2AV_STORE_PORT: String(storeAt), A2AV_STORE_TOKEN: token };
  const ranks = ['0', '1'].map((r) => {
    const child = spawn(process.execPath, [program, '4', '5000'], { env: { ...process.env, ...common, RANK: r, LOCAL_RANK: r }, stdio: ['ignore', 'pipe', 'inherit'] });
    let text = '';
    child.stdout.on('data', (c: Buffer) => (text += c));
    return once(child, 'exit').then(([exit]) => ({ exit, line: JSON.parse(text.trim().split('\n').pop()!) }));
  });
  for (const { exit, line } of await Promise.all(ranks)) {
    assert.equal(exit, 0, JSON.stringify(line));
    assert.equal(line.rounds, 4, JSON.stringify(line));
  }
});

test('init() again at A2AV_STORE_PORT with the first communicator open: refused on every rank, and the refused call does not count', { timeout: 60_000 }, async () => {
  const initAt = JSON.stringify(new URL('../src/world/init.js', import.meta.url).href);
  // Rank 0 makes the refused call, then rank 1 too; then both close and meet again (a counted refusal kept them apart).
  const code = `const { init } = await import(${initAt});
    const first = await init({ backend: 'cpu', timeoutMs: 5000 });
    if (process.env.RANK === '0') {
      try { await init({ backend: 'cpu', timeoutMs: 5000 }); console.log('no error'); } catch (e) { console.log(e.name + ': ' + e.message); }
    }
    await first.barrier();
    if (process.env.RANK === '1') {
      try { await init({ backend: 'cpu', timeoutMs: 5000 }); console.log('no error'); } catch (e) { console.log(e.name + ': ' + e.message); }
    }
    await first.close();
    const again = await init({ backend: 'cpu', timeoutMs: 5000 });
    await again.barrier();
    await again.close();
    console.log('closed, then again: ok');`;
  const dir = mkdtempSync(join(tmpdir(), 'a2av-init-twice-'));
  const file = join(dir, 'twice.mjs');
  writeFileSync(file, code);
  const common = { WORLD_SIZE: '2', MASTER_ADDR: '127.0.0.1', MASTER_PORT: '1', A2AV_STORE_PORT: String(await freePort()), A2AV_STORE_TOKEN: randomBytes(16).toString('hex') };
  try {
    const ranks = ['0', '1'].map((r) => {
      const child = spawn(process.execPath, [file], { env: { ...process.env, ...common, RANK: r }, stdio: ['ignore', 'pipe', 'pipe'] });
      let out = '';
      let err = '';
      child.stdout.on('data', (c: Buffer) => (out += c));
      child.stderr.on('data', (c: Buffer) => (err += c));
      return once(child, 'exit').then(([exit]) => ({ exit, out: out.trim().split('\n'), err }));
    });
    const [rank0, rank1] = await Promise.all(ranks);
    assert.equal(rank0!.exit, 0, rank0!.err);
    const refused = `UsageError: A2AV_STORE_PORT: this process has a communicator open on the job's store at port ${common.A2AV_STORE_PORT} already: close() it before init() again (rank 0 serves one store at a time there; under a2av launch, whose store outlives each, several communicators may be open)`;
    assert.deepEqual(rank0!.out, [refused, 'closed, then again: ok']);
    assert.equal(rank1!.exit, 0, rank1!.err);
    assert.deepEqual(rank1!.out, [refused, 'closed, then again: ok']);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('A2AV_STORE_PORT without a token, or not a port, is a UsageError', T, async () => {
  const env = { RANK: '0', WORLD_SIZE: '1', MASTER_ADDR: '127.0.0.1', MASTER_PORT: '1' };
  for (const [extra, message] of [
    [{ A2AV_STORE_PORT: String(await freePort()), A2AV_STORE_TOKEN: '' }, /A2AV_STORE_PORT: rank 0 serves the job's store at MASTER_ADDR with A2AV_STORE_TOKEN; set both/],
    [{ A2AV_STORE_PORT: '70000', A2AV_STORE_TOKEN: 'x'.repeat(16) }, /A2AV_STORE_PORT="70000" is not a port/],
  ] as const) {
    const { code, line } = await rankProcess({ ...env, ...extra }, 2000);
    assert.equal(code, 1);
    assert.equal(line.error.name, 'UsageError');
    assert.match(line.error.message, message);
  }
});

test('a store that goes away during set-up fails the waiting rank at once and leaves no shared memory', T, async () => {
  const token = randomBytes(16).toString('hex');
  const server = await TcpStoreServer.listen({ token });
  const before = a2avShmFiles();
  const env = { RANK: '0', WORLD_SIZE: '2', MASTER_ADDR: '127.0.0.1', MASTER_PORT: String(server.port), A2AV_STORE_TOKEN: token };
  // Rank 1 never comes: rank 0 waits for its pad for up to 30 s, unless the store goes away.
  const running = rankProcess(env, 30_000);
  const watcher = await TcpStoreClient.connect({ host: '127.0.0.1', port: server.port, token, timeoutMs: 10_000 });
  // Rank 1's part of init()'s comparison, as rank 1 would write it, so rank 0 goes on to its pad.
  await watcher.set('a2av/init/0/start/1', await watcher.get('a2av/init/0/start/0'));
  await watcher.get('a2av/init/0/a2av/cpu/pad/0'); // rank 0 has published its pad and waits for rank 1's
  const closedAt = performance.now();
  await server.close();
  await watcher.close();
  const { code, line } = await running;
  assert.equal(code, 1);
  assert.equal(line.error.code, 'A2AV_STORE');
  assert.equal(line.error.reason, 'disconnected');
  assert.match(line.error.message, /connection to the store at 127\.0\.0\.1:\d+ closed/);
  assert.ok(performance.now() - closedAt < 5000, 'the rank noticed at once');
  assert.deepEqual(a2avShmFiles().filter((f) => !before.includes(f)), []);
});

test('under another launcher, a rank ended by SIGTERM, SIGINT or SIGHUP while its peers map its memory leaves no shared memory', { timeout: 40_000 }, async () => {
  for (const signal of ['SIGTERM', 'SIGINT', 'SIGHUP'] as const) {
    const [storeAt, unused] = [await freePort(), await freePort()];
    const token = randomBytes(16).toString('hex');
    const job = ownJob();
    const common = { WORLD_SIZE: '2', LOCAL_WORLD_SIZE: '2', MASTER_ADDR: '127.0.0.1', MASTER_PORT: String(unused), A2AV_STORE_PORT: String(storeAt), A2AV_STORE_TOKEN: token, A2AV_JOB_ID: job.id };
    // Rank 0 never calls allocSymmetric; rank 1 waits in it, its memory named for rank 0 to map.
    const ranks = ['0', '1'].map((r) =>
      spawn(process.execPath, [rankProgram, 'allocWithoutOne', JSON.stringify({ absent: 0 }), '30000'], { env: { ...process.env, ...common, RANK: r, LOCAL_RANK: r }, stdio: 'ignore' }),
    );
    try {
      // Its second allocation (the first is its pad, unlinked once init() is done).
      const rank1Files = () => job.files().filter((f) => /-r1-\d+-1-/.test(f));
      for (const until = Date.now() + 10_000; rank1Files().length === 0; await new Promise((r) => setTimeout(r, 20))) {
        if (Date.now() > until) throw new Error(`${signal}: rank 1 made no shared memory`);
      }
      ranks[1]!.kill(signal);
      const [code, how] = (await once(ranks[1]!, 'exit')) as [number | null, string | null];
      // Ended by the signal, as without a2av's listener: not an exit code of a handler that caught it.
      assert.deepEqual([code, how], [null, signal]);
      assert.deepEqual(job.files().filter((f) => /-r1-/.test(f)), [], `${signal}: rank 1's shared memory is left`);
    } finally {
      for (const r of ranks) r.kill('SIGKILL');
    }
  }
});

test('under another launcher, the death of rank 0, which serves the store, reaches a peer waiting in set-up at once, naming rank 0', T, async () => {
  const [storeAt, unused] = [await freePort(), await freePort()];
  const token = randomBytes(16).toString('hex');
  const job = ownJob();
  const common = { WORLD_SIZE: '2', LOCAL_WORLD_SIZE: '2', MASTER_ADDR: '127.0.0.1', MASTER_PORT: String(unused), A2AV_STORE_PORT: String(storeAt), A2AV_STORE_TOKEN: token, A2AV_JOB_ID: job.id };
  const spawnRank = (r: string) => spawn(process.execPath, [rankProgram, 'allocWithoutOne', JSON.stringify({ absent: 0 }), '30000'], { env: { ...process.env, ...common, RANK: r, LOCAL_RANK: r }, stdio: ['ignore', 'pipe', 'ignore'] });
  const [rank0, rank1] = [spawnRank('0'), spawnRank('1')];
  let out = '';
  rank1!.stdout!.on('data', (chunk: Buffer) => (out += chunk.toString()));
  try {
    // Rank 1 waits in allocSymmetric (its memory named), rank 0 idles: then rank 0 is killed.
    for (const until = Date.now() + 10_000; !job.files().some((f) => /-r1-\d+-1-/.test(f)); await new Promise((r) => setTimeout(r, 20))) {
      if (Date.now() > until) throw new Error('rank 1 never reached allocSymmetric');
    }
    const killedAt = performance.now();
    rank0!.kill('SIGKILL');
    const [code] = (await once(rank1!, 'exit')) as [number];
    assert.ok(performance.now() - killedAt < 5000, 'rank 1 learnt it at once, not at its timeout');
    assert.equal(code, 1);
    const line = JSON.parse(out.trim().split('\n').pop()!);
    assert.equal(line.error.code, 'A2AV_STORE', out);
    assert.match(line.error.message, /connection to the store at 127\.0\.0\.1:\d+ closed: rank 0 \(A2AV_STORE_PORT\), which served it, has exited or was killed/);
    assert.deepEqual(job.files(), [], 'rank 1 left shared memory');
  } finally {
    rank0!.kill('SIGKILL');
    rank1!.kill('SIGKILL');
  }
});

test('a rank killed after publishing its memory, before saying it mapped the others\', is named by the survivors\' timeout (one deadline for the whole set-up), which also drops its name', T, async () => {
  const { server, clients: [store0, store1], job, Rendezvous } = await byHand();
  // Rank 1, by hand: it publishes a named region and is never heard from again (SIGKILL leaves its name).
  const killed = madeInJob(job.id, () => new ProcessMemory(1)).allocate(4096);
  assert.equal(job.files().length, 1, 'the job\'s files are told by its id');
  try {
    const survivor = new Rendezvous(store0!, madeInJob(job.id, () => new ProcessMemory(0)), 0, 2);
    const started = performance.now();
    const sharing = survivor.share('sym/test', 4096, 1000);
    // Published late: the wait for its word that it mapped ours has what is left of the same 1 s, not 1 s more.
    await new Promise((resolve) => setTimeout(resolve, 700));
    await store1!.set('a2av/cpu/sym/test/1', killed.handle);
    await assert.rejects(sharing, (err: Error) => err instanceof TimeoutError && err.missingRank === 1 && err.rank === 0 && err.timeoutMs === 1000 &&
      // Named as the call it was, not as the store key it waited on.
      /waiting for rank 1 \(allocSymmetric #test, mapping the peers' memory\)/.test(err.message));
    const waited = performance.now() - started;
    assert.ok(waited >= 950 && waited < 1500, `waited ${Math.round(waited)} ms for a 1000 ms set-up`);
    assert.deepEqual(job.files(), [], 'neither the survivor\'s memory nor the killed rank\'s is left');
  } finally {
    killed.close();
    await Promise.all([store0!.close(), store1!.close()]);
    await server.close();
  }
});

test('a store that goes away in set-up (with rank 0, which served it) takes the names of the memory the others published with it', T, async () => {
  const { server, clients: [store1, store2], job, Rendezvous } = await byHand();
  // Ranks 0 and 2, by hand: both publish their memory; rank 0 is then SIGKILLed (its name never
  // unlinked) and its store with it, while rank 1 waits for its word that it mapped the others'.
  const [dead, other] = [0, 2].map((r) => madeInJob(job.id, () => new ProcessMemory(r)).allocate(4096));
  try {
    await store2!.set('a2av/cpu/sym/test/0', dead!.handle);
    await store2!.set('a2av/cpu/sym/test/2', other!.handle);
    await store2!.set('a2av/cpu/sym/test/mapped/2', new Uint8Array(0));
    const survivor = new Rendezvous(store1!, madeInJob(job.id, () => new ProcessMemory(1)), 1, 3);
    const sharing = survivor.share('sym/test', 4096, 30_000).then(() => undefined, (e: unknown) => e);
    await store2!.get('a2av/cpu/sym/test/mapped/1'); // rank 1 has mapped both and waits for rank 0
    await server.close();
    const err = await sharing;
    assert.ok(err instanceof StoreError && err.reason === 'disconnected', String(err));
    assert.deepEqual(job.files(), [], 'rank 0\'s name, which it cannot unlink, rank 2\'s and rank 1\'s own');
  } finally {
    dead!.close();
    other!.close();
    await Promise.all([store1!.close(), store2!.close()]);
  }
});

test('a peer whose memory is gone before this rank maps it is named as having left set-up, not as a bare ENOENT', T, async () => {
  const { server, clients: [store0, store1], job, Rendezvous } = await byHand();
  // Rank 1 published its memory, then left (SIGTERM: it unlinked its name on the way out).
  const left = madeInJob(job.id, () => new ProcessMemory(1)).allocate(4096);
  try {
    await store1!.set('a2av/cpu/sym/test/1', left.handle);
    left.unpublish();
    const rank0 = new Rendezvous(store0!, madeInJob(job.id, () => new ProcessMemory(0)), 0, 2);
    await assert.rejects(rank0.share('sym/test', 4096, 5000, 'allocSymmetric #3'), (err: Error) =>
      err instanceof SharedMemoryError && err.errorName === 'ENOENT' &&
      /rank 1's memory for allocSymmetric #3 was gone before rank 0 mapped it: rank 1 left set-up \(it exited, was killed, or failed: its own error says why\)/.test(err.message));
    assert.deepEqual(job.files(), []);
  } finally {
    left.close();
    await Promise.all([store0!.close(), store1!.close()]);
    await server.close();
  }
});

test('a peer killed after making its memory but before publishing its name: the rank whose set-up timed out on it removes the name, not a live one\'s', T, async () => {
  const { server, clients: [store0, store1], job, Rendezvous } = await byHand();
  // Rank 1's process made its memory and was killed before it said the name (nothing unlinked it):
  // a file named with a pid that has exited. Beside it, a name of rank 1 made by a live process
  // (this one: slow, or another communicator of it), which must stay.
  const dead = spawn(process.execPath, ['-e', '']);
  await once(dead, 'exit');
  const killed = `${shmPrefix(job.id)}r1-${dead.pid}-0-${randomBytes(16).toString('hex')}`;
  writeFileSync(join(SHM_DIR, killed), new Uint8Array(4096));
  const live = madeInJob(job.id, () => new ProcessMemory(1)).allocate(4096);
  try {
    assert.equal(job.files().length, 2);
    const rank0 = new Rendezvous(store0!, madeInJob(job.id, () => new ProcessMemory(0)), 0, 2);
    await assert.rejects(rank0.share('sym/test', 4096, 500, 'allocSymmetric #0'), (err: Error) => err instanceof TimeoutError && err.missingRank === 1);
    assert.deepEqual(job.files(), [new TextDecoder().decode(live.handle).split(':/')[1]], "the dead rank's name is left, or the live one's is gone");
  } finally {
    live.unpublish();
    live.close();
    rmSync(join(SHM_DIR, killed), { force: true });
    await Promise.all([store0!.close(), store1!.close()]);
    await server.close();
  }
});

test('outside a2av launch, the ranks of one job name their memory alike (store address and token), so a peer can find a killed rank\'s', T, () => {
  const env = { MASTER_ADDR: '127.0.0.1', A2AV_STORE_PORT: '29999', A2AV_STORE_TOKEN: 'a'.repeat(32) };
  const prefixOf = (extra: Record<string, string>, rank: number) => {
    const saved = { ...process.env };
    Object.assign(process.env, env, extra);
    delete process.env.A2AV_JOB_ID;
    try {
      const region = new ProcessMemory(rank).allocate(64);
      const name = new TextDecoder().decode(region.handle).split(':')[1]!;
      region.unpublish();
      region.close();
      return name.replace(/r\d+-\d+-\d+-[0-9a-f]+$/, '');
    } finally {
      for (const k of Object.keys(process.env)) if (!(k in saved)) delete process.env[k];
      Object.assign(process.env, saved);
    }
  };
  assert.equal(prefixOf({}, 0), prefixOf({}, 1));
  assert.notEqual(prefixOf({}, 0), prefixOf({ A2AV_STORE_TOKEN: 'b'.repeat(32) }, 0), 'another job (another token) names apart');
});

test('a cpu communicator over a TCP store maps shared memory, and unmaps and unlinks it on close', T, async () => {
  const token = randomBytes(16).toString('hex');
  const server = await TcpStoreServer.listen({ token });
  const store = await TcpStoreClient.connect({ host: '127.0.0.1', port: server.port, token });
  const job = ownJob();
  try {
    const comm = await madeInJob(job.id, () => createComm({ backend: 'cpu', rank: 0, worldSize: 1, store, timeoutMs: 2000, lanes: 1 }));
    assert.equal(comm.deviceName, 'cpu process');
    assert.deepEqual(job.files(), [], 'names are unlinked once every peer mapped them');
    const input = comm.alloc(12);
    const output = await comm.allocSymmetric(12);
    const inSplits = comm.alloc(8);
    const outSplitsOffsets = comm.alloc(16);
    comm.write(input, Uint8Array.from({ length: 12 }, (_, i) => i + 1));
    comm.write(inSplits, BigInt64Array.of(3n));
    comm.allToAllV({ input, output, inSplits, outSplitsOffsets, rowBytes: 4 }).wait();
    assert.deepEqual([...comm.read(output, 0, 12)], [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12]);
    await comm.close();
    assert.ok(output.freed, 'close releases every buffer (its memory is unmapped)');
    assert.throws(() => comm.read(output, 0, 1), UsageError);
  } finally {
    await store.close();
    await server.close();
  }
});

test('the cpu backend refuses processes on several nodes', T, async () => {
  const token = randomBytes(16).toString('hex');
  const server = await TcpStoreServer.listen({ token });
  const store = await TcpStoreClient.connect({ host: '127.0.0.1', port: server.port, token });
  try {
    await assert.rejects(
      createComm({ backend: 'cpu', rank: 0, worldSize: 4, localRank: 0, localWorldSize: 2, store, timeoutMs: 1000, lanes: 1 }),
      (err: Error) => err instanceof UsageError && /within one node: 4 ranks, but 2 on this node/.test(err.message),
    );
  } finally {
    await store.close();
    await server.close();
  }
});

test('shared-memory failures are SharedMemoryErrors with the errno name', T, () => {
  const job = ownJob();
  const memory = madeInJob(job.id, () => new ProcessMemory(0));
  const missing = new TextEncoder().encode(`64:/a2av-0-r9-0-${randomBytes(16).toString('hex')}`);
  assert.throws(() => memory.map(missing, 9), (err: Error) =>
    err instanceof SharedMemoryError && err.code === 'A2AV_SHM' && err.call === 'shm_open' && err.errorName === 'ENOENT' && /ENOENT/.test(err.message));
  assert.throws(() => memory.map(new TextEncoder().encode('64:/etc/passwd'), 9), (err: Error) => err instanceof UsageError && /malformed/.test(err.message));
  assert.throws(() => memory.allocate(2 ** 50), (err: Error) =>
    err instanceof SharedMemoryError && err.call === 'posix_fallocate' && err.errorName === 'ENOSPC' && /--shm-size/.test(err.message));
  assert.deepEqual(job.files(), [], 'a failed allocation leaves no file');
  const region = memory.allocate(4096);
  try {
    const name = new TextDecoder().decode(region.handle).split(':')[1]!;
    assert.ok(readdirSync(SHM_DIR).includes(name.slice(1)));
    const peer = memory.map(region.handle, 0);
    new Uint8Array(peer.buffer)[7] = 42;
    assert.equal(new Uint8Array(region.buffer)[7], 42, 'two mappings of one object share their bytes');
    peer.close();
    region.unpublish();
    assert.ok(!readdirSync(SHM_DIR).includes(name.slice(1)));
    assert.equal(new Uint8Array(region.buffer)[7], 42, 'the memory outlives its name');
  } finally {
    region.close();
  }
});
