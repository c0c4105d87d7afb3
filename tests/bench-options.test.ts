// `a2av bench`'s options against its ops: an option the op does not use is refused, naming the ops
// that take it; out-of-range values and the sub-commands named as ops are refused up front; a
// rank's failure names the rank once.
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import { describe, it } from 'node:test';
import { fileURLToPath } from 'node:url';

const cli = fileURLToPath(new URL('../src/cli.js', import.meta.url));
const a2av = (...args: string[]) => spawnSync(process.execPath, [cli, ...args], { encoding: 'utf8', timeout: 60_000 });
const bench = (...args: string[]) => a2av('bench', '--backend', 'cpu', ...args);

/** Refused before anything runs: exit status 1, this one line on stderr, nothing on stdout. */
function refused(args: string[], message: string | RegExp): void {
  const { status, stdout, stderr } = bench(...args);
  assert.equal(status, 1, `${args.join(' ')}: ${stderr}`);
  assert.equal(stdout, '', args.join(' '));
  assert.equal(stderr.trim().split('\n').length, 1, stderr);
  if (typeof message === 'string') assert.equal(stderr.trim(), `a2av: ${message}`, args.join(' '));
  else assert.match(stderr.trim(), message, args.join(' '));
}

describe('a2av bench: options of other ops', () => {
  const SWEEP = 'alltoallv, dispatch, combine or roundtrip';
  const TOKENS = 'moe-dispatch or moe-combine';
  const EXPERTS = 'dispatch, combine or roundtrip';
  it('refuses each option the op does not use, naming the ops that take it', () => {
    for (const [args, message] of [
      [['--op', 'moe-combine', '--tokens', '4', '--experts', '4'], `--op moe-combine does not take --experts (an option of --op ${EXPERTS})`],
      [['--op', 'moe-dispatch', '--rows-per-expert', '4'], `--op moe-dispatch does not take --rows-per-expert (an option of --op ${EXPERTS})`],
      [['--op', 'moe-dispatch', '--splits', 'zipf', '--row-bytes', '8', '--min', '1M', '--max', '2M'],
        `--op moe-dispatch does not take --min, --max, --splits, --row-bytes (options of --op ${SWEEP})`],
      [['--tokens', '4', '--num-experts', '16', '--topk', '2', '--layout', 'compact'],
        `--op alltoallv does not take --tokens, --num-experts, --topk, --layout (options of --op ${TOKENS})`],
      [['--op', 'alltoallv', '--rows-per-expert', '4'], `--op alltoallv does not take --rows-per-expert (an option of --op ${EXPERTS})`],
      [['--experts', '4', '--align', '2'], `--op alltoallv does not take --experts, --align (options of --op ${EXPERTS})`],
      [['--op', 'moe-dispatch', '--plot', 'x.svg', '--iters', '3'], `--op moe-dispatch does not take --iters, --plot (options of --op ${SWEEP})`],
      [['--op', 'dispatch', '--hidden', '64', '--min', '1M'], `--op dispatch does not take --hidden (an option of --op ${TOKENS})`],
    ] as const) refused([...args], message);
  });

  it('keeps the documented combinations: the small MoE step, and the token ops with their own options', () => {
    const step = bench('--ranks', '2', '--op', 'dispatch', '--experts', '16', '--align', '4', '--rows-per-expert', '1', '--row-bytes', '64', '--repeats', '1', '--iters', '2', '--json');
    assert.equal(step.status, 0, step.stderr);
    assert.deepEqual(JSON.parse(step.stdout).rows.map((r: { bytes: number }) => r.bytes), [2 * 16 * 64]);
    const tokens = bench('--ranks', '2', '--op', 'moe-combine', '--tokens', '2', '--num-experts', '4', '--topk', '2', '--hidden', '16', '--layout', 'compact',
      '--seed', '3', '--repeats', '1', '--json');
    assert.equal(tokens.status, 0, tokens.stderr);
    assert.deepEqual(JSON.parse(tokens.stdout).rows.map((r: { tokens: number }) => r.tokens), [2]);
  });
});

