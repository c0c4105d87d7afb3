// The package's command as a new user reaches it: `npm ci` (whose prepare builds), then `npx a2av`,
// which runs the file package.json names as `bin` directly. tsc writes it without the executable
// bit; the build sets it (package.json "build"), else npx stops at "Permission denied".
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { accessSync, constants, readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..', '..');

test('the bin is built executable and runs as a program', () => {
  const pkg = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8')) as { bin: Record<string, string>; version: string };
  const bin = join(root, pkg.bin.a2av!);
  assert.doesNotThrow(() => accessSync(bin, constants.X_OK), `${bin} is executable (npm run build sets it)`);
  assert.match(readFileSync(bin, 'utf8').split('\n')[0]!, /^#!\/usr\/bin\/env node$/);
  const run = spawnSync(bin, ['--version'], { encoding: 'utf8', timeout: 30_000 });
  assert.equal(run.status, 0, run.stderr);
  assert.equal(run.stdout.trim(), pkg.version);
});
