// Every program in examples/ runs as a user runs it, in a child process, and must exit 0: each
// checks what it received and exits non-zero on a mismatch. On cpu always (so CI runs them); on
// cuda too where a GPU is visible.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { describe, it } from 'node:test';
import { fileURLToPath } from 'node:url';
import { defaultBackend } from '../src/backends/create.js';
import { cudaDeviceCount, cudaUnavailableReason } from '../src/cuda/probe.js';
import { checkReceived, inputRows, MismatchError, splitsOf } from '../examples/common.js';

const example = (name: string): string => fileURLToPath(new URL(`../examples/${name}.js`, import.meta.url));
const cli = fileURLToPath(new URL('../src/cli.js', import.meta.url));
const T = { timeout: 120_000 };
const gpus = cudaDeviceCount();

function run(args: string[]): string[] {
  const r = spawnSync(process.execPath, args, { encoding: 'utf8', timeout: 100_000 });
  assert.equal(r.status, 0, `${args.join(' ')} exited with ${r.status ?? r.signal}\n${r.stdout}${r.stderr}`);
  return r.stdout.trim().split('\n');
}

/** What each example prints, one line per rank (the launcher prefixes its ranks' lines). */
const expected: Record<string, RegExp> = {
  threads: /^rank \d \((\w+)\): 3 steps checked; the last sent \[[\d,]+\] rows, received \[[\d,]+\] at offsets \[[\d,]+\]$/,
  replay: /^rank \d \((\w+)\): 4 replays of one capture, each with new splits, checked$/,
  lanes: /^rank \d \((\w+)\): 3 rounds of two exchanges on lanes 0 and 1 at once, checked$/,
  launch: /^\[rank \d\] rank \d \((\w+)\): 3 steps checked; the last sent/,
  moe: /^rank \d \((\w+)\): 3 steps of dispatch and combine checked; the last brought \d+ rows to its 2 experts$/,
  experts: /^rank \d \((\w+)\): 3 steps checked, two payloads a plan, and back; the last sent \d+ rows, received \d+ \(with padding\) for experts \d+\.\.\d+$/,
};

function runAll(backend: 'cpu' | 'cuda', ranks: number): void {
  for (const name of ['threads', 'replay', 'lanes', 'moe', 'experts']) {
    it(`${name}.js --backend ${backend} --ranks ${ranks}`, T, () => {
      const lines = run([example(name), '--backend', backend, '--ranks', String(ranks)]);
      assert.equal(lines.length, ranks, lines.join('\n'));
      for (const line of lines) assert.equal(line.match(expected[name])?.[1], backend, line);
    });
  }
  it(`a2av launch -n ${ranks} -- node launch.js --backend ${backend}`, T, () => {
    const lines = run([cli, 'launch', '-n', String(ranks), '--', process.execPath, example('launch'), '--backend', backend]);
    assert.equal(lines.length, ranks, lines.join('\n'));
    for (const line of lines) assert.equal(line.match(expected.launch)?.[1], backend, line);
  });
}

describe('examples on cpu', () => {
  runAll('cpu', 3);

  it('threads.js without --backend: runRanks picks the backend as init() does', T, async () => {
    const lines = run([example('threads'), '--ranks', '2']);
    for (const line of lines) assert.equal(line.match(expected.threads)?.[1], await defaultBackend(), line);
  });
});

describe('examples end in one line on an error', () => {
  /** Runs an example that must fail: exit status 1, nothing on stdout, one line on stderr. */
  function fails(args: string[]): string {
    const r = spawnSync(process.execPath, args, { encoding: 'utf8', timeout: 100_000, env: { ...process.env, RANK: undefined, WORLD_SIZE: undefined } });
    assert.equal(r.status, 1, `${args.join(' ')} exited with ${r.status ?? r.signal}\n${r.stdout}${r.stderr}`);
    assert.equal(r.stdout, '');
    const lines = r.stderr.trimEnd().split('\n');
    assert.equal(lines.length, 1, r.stderr);
    return lines[0]!;
  }

  it('a bad command line names the option', T, () => {
    assert.equal(fails([example('threads'), '--ranks', '0']), "UsageError: --ranks must be a positive integer, got '0'");
    assert.equal(fails([example('lanes'), '--backend', 'foo']), "UsageError: --backend must be cpu, cuda or nccl, got 'foo'");
    assert.match(fails([example('replay'), '--bogus']), /^UsageError: Unknown option '--bogus'; the options are --backend cpu\|cuda\|nccl and --ranks N$/);
  });

  it('launch.js outside a launcher says how to start it', T, () => {
    assert.match(fails([example('launch')]), /^UsageError: init\(\): this process was not started as a rank .* start it with a2av launch -n N -- <command>/);
  });

  it('a backend this machine lacks: its error once, no search list or stack', { ...T, skip: gpus > 0 && 'a GPU is visible' }, () => {
    for (const backend of ['cuda', 'nccl']) {
      assert.match(fails([example('threads'), '--backend', backend, '--ranks', '2']), /^\w+Error: rank [01] failed: \S/);
    }
  });
});

describe('examples on cuda', { skip: gpus === 0 && `no CUDA GPU: ${cudaUnavailableReason() ?? 'none visible'}` }, () => {
  runAll('cuda', 2);
});

describe("the examples' check", () => {
  // Rank 1's result of step 0 as the device would leave it, assembled on the host.
  const W = 3;
  const me = 1;
  const counts = [0, 1, 2].map((src) => splitsOf(src, W, 0)[me]);
  const offsets = counts.map((_, i) => counts.slice(0, i).reduce((a, b) => a + b, 0));
  const splitsOffsets = BigInt64Array.from([...counts, ...offsets], BigInt);
  const rows = () => {
    const parts = [0, 1, 2].map((src) => {
      const all = inputRows(src, W, 0);
      const before = splitsOf(src, W, 0).slice(0, me).reduce((a, b) => a + b, 0);
      return all.subarray(before * 4, (before + counts[src]) * 4);
    });
    return Int32Array.from(parts.flatMap((p) => [...p]));
  };

  it('accepts the right result', () => {
    assert.deepEqual(checkReceived(me, W, 0, splitsOffsets, rows()), counts);
  });

  it('refuses a wrong row, a wrong count and a stale step', () => {
    const wrongRow = rows();
    wrongRow[wrongRow.length - 2] += 1;
    assert.throws(() => checkReceived(me, W, 0, splitsOffsets, wrongRow), MismatchError);
    const wrongCount = splitsOffsets.slice();
    wrongCount[0] += 1n;
    assert.throws(() => checkReceived(me, W, 0, wrongCount, rows()), MismatchError);
    assert.throws(() => checkReceived(me, W, 1, splitsOffsets, rows()), MismatchError);
  });
});