describe('a2av bench: values refused up front', () => {
  it('--align past 2^20 names the limit', () => {
    refused(['--op', 'dispatch', '--align', '2000000', '--max', '1M'], "--align 2000000: the dispatch's majorAlign is at most 1048576 (2^20) rows");
  });

  it('--op allreduce and --op pipeline point to their sub-commands, which the top-level help names', () => {
    for (const sub of ['allreduce', 'pipeline']) refused(['--op', sub], new RegExp(`'${sub}' is invalid\\. ${sub} is a sub-command: a2av bench ${sub} `));
    refused(['--op', 'nope'], /Allowed choices are alltoallv, .*moe-combine; a2av bench allreduce and a2av bench pipeline are sub-commands\.$/);
    // A word after bench is a sub-command or nothing: a misspelt one is named, with the nearest.
    refused(['allredce'], "unknown sub-command 'allredce' of a2av bench (did you mean allreduce?): its sub-commands are allreduce and pipeline");
    refused(['sweep'], "unknown sub-command 'sweep' of a2av bench: its sub-commands are allreduce and pipeline");
    const help = a2av('--help').stdout.replace(/\s+/g, ' ');
    assert.match(help, /a2av bench allreduce/);
    assert.match(help, /a2av bench pipeline/);
  });

  it("options before a sub-command, which it would not read, are refused; 'bench help <sub>' and 'help bench <sub>' show its help", () => {
    // bench() gives --backend cpu before the arguments: bench's own option, not the sub-command's.
    refused(['--ranks', '4', 'allreduce', '--max', '8K'],
      "--backend, --ranks are given before 'allreduce', where a2av bench allreduce does not read them: give its options after its name (a2av bench allreduce --help lists them)");
    refused(['pipeline'], "--backend is given before 'pipeline', where a2av bench pipeline does not read it: give its options after its name (a2av bench pipeline --help lists them)");
    const help = a2av('bench', 'help', 'pipeline');
    assert.equal(help.status, 0, help.stderr);
    assert.match(help.stdout, /^Usage: a2av bench pipeline /);
    // And from the top, as git's `help` would: a2av help bench pipeline.
    for (const sub of ['pipeline', 'allreduce']) {
      const top = a2av('help', 'bench', sub);
      assert.equal(top.status, 0, top.stderr);
      assert.match(top.stdout, new RegExp(`^Usage: a2av bench ${sub} `));
    }
    // A word help does not know is named as such, not answered with the whole help.
    for (const words of [['nosuch'], ['bench', 'nosuch']]) {
      const unknown = a2av('help', ...words);
      assert.equal(unknown.status, 1);
      assert.equal(unknown.stdout, '');
      assert.equal(unknown.stderr, `a2av: unknown command '${words.join(' ')}' (a2av help lists the commands)\n`);
    }
  });

  it('--plot into a missing folder or not .svg is refused before the sweep', () => {
    refused(['--plot', '/nonexistent/x.svg', '--max', '1M'], '/nonexistent/x.svg: cannot write (ENOENT on /nonexistent)');
    refused(['--plot', 'x.png', '--max', '1M'], 'x.png: plots are written as SVG; name the file *.svg');
  });
});

