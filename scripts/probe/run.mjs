#!/usr/bin/env node
// The tuning probe behind docs/perf.md's experiment table: for each config, W ranks as threads on
// the GPU, eager and graph (up to 100 calls per graph) time per call, and the copy reference.
//   node scripts/probe/run.mjs '[{"W":8,"sizes":[65536]},{"W":8,"sizes":[65536],"zero":true},
//                                {"W":1,"sizes":[1073741824],"plans":[null,{"blocks":132,"threads":1024}]}]'
// zero: all splits 0 (the synchronisation alone); plans: null is the default plan.
import { runRanks } from '../../dist/src/world/threads.js';

const configs = JSON.parse(process.argv[2] ?? '[]');
for (const c of configs) {
  const arg = { sizes: c.sizes, rowBytes: c.rowBytes ?? 1024, plans: c.plans ?? [null], zero: c.zero };
  const rows = await runRanks({ backend: 'cuda', ranks: c.W, timeoutMs: 20000 }, new URL('./rank.mjs', import.meta.url), 'perf', arg);
  for (const row of rows[0]) console.log(JSON.stringify(row));
}
