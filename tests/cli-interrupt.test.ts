// A bench sweep ended by a signal with its output redirected (no terminal): the sizes it finished
// reach stdout as the table (or JSON) the run would have ended with, saying it was interrupted,
// and the process ends by that signal.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';

const cli = fileURLToPath(new URL('../src/cli.js', import.meta.url));

/** Runs `a2av bench ...args` with pipes, sends `signal` once two items are done, and returns what came out. */
async function interruptedRun(args: string[], signal: NodeJS.Signals): Promise<{ stdout: string; stderr: string; signal: string | null }> {
  const child = spawn(process.execPath, [cli, 'bench', ...args], { stdio: ['ignore', 'pipe', 'pipe'] });
  let stdout = '';
  let stderr = '';
  child.stdout.on('data', (d: Buffer) => (stdout += d.toString()));
  child.stderr.on('data', (d: Buffer) => {
    stderr += d.toString();
    if (stderr.includes('[2/') && !child.killed) child.kill(signal);
  });
  const [, ended] = (await once(child, 'exit')) as [number | null, NodeJS.Signals | null];
  return { stdout, stderr, signal: ended };
}

const sweep = ['--min', '64K', '--max', '1G', '--iters', '100', '--repeats', '2'];

test('SIGINT with stdout redirected: the finished sizes as the table, marked interrupted; ended by SIGINT', { timeout: 60_000 }, async () => {
  const run = await interruptedRun(['--backend', 'cpu', ...sweep], 'SIGINT');
  assert.equal(run.signal, 'SIGINT', run.stderr);
  assert.match(run.stderr, /^bench: interrupted \(SIGINT\) after \d+ sizes?$/m);
  const lines = run.stdout.trimEnd().split('\n');
  const note = lines.find((l) => l.startsWith('# interrupted: '));
  const [, done, of] = /^# interrupted: SIGINT after (\d+) of (\d+) sizes; the rows are the sizes it finished$/.exec(note ?? '') ?? [];
  assert.ok(Number(done) >= 2 && Number(done) < Number(of), run.stdout);
  const rows = lines.slice(lines.findIndex((l) => /^ *bytes +time µs/.test(l)) + 1);
  assert.equal(rows.length, Number(done), run.stdout);
  assert.match(rows[0]!, /^ *64 KiB +[\d.]+ /);
});

test('SIGTERM with --json: the finished sizes as JSON that parses, with interrupted', { timeout: 60_000 }, async () => {
  const run = await interruptedRun(['--backend', 'cpu', ...sweep, '--json'], 'SIGTERM');
  assert.equal(run.signal, 'SIGTERM', run.stderr);
  const result = JSON.parse(run.stdout) as { interrupted: string; rows: { bytes: number }[] };
  assert.match(result.interrupted, /^SIGTERM after \d+ of \d+ sizes$/);
  assert.ok(result.rows.length >= 2);
  assert.deepEqual(result.rows.map((r) => r.bytes).slice(0, 2), [64 * 1024, 128 * 1024]);
});

test('bench allreduce and the token MoE bench: the same, each with its own table', { timeout: 90_000 }, async () => {
  const reduce = await interruptedRun(['allreduce', '--backend', 'cpu', '--min', '64K', '--max', '256M', '--iters', '100', '--repeats', '2'], 'SIGINT');
  assert.equal(reduce.signal, 'SIGINT', reduce.stderr);
  assert.match(reduce.stdout, /^# interrupted: cpu: SIGINT after \d+ of \d+ sizes; its rows are the sizes it finished$/m);
  assert.match(reduce.stdout, /^ *64 KiB +cpu +[\d.]+ /m);
  const tokens = await interruptedRun(['--backend', 'cpu', '--op', 'moe-dispatch', '--num-experts', '8', '--topk', '2', '--hidden', '64', '--tokens', '1,2,4,8,16,32,64,128,256,512,1024,2048', '--repeats', '2', '--json'], 'SIGTERM');
  assert.equal(tokens.signal, 'SIGTERM', tokens.stderr);
  const result = JSON.parse(tokens.stdout) as { interrupted: string; rows: { tokens: number }[] };
  assert.match(result.interrupted, /^SIGTERM after \d+ of 12 token counts$/);
  assert.deepEqual(result.rows.map((r) => r.tokens).slice(0, 2), [1, 2]);
});
