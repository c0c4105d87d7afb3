// The CLI's limits, each one line and exit status 1 before any work: stdout that cannot take the
// output, output files in places that take none, bounds named as the defaults they are, byte sizes
// with units everywhere, rank and expert counts past what the run can take, bad A2AV_* switches.
import assert from 'node:assert/strict';
import { spawn, spawnSync, type StdioOptions } from 'node:child_process';
import { closeSync, existsSync, mkdtempSync, openSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';
import { fileURLToPath } from 'node:url';
import { MAX_EXPERTS_PER_RANK } from '../src/backends/backend.js';
import { MAX_CPU_WORLD } from '../src/backends/cpu/world.js';
import { checkWritable } from '../src/output-file.js';

const cli = fileURLToPath(new URL('../src/cli.js', import.meta.url));
const a2av = (args: string[], stdio?: StdioOptions) => spawnSync(process.execPath, [cli, ...args], { encoding: 'utf8', timeout: 20_000, stdio });

/** Refused before anything runs: exit status 1, this one line on stderr, nothing on stdout. */
function refused(args: string[], message: string): void {
  const { status, stdout, stderr } = a2av(args);
  assert.equal(stderr.trim(), `a2av: ${message}`, args.join(' '));
  assert.equal(status, 1, args.join(' '));
  assert.equal(stdout, '', args.join(' '));
}

/** A launched rank printing `bytes` bytes: the quickest way to have a2av write to its stdout. */
const printing = (bytes: number) => ['launch', '-n', '1', '--', process.execPath, '-e', `process.stdout.write('x'.repeat(${bytes}) + '\\n')`];

/** a2av with its stdout on `path` opened with `flags`. */
function withStdoutOn(path: string, flags: string, args: string[]) {
  const fd = openSync(path, flags);
  try {
    return a2av(args, ['ignore', fd, 'pipe']);
  } finally {
    closeSync(fd);
  }
}

describe('a2av: stdout that cannot take the output', () => {
  it('a full disk: one line naming ENOSPC, exit status 1', { skip: existsSync('/dev/full') ? false : 'no /dev/full here' }, () => {
    const { status, stderr } = withStdoutOn('/dev/full', 'w', printing(16));
    assert.equal(stderr, 'a2av: stdout: cannot write (ENOSPC)\n');
    assert.equal(status, 1);
  });

  it('help written to a full disk is said too; help asked for exits 0, help for a missing command 1', { skip: existsSync('/dev/full') ? false : 'no /dev/full here' }, () => {
    const { status, stderr } = withStdoutOn('/dev/full', 'w', ['--help']);
    assert.equal(stderr, 'a2av: stdout: cannot write (ENOSPC)\n');
    assert.equal(status, 1);
    const asked = a2av(['bench', '--help']);
    assert.equal(asked.status, 0);
    assert.match(asked.stdout, /^Usage: a2av bench/);
    const none = a2av([]);
    assert.equal(none.status, 1);
    assert.match(none.stderr, /^Usage: a2av/);
  });

  it('a descriptor open for reading only: one line naming EBADF, exit status 1', () => {
    const { status, stderr } = withStdoutOn(process.platform === 'win32' ? 'NUL' : '/dev/null', 'r', printing(16));
    assert.equal(stderr, 'a2av: stdout: cannot write (EBADF)\n');
    assert.equal(status, 1);
  });

  it('a pipe whose reader stopped (| head -c1): no message, but exit status 1, output was lost', async () => {
    // More than a pipe's buffer (64 KiB on Linux), so the writes meet the closed end.
    const child = spawn(process.execPath, [cli, ...printing(1 << 20)], { stdio: ['ignore', 'pipe', 'pipe'] });
    child.stdout.destroy();
    let stderr = '';
    child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
    const status = await new Promise<number | null>((done) => child.on('close', (code) => done(code)));
    assert.equal(stderr, '');
    assert.equal(status, 1);
  });
});

describe('checkWritable: tried, not guessed', () => {
  const dir = mkdtempSync(join(tmpdir(), 'a2av-cli-limits-'));
  after(() => rmSync(dir, { recursive: true, force: true }));

  it('leaves nothing behind: a new file is made and removed, an existing one kept whole', () => {
    const fresh = join(dir, 'fresh.svg');
    checkWritable(fresh);
    assert.equal(existsSync(fresh), false);
    const kept = join(dir, 'kept.svg');
    writeFileSync(kept, 'contents');
    checkWritable(kept);
    assert.equal(readFileSync(kept, 'utf8'), 'contents');
  });

  const noProc = existsSync('/proc/self') ? false : 'no /proc here';
  it('a folder that takes no files (/proc, where root passes access()): refused up front', { skip: noProc }, () => {
    assert.throws(() => checkWritable('/proc/x.svg'), { name: 'UsageError', message: '/proc/x.svg: cannot write (ENOENT)' });
    refused(['bench', '--backend', 'cpu', '--plot', '/proc/x.svg', '--max', '512K'], '/proc/x.svg: cannot write (ENOENT)');
    refused(['plot', join(dir, 'missing.json'), '-o', '/proc/x.svg'], '/proc/x.svg: cannot write (ENOENT)');
    refused(['bench', 'pipeline', '--backend', 'cpu', '--trace', '/proc/t.json'], '/proc/t.json: cannot write (ENOENT)');
  });
});

describe('a2av: --min and --max, the one the user did not give named as the default', () => {
  it('bench, bench allreduce and tune', () => {
    refused(['bench', '--backend', 'cpu', '--max', '1K', '--row-bytes', '4096'], '--max 1 KiB is smaller than the default --min 512 KiB: give --min too');
    refused(['bench', '--backend', 'cpu', '--min', '1G'], '--min 1 GiB is larger than the default --max 256 MiB: give --max too');
    refused(['bench', '--backend', 'cpu', '--min', '2K', '--max', '1K'], '--min 2 KiB is larger than --max 1 KiB');
    refused(['bench', 'allreduce', '--backend', 'cpu', '--max', '1K'], '--max 1 KiB is smaller than the default --min 4 KiB: give --min too');
    refused(['tune', '--max', '1K'], '--max 1 KiB is smaller than the default --min 64 KiB: give --min too');
    refused(['bench', '--backend', 'cpu', '--min', '1500', '--max', '1800'], 'no whole number of 1 KiB rows (the default --row-bytes) lies between --min 1.5 KiB and --max 1.8 KiB');
    refused(['bench', 'allreduce', '--backend', 'cpu', '--min', '5', '--max', '7'], 'no whole number of f32 elements lies between --min 5 B and --max 7 B');
  });
});

describe('a2av: --row-bytes takes sizes as --min and --max do', () => {
  it('units accepted, in bench and tune', () => {
    refused(['bench', '--backend', 'cpu', '--row-bytes', '1G'], 'no whole number of 1 GiB rows (--row-bytes) lies between the default --min 512 KiB and the default --max 256 MiB');
    refused(['bench', '--backend', 'cpu', '--row-bytes', '4K', '--min', '2K', '--max', '2K'], 'no whole number of 4 KiB rows (--row-bytes) lies between --min 2 KiB and --max 2 KiB');
  });

  it('zero, fractions of a byte and negatives refused, saying why', () => {
    const invalid = (value: string, why: string) => `option '--row-bytes <size>' argument '${value}' is invalid. ${why}`;
    refused(['bench', '--backend', 'cpu', '--row-bytes', '0'], invalid('0', "not a whole positive number of bytes: '0'"));
    refused(['bench', '--backend', 'cpu', '--row-bytes', '1.5'], invalid('1.5', "not a whole positive number of bytes: '1.5'"));
    refused(['tune', '--row-bytes', '-1'], invalid('-1', "not a size: '-1' (use bytes or a number with K, M, G, T: 512K, 4G)"));
  });
});

describe('a2av: numbers past what a number holds are refused as too large, naming the limit', () => {
  it('sizes past 2^53 - 1 bytes, in bench, bench allreduce and tune', () => {
    const tooLarge = (option: string, value: string) =>
      `option '${option} <size>' argument '${value}' is invalid. too large: '${value}' (a size is at most 2^53 - 1 bytes, just under 8192T)`;
    refused(['bench', '--backend', 'cpu', '--max', '8192T'], tooLarge('--max', '8192T'));
    refused(['bench', '--backend', 'cpu', '--row-bytes', '99999T'], tooLarge('--row-bytes', '99999T'));
    refused(['bench', 'allreduce', '--backend', 'cpu', '--min', '8192T'], tooLarge('--min', '8192T'));
    refused(['tune', '--graph-max', '1000000T'], tooLarge('--graph-max', '1000000T'));
  });

  it('counts past 2^53 - 1: too large, not "expected an integer"', () => {
    const over = (option: string, value: string) => `option '${option}' argument '${value}' is invalid. expected an integer <= ${Number.MAX_SAFE_INTEGER}`;
    refused(['bench', '--backend', 'cpu', '--ranks', '99999999999999999999'], over('--ranks <n>', '99999999999999999999'));
    refused(['bench', '--backend', 'cpu', '--iters', '9007199254740992'], over('--iters <n>', '9007199254740992'));
  });

  it('--repeats past 1000 timed loops, in bench, bench allreduce and tune (they sized a buffer of one slot each: a rank failed on a buffer never asked for)', () => {
    const why = (value: string) => `option '--repeats <n>' argument '${value}' is invalid. expected an integer <= 1000 (each is a whole timed loop)`;
    refused(['bench', '--backend', 'cpu', '--min', '4K', '--max', '4K', '--repeats', '99999999999'], why('99999999999'));
    refused(['bench', 'allreduce', '--backend', 'cpu', '--repeats', '1001'], why('1001'));
    refused(['tune', '--repeats', '1001'], why('1001'));
  });
});

describe('a2av: rank and expert counts the run cannot take, before a rank starts', () => {
  it('bench allreduce past its 64 ranks', () => {
    refused(['bench', 'allreduce', '--backend', 'cpu', '--ranks', '65'], "bench allreduce: at most 64 ranks (the check's sums stay exact), got 65");
  });

  it(`--op moe-dispatch past ${MAX_EXPERTS_PER_RANK} experts a rank, with the default ranks and with --ranks`, () => {
    const more = `more than the ${MAX_EXPERTS_PER_RANK} a rank the MoE calls take (MAX_EXPERTS_PER_RANK): lower --num-experts, or raise --ranks`;
    refused(['bench', '--backend', 'cpu', '--op', 'moe-dispatch', '--num-experts', '1024'], `--num-experts 1024 over 2 ranks is 512 experts a rank, ${more}`);
    refused(['bench', '--backend', 'cpu', '--op', 'moe-combine', '--ranks', '4', '--num-experts', '2048'], `--num-experts 2048 over 4 ranks is 512 experts a rank, ${more}`);
  });

  it(`--ranks past the cpu backend's ${MAX_CPU_WORLD}, on every command that takes it`, () => {
    const over = `the cpu backend runs at most ${MAX_CPU_WORLD} ranks (each a thread of this process, with its own buffers)`;
    refused(['bench', '--ranks', '100000', '--backend', 'cpu'], `--ranks 100000: ${over}`);
    refused(['bench', '--ranks', String(MAX_CPU_WORLD + 1), '--backend', 'cuda,cpu'], `--ranks ${MAX_CPU_WORLD + 1}: ${over}`);
    refused(['bench', 'pipeline', '--ranks', '1000', '--backend', 'cpu'], `--ranks 1000: ${over}`);
    refused(['bench', 'allreduce', '--ranks', '1000', '--backend', 'cpu'], `--ranks 1000: ${over}`);
  });
});

describe('a2av: --seed past 32 bits, which would repeat a smaller seed\'s layouts', () => {
  it('bench and bench pipeline', () => {
    const why = "option '--seed <n>' argument '4294967297' is invalid. expected an integer <= 4294967295 (layouts and data are drawn from a 32-bit seed)";
    refused(['bench', '--backend', 'cpu', '--splits', 'zipf', '--seed', '4294967297'], why);
    refused(['bench', 'pipeline', '--backend', 'cpu', '--seed', '4294967297'], why);
  });
});

describe('a2av: --timeout-ms past what a timer holds (Node fires such a timer after 1 ms), on every command that takes it', () => {
  it('bench, bench allreduce, bench pipeline and tune', () => {
    const why = "option '--timeout-ms <ms>' argument '2147483648' is invalid. expected an integer <= 2147483647 (about 24.8 days, the longest a timer holds)";
    for (const command of [['bench'], ['bench', 'allreduce'], ['bench', 'pipeline'], ['tune']]) refused([...command, '--timeout-ms', '2147483648'], why);
  });
});

describe('a2av bench\'s sub-commands: a stray word is refused, not ignored (a missing -- would run the default sweep)', () => {
  it('bench allreduce and bench pipeline', () => {
    refused(['bench', 'allreduce', '--backend', 'cpu', 'oops'], "too many arguments for 'allreduce'. Expected 0 arguments but got 1.");
    refused(['bench', 'pipeline', '--backend', 'cpu', 'extra'], "too many arguments for 'pipeline'. Expected 0 arguments but got 1.");
  });
});

describe('a2av: a bad A2AV_* switch, before any rank starts', () => {
  const withSwitch = (name: string, value: string, args: string[]) => spawnSync(process.execPath, [cli, ...args], { encoding: 'utf8', timeout: 20_000, env: { ...process.env, [name]: value } });
  it('bench on cpu refuses a switch only the cuda backend reads; launch refuses it for its ranks', () => {
    for (const [name, value, args, says] of [
      ['A2AV_MOE_GRID', 'sometimes', ['bench', '--backend', 'cpu', '--max', '512K'], "A2AV_MOE_GRID must be never, auto or always, got 'sometimes'"],
      ['A2AV_EARLY_LAUNCH', 'off', ['launch', '-n', '2', '--', process.execPath, '-e', '0'], "A2AV_EARLY_LAUNCH must be 0 or 1, got 'off'"],
    ] as const) {
      const { status, stdout, stderr } = withSwitch(name, value, [...args]);
      assert.equal(stderr.trim(), `a2av: ${says}`, name);
      assert.equal(status, 1);
      assert.equal(stdout, '');
    }
  });
});
