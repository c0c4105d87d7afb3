// Ranks as processes under a2av launch: the conformance rank programs against the host reference,
// a rank killed mid-run (the 1-D call, a token MoE dispatch, the pipeline), a crash that leaves
// shared memory behind, and the benchmark. The ranks are cpu processes; A2AV_TEST_BACKEND=cuda runs
// the same on the GPU (processes sharing one GPU need MPS), the benchmark's test staying on cpu.
// After every test no a2av file may be left in /dev/shm and no rank process may be running.
import assert from 'node:assert/strict';
import { randomInt } from 'node:crypto';
import { readdirSync, readFileSync } from 'node:fs';
import { afterEach, beforeEach, describe, test } from 'node:test';
import { fileURLToPath } from 'node:url';
import type { LaunchOptions } from '../src/launch/launcher.js';
import { SHM_DIR } from '../src/world/shm-files.js';
import { linesOf, runLaunch } from './support/launch-capture.js';

const node = process.execPath;
const rankProgram = fileURLToPath(new URL('./fixtures/process-rank.js', import.meta.url));
const cli = fileURLToPath(new URL('../src/cli.js', import.meta.url));
const seed = process.env.A2AV_SEED !== undefined ? Number(process.env.A2AV_SEED) : randomInt(2 ** 31);
/** The ranks' backend (tests/fixtures/process-rank.ts reads the same variable). */
const backend = process.env.A2AV_TEST_BACKEND ?? 'cpu';
/** What a rank's communicator must report as its device: the cpu backend's name, or a GPU's. */
const rankDevice = (name: string | undefined): boolean => (backend === 'cpu' ? name === 'cpu process' : name !== undefined && name !== 'cpu process' && name.length > 0);

interface RankLine {
  rank: number;
  pid: number;
  deviceName?: string;
  result?: unknown;
  error?: { name: string; code: string; message: string; missingRank?: number; waitedMs?: number; calls?: number; peerFailed?: boolean };
  leaked?: string;
  exists?: boolean;
}

/** A token MoE group small enough for CI's two cores as processes: 3 experts a rank, top-2, up to 10 tokens of 24-byte rows. */
const TOKEN_JOB = { layout: 'expanded', experts: 3, topk: 2, maxTokens: 10, align: 4, rowBytes: 24, hidden: 3, calls: 1 };

/** Each rank's one JSON line (undefined for a rank that printed none). */
function rankLines(stdout: string, world: number): (RankLine | undefined)[] {
  return Array.from({ length: world }, (_, r) => {
    const line = linesOf(stdout, r).find((l) => l.startsWith('{'));
    return line === undefined ? undefined : (JSON.parse(line) as RankLine);
  });
}

/** Runs conformance program `fn` on `world` processes. */
function runProgram(world: number, fn: string, arg: object, timeoutMs: number, extra: Partial<LaunchOptions> = {}) {
  return runLaunch({ nprocs: world, command: [node, rankProgram, fn, JSON.stringify({ seed, ...arg }), String(timeoutMs)], ...extra });
}

const a2avShmFiles = () => readdirSync(SHM_DIR).filter((name) => name.startsWith('a2av-'));

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return readFileSync(`/proc/${pid}/stat`, 'utf8').replace(/^.*\) /s, '')[0] !== 'Z';
  } catch {
    return false;
  }
}

let shmBefore: string[] = [];
beforeEach(() => {
  shmBefore = a2avShmFiles();
});
afterEach(() => {
  assert.deepEqual(a2avShmFiles().filter((f) => !shmBefore.includes(f)), [], 'shared-memory files left in /dev/shm');
});

