#!/usr/bin/env node
// Soak: many consecutive allToAllV calls on W ranks (threads of this process), every call checked
// against the host reference, memory and open handles required flat. Needs the build (`npx tsc
// -p .`): the rank program is tests/soak/rank.ts, compiled to dist/. `--help` lists the options.
// Exit status: 0 when every check passed, 1 on any failure (named: call, rank, first wrong byte).
// What it does and what it found: docs/soak.md.
import { spawnSync } from 'node:child_process';
import { randomInt } from 'node:crypto';
import { existsSync, writeFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { Command, InvalidArgumentError, Option } from 'commander';
import { SingleBar } from 'cli-progress';

// V8 grows each rank thread's young generation with its allocation rate, more on a machine with
// many cores and much memory: on 32 cores and 256 GiB the RSS rose 43-82 MiB from call 500 to
// 1000 (8 MiB with the young generation fixed, 5.5 MiB from call 1500 to 3000 without): a warm-up,
// not a leak, that would fail the RSS limit. So the soak runs itself with it fixed (rank threads
// inherit the flag).
if (!process.execArgv.some((a) => a.startsWith('--max-semi-space-size'))) {
  const r = spawnSync(process.execPath, ['--max-semi-space-size=2', ...process.execArgv, fileURLToPath(import.meta.url), ...process.argv.slice(2)], { stdio: 'inherit' });
  process.exit(r.status ?? 1);
}

const dist = new URL('../dist/', import.meta.url);
const rankModule = new URL('tests/soak/rank.js', dist);
if (!existsSync(rankModule)) {
  process.stderr.write(`soak: ${rankModule.pathname} not found: build first (npx tsc -p .)\n`);
  process.exit(1);
}
const { runRanks, defaultBackend } = await import(new URL('src/index.js', dist).href);
const { parseSize, formatBytes } = await import(new URL('src/bench/units.js', dist).href);

const MiB = 2 ** 20;

function integer(min) {
  return (text) => {
    const n = Number(text);
    if (!/^\d+$/.test(text.trim()) || !Number.isSafeInteger(n) || n < min) throw new InvalidArgumentError(`expected an integer >= ${min}`);
    return n;
  };
}

function size(text) {
  try {
    return parseSize(text);
  } catch (err) {
    throw new InvalidArgumentError(err.message);
  }
}

function sizeOption(flags, description, fallback) {
  return new Option(flags, description).argParser(size).default(parseSize(fallback), fallback);
}

function corruption(text) {
  const m = /^(\d+)@(\d+)$/.exec(text.trim());
  if (!m) throw new InvalidArgumentError('expected CALL@RANK, e.g. 500@1');
  return { call: Number(m[1]), rank: Number(m[2]) };
}

const program = new Command('soak')
  .description('Consecutive allToAllV calls with random splits (skewed, zero, odd and changing row sizes), bursts of calls in flight, ' +
    'graph replays and deliberately refused calls, every call checked against the host reference; memory and open handles must stay flat.')
  .addOption(new Option('--backend <name>', 'cpu, cuda or nccl (default: cuda where a GPU is visible, else cpu)').choices(['cpu', 'cuda', 'nccl']))
  .option('--ranks <W>', 'ranks, as threads of this process', integer(1), 3)
  .option('--calls <N>', 'allToAllV calls in all (replayed and refused ones included)', integer(1), 100_000)
  .option('--seed <n>', 'seed of the schedule and the data (default: random; printed for reruns)', integer(0))
  .addOption(sizeOption('--budget <size>', 'bytes per (sender, receiver) pair at most', '4K'))
  .option('--lanes <n>', 'lanes per communicator (calls are spread over them)', integer(1), 2)
  .option('--check-every <k>', "check every k-th good call's output (refused calls are always checked)", integer(1), 1)
  .option('--warmup <N>', 'calls before the first memory sample (default: half of --calls, at most 2000)', integer(0))
  .addOption(sizeOption('--max-rss-growth <size>', 'limit on the growth of the process RSS', '64M'))
  .addOption(sizeOption('--max-heap-growth <size>', "limit on the growth of any rank thread's JS memory (heap + external, after a full GC)", '8M'))
  .addOption(sizeOption('--max-device-growth <size>', "limit on the drop of device free memory (cuda, nccl; on cpu comm.freeMemory() is the whole machine's, reported only)", '32M'))
  .option('--timeout-ms <ms>', 'bound on every wait', integer(1), 60_000)
  .option('--json <file>', 'also write every rank\'s counts and memory samples there')
  .option('--no-progress', 'no progress on stderr')
  .addOption(new Option('--corrupt <call@rank>', "flip a byte of that call's output on that rank before it is checked (the run must then fail)").argParser(corruption));

/** A bar on a terminal; elsewhere (logs, CI) a line at every tenth of the run. */
class Progress {
  #total;
  #started = performance.now();
  #bar;
  #nextLine;

  constructor(total) {
    this.#total = total;
    this.#nextLine = total / 10;
    if (!process.stderr.isTTY) return;
    const format = 'soak {bar} {value}/{total} calls | {rate} calls/s | eta {eta_formatted}';
    this.#bar = new SingleBar({ stream: process.stderr, format, hideCursor: true, clearOnComplete: true });
    this.#bar.start(total, 0, { rate: 0 });
  }

  update(calls) {
    const rate = Math.round(calls / ((performance.now() - this.#started) / 1000));
    if (this.#bar) return this.#bar.update(calls, { rate });
    if (calls < this.#nextLine) return;
    process.stderr.write(`soak: ${calls}/${this.#total} calls, ${rate} calls/s\n`);
    while (this.#nextLine <= calls) this.#nextLine += this.#total / 10;
  }

  stop() {
    this.#bar?.stop();
  }
}

program.parse();
const o = program.opts();
if (o.corrupt && (o.corrupt.rank >= o.ranks || o.corrupt.call >= o.calls)) program.error(`--corrupt ${o.corrupt.call}@${o.corrupt.rank}: no such call or rank`);
const backend = o.backend ?? (await defaultBackend());
const seed = o.seed ?? randomInt(2 ** 31);
const warmupCalls = o.warmup ?? Math.min(2000, Math.floor(o.calls / 2));
const what = `${backend} W=${o.ranks}, ${o.calls} calls, seed ${seed}`;
const rerun = `(rerun: node scripts/soak.mjs ${process.argv.slice(2).join(' ')}${o.backend ? '' : ` --backend ${backend}`}${o.seed === undefined ? ` --seed ${seed}` : ''})`;
process.stderr.write(`soak: ${what}; memory sampled after call ${warmupCalls} and at the end\n`);

const progress = o.progress ? new Progress(o.calls) : undefined;
const started = performance.now();
let results;
try {
  const arg = { seed, calls: o.calls, budget: o.budget, checkEvery: o.checkEvery, warmupCalls, corrupt: o.corrupt, reportMs: 100 };
  results = await runRanks({ backend, ranks: o.ranks, lanes: o.lanes, timeoutMs: o.timeoutMs, onReport: (_, msg) => progress?.update(msg.calls) }, rankModule, 'soak', arg);
} catch (err) {
  progress?.stop();
  console.log(`soak FAILED: ${what}: ${err.message} ${rerun}`);
  process.exit(1);
}
progress?.stop();
const seconds = (performance.now() - started) / 1000;

const growth = judge(results);
if (o.json) writeFileSync(o.json, JSON.stringify({ backend, ranks: o.ranks, calls: o.calls, seed, budget: o.budget, lanes: o.lanes, seconds, growth, results }, null, 2) + '\n');
const r0 = results[0];
const made = `${r0.direct} direct, ${r0.inBursts} in ${r0.bursts} bursts, ${r0.replayed} replayed in ${r0.replays} launches (${r0.recaptures} recaptures); ${r0.refused} refused as required`;
const checked = o.checkEvery === 1 ? 'every call checked' : `${r0.checked} of ${r0.calls} calls checked (1 good call in ${o.checkEvery}, every refused one)`;
const memory = growth.lines.join(', ');
if (growth.failures.length > 0) {
  console.log(`soak FAILED: ${what}: ${growth.failures.join('; ')}; ${memory} ${rerun}`);
  process.exit(1);
}
console.log(`soak ok: ${what}, ${seconds.toFixed(1)} s (${Math.round(o.calls / seconds)} calls/s): ${made}; ${checked}; growth from call ${r0.start.calls} to the end: ${memory}`);

/** Growth between the two samples, against the limits: what to print, and what failed. */
function judge(results) {
  const mib = (b) => `${b >= 0 ? '+' : '-'}${(Math.abs(b) / MiB).toFixed(1)} MiB`;
  const lines = [];
  const failures = [];
  const limit = (name, grew, max, rank) => {
    lines.push(`${name} ${mib(grew)} (limit ${formatBytes(max)})`);
    if (grew > max) failures.push(`${name} grew ${mib(grew)}${rank === undefined ? '' : ` on rank ${rank}`}, past the limit of ${formatBytes(max)}`);
  };
  // RSS is the process's: every rank samples the same figure, rank 0's pair is as good as any.
  limit('rss', results[0].end.rss - results[0].start.rss, o.maxRssGrowth);
  const heap = maxBy(results, (r) => r.end.js - r.start.js);
  limit('js heap', heap.value, o.maxHeapGrowth, heap.rank);
  const drop = maxBy(results, (r) => r.start.free - r.end.free);
  if (backend === 'cpu') lines.push(`machine free memory ${mib(-drop.value)} (not limited: shared with every process)`);
  else limit('device memory in use', drop.value, o.maxDeviceGrowth, drop.rank);
  let opened = 0;
  for (const r of results) {
    const extra = added(r.start.resources, r.end.resources);
    opened = Math.max(opened, extra.length);
    if (extra.length > 0) failures.push(`rank ${r.rank} ended with ${extra.length} more open handles: ${extra.join(', ')}`);
  }
  lines.push(`open handles +${opened}`);
  return { lines, failures };
}

function maxBy(results, f) {
  return results.reduce((best, r) => (f(r) > best.value ? { value: f(r), rank: r.rank } : best), { value: -Infinity, rank: -1 });
}

/** What `after` holds beyond `before` (multisets of resource types). */
function added(before, after) {
  const left = [...before];
  return after.filter((x) => {
    const i = left.indexOf(x);
    if (i < 0) return true;
    left.splice(i, 1);
    return false;
  });
}
