// The CLI on a terminal (a pseudo-terminal from script(1)): its progress bar hides the cursor and
// turns line wrapping off while it runs, so an interrupt must give both back, and keep the lines
// of the sizes the bar alone showed.
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import { once } from 'node:events';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';

const cli = fileURLToPath(new URL('../src/cli.js', import.meta.url));
const script = spawnSync('script', ['--version']).status === 0 ? undefined : 'no script(1) here to give the command a terminal';

for (const [name, args, first] of [
  ['bench', 'bench --backend cpu --min 64K --max 1G --iters 200', /\[1\/\d+\] 64 KiB: [\d.]+ µs/],
  ['bench allreduce', 'bench allreduce --backend cpu --min 64K --max 256M --iters 200', /\[1\/\d+\] 64 KiB: [\d.]+ µs/],
] as const) {
test(`Ctrl-C during a ${name} sweep on a terminal restores the cursor and line wrapping, lists the finished sizes and exits 130`, { skip: script, timeout: 60_000 }, async () => {
  const dir = mkdtempSync(join(tmpdir(), 'a2av-tty-'));
  let term: ReturnType<typeof spawn> | undefined;
  try {
    const typescript = join(dir, 'out');
    // script runs the command through $SHELL -c; exec makes the bench script's own child under any
    // shell (dash would otherwise stay between them and take the interrupt itself).
    const command = `exec ${JSON.stringify(process.execPath)} ${JSON.stringify(cli)} ${args}`;
    // -e: script's status is the command's; -f: the file is written as the command writes.
    term = spawn('script', ['-qfec', command, typescript], { stdio: 'ignore' });
    const seen = () => {
      try {
        return readFileSync(typescript, 'utf8');
      } catch {
        return '';
      }
    };
    for (const until = Date.now() + 40_000; !seen().includes(' 2/'); await new Promise((r) => setTimeout(r, 50))) {
      if (Date.now() > until) throw new Error(`the bar never reached its second size:\n${seen()}`);
    }
    // The command is script's child: Ctrl-C reaches it (the terminal's foreground), not script.
    const bench = Number(spawnSync('pgrep', ['-P', String(term.pid)], { encoding: 'utf8' }).stdout.trim().split('\n')[0]);
    assert.ok(bench > 0, 'the bench process under script');
    assert.match(readFileSync(`/proc/${bench}/cmdline`, 'utf8'), /cli\.js\0bench/, 'the process under script is the bench itself');
    process.kill(bench, 'SIGINT');
    const [code] = (await once(term, 'exit')) as [number];
    const out = seen();
    assert.equal(code, 130, out);
    assert.ok(out.includes('\x1b[?25l'), 'the bar hid the cursor');
    const hid = out.lastIndexOf('\x1b[?25l');
    assert.ok(out.indexOf('\x1b[?25h', hid) > hid, 'the cursor is shown again');
    assert.ok(out.indexOf('\x1b[?7h', hid) > hid, 'line wrapping is back on');
    assert.match(out, new RegExp(`${name}: interrupted \\(SIGINT\\) after \\d+ sizes?:\\r?\\n${first.source}`));
    // bench's table of the finished sizes on stdout (the same terminal here).
    if (name === 'bench') assert.match(out, /# interrupted: SIGINT after \d+ of \d+ sizes; the rows are the sizes it finished\r?\n *bytes +time µs/);
  } finally {
    // A failed check must not leave a 1 GiB sweep running: the command leads its own session.
    if (term && term.exitCode === null && term.signalCode === null) {
      const leader = spawnSync('pgrep', ['-P', String(term.pid)], { encoding: 'utf8' }).stdout.trim().split('\n')[0];
      if (/^\d+$/.test(leader)) spawnSync('pkill', ['-KILL', '-s', leader]);
      term.kill('SIGKILL');
    }
    rmSync(dir, { recursive: true, force: true });
  }
});
}