describe(`conformance on ${backend} processes`, () => {
  const suite: [world: number, fn: string, arg: object][] = [
    [2, 'exchange', { calls: 30, budget: 16384 }],
    [3, 'exchange', { calls: 30, budget: 8192 }],
    [4, 'exchange', { calls: 20, budget: 4096 }],
    [3, 'replay', { launches: 8, budget: 8192 }],
    [3, 'splitsErrors', {}],
    [3, 'ownOutcomes', { calls: 9 }],
    [2, 'lanes', { budget: 4096 }],
    [2, 'usage', {}],
    [2, 'moeExchange', { calls: 10, experts: [8], aligns: [1, 8, 16], maxRows: 9, budget: 4096 }],
    [3, 'moeExchange', { calls: 8, experts: [1, 16, 64, 256], aligns: [1, 4], maxRows: 2, budget: 1024, rowSizes: [1, 7, 48, 1000] }],
    [3, 'moeErrors', {}],
    [2, 'moeMismatch', {}],
    [3, 'moePlans', { experts: 8, align: 8, maxRows: 3 }],
    [2, 'planRefusals', { experts: 4, align: 4, maxRows: 3 }],
    [2, 'moeReplay', { launches: 7, experts: 8, align: 8, maxRows: 4 }],
    [2, 'moeLanes', { rounds: 4, experts: 8, align: 4, maxRows: 4 }],
    [2, 'moeUsage', {}],
    [2, 'allReduce', { counts: [0, 1, 7, 4099, 1_000_003] }],
    [3, 'allReduce', { counts: [0, 1, 4099, 70_001] }],
    [2, 'allReduceLanes', { rounds: 4, maxCount: 50_001 }],
    [2, 'moeTokens', { ...TOKEN_JOB, layout: 'expanded', calls: 4 }],
    [3, 'moeTokens', { ...TOKEN_JOB, layout: 'compact', align: 1, calls: 3 }],
  ];
  for (const [world, fn, arg] of suite) {
    test(`${fn} W=${world} (seed ${seed})`, { timeout: 30_000 }, async () => {
      const { code, stdout, stderr } = await runProgram(world, fn, arg, 20_000);
      const lines = rankLines(stdout, world);
      for (const [rank, line] of lines.entries()) {
        assert.ok(line, `rank ${rank} printed nothing; stderr: ${stderr}`);
        assert.equal(line.error, undefined, `rank ${rank} (A2AV_SEED=${seed}): ${line.error?.message}`);
        assert.ok(rankDevice(line.deviceName), `rank ${rank} ran on '${line.deviceName}', not the ${backend} backend`);
      }
      assert.equal(code, 0, stderr);
    });
  }

  for (const fn of ['timeout', 'allReduceTimeout', 'moeTokenTimeout']) {
    test(`${fn} W=3: a rank that never calls is named`, { timeout: 30_000 }, async () => {
      const absent = seed % 3;
      const { code, stdout, stderr } = await runProgram(3, fn, { ...TOKEN_JOB, absent, timeoutMs: 500 }, 500);
      for (const [rank, line] of rankLines(stdout, 3).entries()) {
        assert.equal(line?.error, undefined, `rank ${rank}: ${line?.error?.message}; ${stderr}`);
      }
      assert.equal(code, 0, stderr);
    });
  }
});

