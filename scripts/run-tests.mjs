#!/usr/bin/env node
// Runs every compiled test file (dist/**/*.test.js) with node's test runner, one file at a time.
// Listing the files here keeps `npm test` the same on Node 20 (no globs in --test) and later Nodes
// (where a folder argument is not searched). Extra arguments pass through to node --test.
// A2AV_TEST_FILES=conformance,pipeline runs only the files whose path holds one of the words, and
// A2AV_TEST_SKIP=... leaves such files out: a long GPU run can go in parts.
import { spawnSync } from 'node:child_process';
import { readdirSync } from 'node:fs';
import { join } from 'node:path';

function find(dir) {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) =>
    e.isDirectory() ? find(join(dir, e.name)) : e.name.endsWith('.test.js') ? [join(dir, e.name)] : [],
  );
}

const words = (name) => (process.env[name] ?? '').split(',').map((w) => w.trim()).filter(Boolean);
const only = words('A2AV_TEST_FILES');
const skip = words('A2AV_TEST_SKIP');
const all = find('dist').sort();
const files = all.filter((f) => (only.length === 0 || only.some((w) => f.includes(w))) && !skip.some((w) => f.includes(w)));
if (all.length === 0) {
  console.error('no compiled tests under dist/: run the build first');
  process.exit(1);
}
if (files.length === 0) {
  console.error(`no test file matches A2AV_TEST_FILES=${only.join(',')} less A2AV_TEST_SKIP=${skip.join(',')}`);
  process.exit(1);
}
const args = ['--test', '--test-concurrency=1', ...process.argv.slice(2), ...files];
const { status, signal } = spawnSync(process.execPath, args, { stdio: 'inherit' });
process.exit(status ?? (signal ? 1 : 0));
