#!/usr/bin/env node
// allReduce's sizes (tile, one-shot limits, slots: A2AV_PROBE_AR_*, src/backends/cuda/probe-defines.ts)
// against each other in one run: for each setting, `a2av bench allreduce` with one process per rank
// under a2av launch, and NCCL's once; then one table of median µs per size, each setting's ratio to
// NCCL beside it. From the package root after the build:
//   node scripts/probe/all-reduce-sweep.mjs [--ranks 2] [--backend cuda] [--no-nccl] [--min 4K] [--max 256M] \
//     '' 'A2AV_PROBE_AR_TILE_BYTES=65536' 'A2AV_PROBE_AR_ONE_SHOT_MAX=1048576 A2AV_PROBE_AR_ONE_SHOT_TOTAL=2097152'
// ('' is the defaults.) Full JSON of every run goes to $OUT or ./all-reduce-sweep-out.
import { spawnSync } from 'node:child_process';
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { parseArgs } from 'node:util';

const { values: o, positionals } = parseArgs({
  allowPositionals: true,
  options: {
    ranks: { type: 'string', default: '2' },
    backend: { type: 'string', default: 'cuda' },
    'no-nccl': { type: 'boolean', default: false },
    min: { type: 'string', default: '4K' },
    max: { type: 'string', default: '256M' },
    dtype: { type: 'string', default: 'f32' },
  },
});
const settings = positionals.length > 0 ? positionals : [''];
const out = process.env.OUT ?? './all-reduce-sweep-out';
mkdirSync(out, { recursive: true });

const runsOf = new Map();
/** One bench run under a2av launch: rank 0's JSON. */
function bench(backend, defines) {
  const args = ['dist/src/cli.js', 'launch', '-n', o.ranks, '--output-ranks', '0', '--no-prefix', '--', process.execPath, 'dist/src/cli.js',
    'bench', 'allreduce', '--backend', backend, '--min', o.min, '--max', o.max, '--dtype', o.dtype, '--json'];
  const env = { ...process.env, A2AV_PROBE_DEFINES: defines };
  const r = spawnSync(process.execPath, args, { env, encoding: 'utf8', timeout: 600_000 });
  const base = `${backend}-${defines.replace(/A2AV_PROBE_AR_/g, '').replace(/\s+/g, '_') || 'defaults'}`;
  const seen = (runsOf.get(base) ?? 0) + 1;
  runsOf.set(base, seen);
  const name = seen === 1 ? base : `${base}-${seen}`;
  writeFileSync(join(out, `${name}.json`), r.stdout);
  writeFileSync(join(out, `${name}.err`), r.stderr);
  if (r.status !== 0) {
    console.error(`${name}: exit ${r.status}: ${r.stderr.trim().split('\n').slice(-2).join(' | ')}`);
    return undefined;
  }
  return JSON.parse(r.stdout);
}

// NCCL before and after the settings, its faster median per size kept: its small calls have
// measured 7.5-8 µs in one run and 15-19 µs in another on the same kind of machine, so one reading
// of it, at whatever point the GPUs' clocks stood, is not a fair baseline.
const ncclBefore = o['no-nccl'] ? undefined : bench('nccl', '');
const runs = settings.map((s) => ({ label: s.trim() === '' ? 'defaults' : s.trim().replace(/A2AV_PROBE_AR_/g, ''), result: bench(o.backend, s.trim()) }));
const ncclAfter = o['no-nccl'] ? undefined : bench('nccl', '');
const nccl = ncclBefore === undefined && ncclAfter === undefined ? undefined : {
  rows: [...new Set([...(ncclBefore?.rows ?? []), ...(ncclAfter?.rows ?? [])].map((x) => x.bytes))].map((bytes) => ({
    bytes,
    timeUs: Math.min(...[ncclBefore, ncclAfter].map((r) => r?.rows.find((x) => x.bytes === bytes)?.timeUs ?? Infinity)),
  })),
};
const sizes = [...new Set(runs.flatMap((r) => r.result?.rows.map((x) => x.bytes) ?? []))].sort((a, b) => a - b);
const timeAt = (result, bytes) => result?.rows.find((x) => x.bytes === bytes)?.timeUs;
const fmt = (us) => (us === undefined ? '-' : us < 100 ? us.toFixed(2) : us.toFixed(1));
const human = (b) => (b >= 2 ** 20 ? `${b / 2 ** 20} MiB` : `${b / 1024} KiB`);
console.log(`# allReduce ${o.dtype}, ${o.ranks} ranks, ${o.backend}; µs per call (median), x = NCCL time / this time; nccl = the faster of its runs before and after`);
runs.forEach((r, i) => console.log(`# [${i}] ${r.label}`));
const head = ['bytes', ...(nccl ? ['nccl'] : []), ...runs.map((_, i) => `[${i}]`)];
const rows = sizes.map((b) => {
  const n = timeAt(nccl, b);
  return [human(b), ...(nccl ? [fmt(n)] : []), ...runs.map((r) => {
    const t = timeAt(r.result, b);
    return t === undefined ? '-' : n === undefined ? fmt(t) : `${fmt(t)} (${(n / t).toFixed(2)}x)`;
  })];
});
const widths = head.map((h, i) => Math.max(h.length, ...rows.map((r) => r[i].length)));
for (const r of [head, ...rows]) console.log(r.map((c, i) => c.padStart(widths[i])).join('  '));