describe('a2av bench: lists and options the run would not use', () => {
  it('a list with an empty item names its place, not a 0 never typed; an item named twice is refused', () => {
    const invalid = (option: string, value: string, why: string) => `option '${option}' argument '${value}' is invalid. ${why}`;
    for (const [args, message] of [
      [['--op', 'moe-dispatch', '--tokens', '1,,2'], invalid('--tokens <list>', '1,,2', "item 2 of '1,,2' is empty: give token counts separated by single commas")],
      [['--op', 'moe-dispatch', '--tokens', '4,'], invalid('--tokens <list>', '4,', "item 2 of '4,' is empty: give token counts separated by single commas")],
      [['--op', 'moe-dispatch', '--tokens', '2,2'], invalid('--tokens <list>', '2,2', 'token count 2 is named twice')],
      // Number() would read these as 16 and 1000.
      [['--op', 'moe-dispatch', '--tokens', '0x10'], invalid('--tokens <list>', '0x10', "token counts are whole numbers >= 1, got '0x10'")],
      [['--op', 'moe-dispatch', '--tokens', '1e3'], invalid('--tokens <list>', '1e3', "token counts are whole numbers >= 1, got '1e3'")],
      // bench() gives --backend cpu first: the last --backend given is the one read.
      [['--backend', 'cpu,cpu'], invalid('--backend <names>', 'cpu,cpu', 'backend cpu is named twice')],
      [['--backend', ',cpu'], invalid('--backend <names>', ',cpu', "item 1 of ',cpu' is empty: give backends separated by single commas")],
    ] as const) refused([...args], message);
  });

  it('--seed with uniform splits, which it would not change, is refused; zipf and the moe-* ops take it', () => {
    const why = (splits: string) => `--seed only shapes zipf split layouts; ${splits} has none to shape: give --splits zipf, or leave out --seed`;
    refused(['--seed', '7', '--max', '1M'], why('the default --splits uniform'));
    refused(['--seed', '7', '--splits', 'uniform', '--op', 'combine', '--max', '1M'], why('--splits uniform'));
    refused(['--seed', '7', '--op', 'dispatch', '--rows-per-expert', '2'], why('the default --splits uniform'));
    const zipf = bench('--ranks', '2', '--seed', '7', '--splits', 'zipf', '--min', '64K', '--max', '64K', '--repeats', '1', '--iters', '1', '--json');
    assert.equal(zipf.status, 0, zipf.stderr);
    assert.equal(JSON.parse(zipf.stdout).seed, 7);
  });

  it('--help says the moe-* ops refuse --iters (they time loops of >= 20 ms themselves), as they do', () => {
    const help = a2av('bench', '--help').stdout.replace(/\s+/g, ' ');
    assert.match(help, /--iters <n> calls per timed loop \(default: enough for >= 20 ms\); not the moe-\* ops, /);
    refused(['--op', 'moe-combine', '--iters', '2'], '--op moe-combine does not take --iters (an option of --op alltoallv, dispatch, combine or roundtrip)');
  });
});

