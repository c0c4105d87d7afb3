#!/usr/bin/env node
// Runs every compiled test file (dist/**/*.test.js) with node's test runner, one file at a time.
// Listing the files here keeps `npm test` the same on Node 20 (no globs in --test) and later Nodes
// (where a folder argument is not searched). Extra arguments pass through to node --test.
import { spawnSync } from 'node:child_process';
import { readdirSync } from 'node:fs';
import { join } from 'node:path';

function find(dir) {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) =>
    e.isDirectory() ? find(join(dir, e.name)) : e.name.endsWith('.test.js') ? [join(dir, e.name)] : [],
  );
}

const files = find('dist').sort();
if (files.length === 0) {
  console.error('no compiled tests under dist/: run the build first');
  process.exit(1);
}
const args = ['--test', '--test-concurrency=1', ...process.argv.slice(2), ...files];
const { status, signal } = spawnSync(process.execPath, args, { stdio: 'inherit' });
process.exit(status ?? (signal ? 1 : 0));