describe('faults', () => {
  /**
   * Runs `program` on 3 ranks, rank `victim` SIGKILLing itself before its call `calls`: each survivor
   * must end in a TimeoutError naming it from that very call, after about the timeout, the launcher
   * must name the victim as the rank that failed first, and the job end within the timeout + `setUpMs`.
   */
  async function expectVictimNamed(program: string, arg: object, victim: number, calls: number, setUpMs: number): Promise<void> {
    const timeoutMs = 1500;
    // The survivors ignore the launcher's SIGTERM, to live until their own timeout; SIGKILL follows after graceMs.
    const { code, stdout, stderr, ms } = await runProgram(3, program, { ...arg, victim, calls, ignoreSigterm: true }, timeoutMs, { graceMs: 10_000 });
    const lines = rankLines(stdout, 3);
    assert.equal(lines[victim], undefined, 'the victim printed nothing');
    for (const r of [0, 1, 2].filter((q) => q !== victim)) {
      const e = lines[r]?.error;
      assert.equal(e?.name, 'TimeoutError', `rank ${r}: ${JSON.stringify(lines[r])}; ${stderr}`);
      assert.equal(e.code, 'A2AV_TIMEOUT');
      assert.equal(e.missingRank, victim);
      assert.equal(e.calls, calls, 'the timeout came in the call the victim missed (every earlier call checked)');
      assert.ok(e.waitedMs! >= timeoutMs * 0.9 && e.waitedMs! < timeoutMs + 1000, `waited ${e.waitedMs} ms for a ${timeoutMs} ms timeout`);
    }
    assert.equal(code, 128 + 9);
    assert.match(stderr, new RegExp(`a2av launch: rank ${victim} \\(pid \\d+\\) failed first: killed by SIGKILL`));
    assert.ok(ms < timeoutMs + setUpMs, `the job took ${ms} ms`);
    const pids = [...lines.flatMap((l) => (l ? [l.pid] : [])), Number(/pid (\d+)/.exec(stderr)![1])];
    assert.deepEqual(pids.filter(alive), [], 'rank processes still running');
  }

  test('a rank SIGKILLed mid-run: the others raise TimeoutError naming it, the launcher names it', { timeout: 30_000 }, () => expectVictimNamed('faultyRun', {}, 1, 25, 5000));

  test('a rank SIGKILLed as its peers dispatch MoE tokens: each survivor\'s dispatch ends in TimeoutError naming it', { timeout: 30_000 }, () =>
    expectVictimNamed('faultyMoe', TOKEN_JOB, 2, 4, 8000));

  test('a rank SIGKILLed mid-pipeline (tiny shape, two lanes): each survivor ends naming it', { timeout: 60_000 }, async () => {
    const timeoutMs = 1500;
    const arg = { shape: 'tiny', arm: 'two-lanes', victim: 1, stopAfter: 4, steps: 50, sigkill: true, ignoreSigterm: true };
    const { code, stdout, stderr } = await runProgram(3, 'victim', arg, timeoutMs, { graceMs: 10_000 });
    const lines = rankLines(stdout, 3);
    assert.equal(lines[1], undefined, 'the victim printed nothing');
    for (const r of [0, 2]) {
      const s = lines[r]?.result as { code?: string; missingRank?: number; message: string } | undefined;
      // A collective on the other lane may meet the abort first: CommAbortedError carries the timeout.
      assert.ok(s?.code === 'A2AV_TIMEOUT' || s?.code === 'A2AV_ABORTED', `rank ${r}: ${JSON.stringify(lines[r])}; ${stderr}`);
      assert.equal(s.missingRank, 1, `rank ${r}: ${s.message}`);
      assert.match(s.message, /timed out after 1500 ms waiting for rank 1/);
    }
    assert.equal(code, 128 + 9);
    assert.match(stderr, /a2av launch: rank 1 \(pid \d+\) failed first: killed by SIGKILL/);
  });

  test('a rank SIGKILLed mid-run: the launcher stops the others at once', { timeout: 30_000 }, async () => {
    const { code, stdout, stderr, ms } = await runProgram(2, 'faultyRun', { victim: 1, calls: 10, ignoreSigterm: false }, 20_000);
    assert.equal(code, 128 + 9);
    assert.match(stderr, /a2av launch: rank 1 \(pid \d+\) failed first: killed by SIGKILL; stopped rank 0, still running then/);
    assert.ok(ms < 10_000, `took ${ms} ms: the survivor was not stopped`);
    assert.deepEqual(rankLines(stdout, 2), [undefined, undefined]);
  });

  for (const code of [0, 3]) {
    test(`a rank whose process exits (status ${code}) with its communicator open: its peers stop waiting at once, and say so`, { timeout: 30_000 }, async () => {
      const { stdout, stderr } = await runProgram(3, 'exitsMidJob', { leaver: 1, code }, 20_000);
      const lines = rankLines(stdout, 3);
      for (const r of [0, 2]) {
        const e = lines[r]?.error;
        assert.equal(e?.code, 'A2AV_TIMEOUT', `rank ${r}: ${JSON.stringify(lines[r])}; ${stderr}`);
        assert.equal(e.missingRank, 1);
        const how = code === 0 ? 'its process exited without closing its communicator' : 'its process exited with an error status, its communicator open \\(its own error says why\\)';
        assert.match(e.message, new RegExp(`stopped waiting for rank 1 after \\d+ ms \\(timeout 20000 ms\\): it will make no more calls \\(.*${how}\\)`));
        assert.ok(e.waitedMs! < 5000, `rank ${r} waited ${e.waitedMs} ms of its 20 s timeout`);
        // Status 0: it did not fail (the launcher may name it); else it failed first, and says why itself.
        assert.equal(e.peerFailed, code !== 0);
      }
    });
  }

  test('shared memory of a rank killed before unlinking it is removed by the launcher', { timeout: 30_000 }, async () => {
    const { code, stdout, stderr } = await runProgram(2, 'leakShm', { victim: 0 }, 20_000);
    const leak = rankLines(stdout, 2)[0];
    assert.ok(leak?.leaked, `${stdout} ${stderr}`);
    assert.equal(leak.exists, true, 'the file existed while the rank ran');
    assert.match(leak.leaked, new RegExp(`^/a2av-[0-9a-f]{16}-r0-${leak.pid}-0-[0-9a-f]{32}$`), 'job prefix, rank, pid, count, then 128 random bits');
    assert.equal(code, 128 + 9);
    // afterEach checks that /dev/shm is clean.
  });
});

describe('a2av bench under a2av launch', () => {
  test('launch -n 2 -- bench --backend cpu --max 2M --json prints one JSON result, from rank 0', { timeout: 60_000 }, async () => {
    const { code, stdout, stderr } = await runLaunch({ nprocs: 2, command: [node, cli, 'bench', '--backend', 'cpu', '--max', '2M', '--repeats', '2', '--json'] });
    assert.equal(code, 0, stderr);
    assert.deepEqual(linesOf(stdout, 1), [], 'rank 1 prints nothing');
    const out = linesOf(stdout, 0).join('\n');
    assert.equal(stdout.split('\n').filter(Boolean).length, linesOf(stdout, 0).length, 'only rank 0 writes to stdout');
    const result = JSON.parse(out);
    assert.equal(result.backend, 'cpu');
    assert.equal(result.ranks, 2);
    assert.equal(result.device, 'cpu process');
    assert.deepEqual(result.rows.map((r: { bytes: number }) => r.bytes), [512 << 10, 1 << 20, 2 << 20]);
    for (const row of result.rows) assert.ok(row.timeUs > 0 && row.refUs > 0, JSON.stringify(row));
    assert.doesNotMatch(stderr, /\[rank 1\]/, 'rank 1 reports no progress');
  });
});
