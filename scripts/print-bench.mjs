#!/usr/bin/env node
// Prints the tables of `a2av bench --json` result files: scripts/print-bench.mjs FILE...
import { readFileSync } from 'node:fs';
import { formatTable } from '../dist/src/bench/table.js';

for (const file of process.argv.slice(2)) {
  try {
    console.log(formatTable(JSON.parse(readFileSync(file, 'utf8'))));
  } catch (err) {
    console.log(`${file}: ${err.message.split('\n')[0]}`);
  }
}
