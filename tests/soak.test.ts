// scripts/soak.mjs on the cpu backend at a small count: it passes, and it fails, naming the call,
// the rank and the byte, when one byte of one call's output is flipped behind the library's back.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { randomInt } from 'node:crypto';
import { fileURLToPath } from 'node:url';
import { test } from 'node:test';

const script = fileURLToPath(new URL('../../scripts/soak.mjs', import.meta.url));
const seed = process.env.A2AV_SEED ?? String(randomInt(2 ** 31));

function soak(...args: string[]): { status: number | null; last: string; stderr: string } {
  const r = spawnSync(process.execPath, [script, '--backend', 'cpu', '--ranks', '3', '--seed', seed, '--no-progress', ...args], {
    encoding: 'utf8',
    timeout: 120_000,
  });
  const lines = r.stdout.trim().split('\n');
  return { status: r.status, last: lines[lines.length - 1], stderr: r.stderr };
}

test('the soak passes on cpu: 1000 calls, every one checked, memory and handles flat', () => {
  const r = soak('--calls', '1000');
  assert.equal(r.status, 0, `${r.last}\n${r.stderr}`);
  assert.match(r.last, /^soak ok: cpu W=3, 1000 calls, .*every call checked; .*open handles \+0$/);
  // The schedule mixed every kind of call in (with 1000 calls, each kind is all but certain).
  assert.match(r.last, /\d+ direct, [1-9]\d* in [1-9]\d* bursts, [1-9]\d* replayed in .*; [1-9]\d* refused as required/);
});

test('the soak fails on one flipped output byte, naming the call, the rank and the byte', () => {
  const r = soak('--calls', '300', '--corrupt', '250@1');
  assert.equal(r.status, 1, `${r.last}\n${r.stderr}`);
  assert.match(r.last, /^soak FAILED: cpu W=3, 300 calls, seed \d+: rank 1 failed: call 250 \(.*: rank 1 output byte 0 /);
  assert.match(r.last, /\(rerun: node scripts\/soak\.mjs .*--corrupt 250@1/);
});