describe('a2av bench: a sweep that starts past --min or stops short of --max says where, naming the bound given', () => {
  /** The sweep's notes: stderr's lines up to its "bench: N sizes" line. */
  function notes(...args: string[]): string[] {
    const { status, stderr } = bench('--ranks', '1', '--repeats', '1', '--iters', '1', ...args);
    assert.equal(status, 0, stderr);
    const lines = stderr.split('\n');
    return lines.slice(0, lines.findIndex((l) => l.startsWith('bench: ')));
  }
  const nccl = "the last one not past it, as nccl-tests' -b/-e sweep does";

  it('a --max off the doubling ladder: the sweep stops at its last step below it', () => {
    assert.deepEqual(notes('--min', '1K', '--max', '3K'), [`a2av: note: --max 3 KiB is not a doubling of --min 1 KiB: the sweep stops at 2 KiB, ${nccl}`]);
    // Doublings rounded up to whole rows: 1500 -> 2 KiB, 3000 -> 3 KiB, 6000 -> 6 KiB, and 12000 is past --max.
    // A --min not whole rows is not run itself either: where the sweep starts comes first.
    const offMin = '--min 1.5 KiB (1500 B) is not a whole number of 1 KiB rows: the sweep starts at 2 KiB, each doubling rounded up';
    assert.deepEqual(notes('--min', '1500', '--max', '9000'),
      [`a2av: note: ${offMin}; --max 8.8 KiB (9000 B) is not a doubling of --min 1.5 KiB (1500 B) (each rounded up to whole 1 KiB rows): the sweep stops at 6 KiB, ${nccl}`]);
    assert.deepEqual(notes('--min', '1500', '--max', '6000'), [`a2av: note: ${offMin}; --max 5.9 KiB (6000 B) is not a whole number of 1 KiB rows: the sweep stops at 5 KiB, its last whole one`]);
    assert.deepEqual(notes('--min', '1500', '--max', '3K'), [`a2av: note: ${offMin}`]);
    // Below one row: the sweep starts at one row, as it does for any --min off whole rows.
    assert.deepEqual(notes('--min', '512', '--max', '2K'), ['a2av: note: --min 512 B is not a whole number of 1 KiB rows: the sweep starts at 1 KiB, each doubling rounded up']);
    // Where a size reads rounded, its bytes are said too: 65533 B is not "64.0 KiB" beside a --max of 64 KiB.
    assert.deepEqual(notes('--min', '16K', '--max', '64K', '--row-bytes', '13'), [
      'a2av: note: --min 16 KiB is not a whole number of 13 B rows: the sweep starts at 16.0 KiB (16393 B), each doubling rounded up; ' +
        '--max 64 KiB is not a whole number of 13 B rows: the sweep stops at 64.0 KiB (65533 B), its last whole one',
    ]);
    // On the ladder, or the default --max: no note.
    assert.deepEqual(notes('--min', '1K', '--max', '4K'), []);
    // --json keeps the note with the figures it explains.
    const json = bench('--ranks', '1', '--repeats', '1', '--iters', '1', '--min', '1K', '--max', '3K', '--json');
    assert.equal(json.status, 0, json.stderr);
    assert.deepEqual(JSON.parse(json.stdout).notes, [`--max 3 KiB is not a doubling of --min 1 KiB: the sweep stops at 2 KiB, ${nccl}`]);
    assert.equal(JSON.parse(bench('--ranks', '1', '--repeats', '1', '--iters', '1', '--min', '1K', '--max', '2K', '--json').stdout).notes, undefined);
    const allreduce = a2av('bench', 'allreduce', '--backend', 'cpu', '--ranks', '1', '--repeats', '1', '--iters', '1', '--max', '12K');
    assert.equal(allreduce.status, 0, allreduce.stderr);
    assert.equal(allreduce.stderr.split('\n')[0], `a2av: note: --max 12 KiB is not a doubling of the default --min 4 KiB: the sweep stops at 8 KiB, ${nccl}`);
    const allreduceJson = a2av('bench', 'allreduce', '--backend', 'cpu', '--ranks', '1', '--repeats', '1', '--iters', '1', '--max', '12K', '--json');
    assert.deepEqual(JSON.parse(allreduceJson.stdout).notes, [`--max 12 KiB is not a doubling of the default --min 4 KiB: the sweep stops at 8 KiB, ${nccl}`]);
  });

  it('lowered to fit: the note names the --max given, not the ladder\'s top below it', { timeout: 60_000 }, async () => {
    // 3 TiB is past the ladder's 2 TiB from 1 KiB; memory (or a cpu buffer's limit) lowers it far below. Stopped once the plan is said.
    const child = spawn(process.execPath, [cli, 'bench', '--backend', 'cpu', '--ranks', '1', '--min', '1K', '--max', '3T', '--repeats', '1', '--iters', '1'],
      { stdio: ['ignore', 'ignore', 'pipe'] });
    let stderr = '';
    await new Promise<void>((done) => {
      child.stderr.on('data', (d: Buffer) => {
        stderr += d.toString();
        if (/^bench: /m.test(stderr)) child.kill();
      });
      child.on('close', () => done());
    });
    assert.match(stderr.split('\n')[0], /^a2av: note: lowered --max from 3 TiB to \d+(\.\d)? [KMG]iB: \d+(\.\d)? [KMG]iB per rank needs /);
  });
});

describe('a2av bench: a rank that fails', () => {
  it('is named once, whether or not its error names it', () => {
    // Past the group's top-k limit, which only the ranks check (the CLI checks topk against the experts).
    const { status, stderr } = bench('--ranks', '8', '--op', 'moe-dispatch', '--num-experts', '2048', '--topk', '1025', '--tokens', '1');
    assert.equal(status, 1);
    // After the sweep's plan line (off a terminal): the error, once.
    assert.match(stderr.trim(), /^bench --op moe-dispatch: 1 token count: 1 token a rank, each checked then timed\na2av: rank [0-7] failed: createMoeGroup: topk must be an integer in 1\.\.1024/);
    assert.equal(stderr.match(/failed:/g)?.length, 1, stderr);
    // An error without its rank keeps the rank the thread runner adds.
    const big = bench('--ranks', '1', '--min', '16T', '--max', '16T');
    assert.equal(big.status, 1);
    assert.match(big.stderr.trim(), /^a2av: rank 0 failed: 16 TiB per rank needs /);
  });
});
