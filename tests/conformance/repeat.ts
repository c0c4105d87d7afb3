// One conformance case again and again with fresh seeds, for a failure that comes and goes: one line
// per run (seed, time, the first line of the error), exit status 1 if any run failed.
//   node dist/tests/conformance/repeat.js <backend> <case name substring> [runs] [seed...]
// Seeds given are run first (a failing run's seed reproduces its splits); then random ones.
//   e.g. node dist/tests/conformance/repeat.js cuda 'W=16 on one GPU' 10 289821081
import { randomInt } from 'node:crypto';
import type { BackendName } from '../../src/backends/backend.js';
import { runRanks } from '../../src/world/threads.js';
import { caseArg, suite } from './suite.js';

const [backend, pattern, runsArg, ...given] = process.argv.slice(2);
if (!backend || !pattern) {
  console.error('usage: repeat.js <backend> <case name substring> [runs] [seed...]');
  process.exit(2);
}
// A name that starts with the pattern wins over names that merely contain it ('usage W=2').
const starts = suite.filter((c) => c.name.startsWith(pattern));
const matches = starts.length === 1 ? starts : suite.filter((c) => c.name.includes(pattern));
if (matches.length !== 1) {
  console.error(`"${pattern}" names ${matches.length} cases${matches.length ? ':\n  ' + matches.map((c) => c.name).join('\n  ') : ''}`);
  process.exit(2);
}
const c = matches[0];
const runs = Math.max(Number(runsArg ?? 10), given.length);
const cases = new URL('./cases.js', import.meta.url);
let failed = 0;
console.log(`${c.name} on ${backend}, ${runs} runs`);
for (let i = 0; i < runs; i++) {
  const seed = i < given.length ? Number(given[i]) : randomInt(2 ** 31);
  const start = performance.now();
  try {
    await runRanks({ backend: backend as BackendName, ranks: c.ranks, timeoutMs: c.timeoutMs ?? 30_000, lanes: c.lanes ?? 2 }, cases, c.fn, caseArg(c, seed));
    console.log(`seed ${seed}: ok, ${(performance.now() - start).toFixed(0)} ms`);
  } catch (err) {
    failed += 1;
    console.log(`seed ${seed}: FAILED after ${(performance.now() - start).toFixed(0)} ms: ${String((err as Error).message).split('\n')[0]}`);
  }
}
console.log(`${runs - failed} of ${runs} passed`);
process.exit(failed ? 1 : 0);
