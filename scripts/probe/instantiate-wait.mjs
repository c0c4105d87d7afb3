#!/usr/bin/env node
// Does a rank's capture of an a2av call wait for its peers' calls spinning on the GPU? W ranks as
// threads on one GPU (one context): ranks 1..W-1 issue a call, which spins until rank 0's matching
// call arrives; rank 0 first captures a graph of `kind` (cuGraphInstantiate inside), then issues
// it. A capture that waited for the spinning calls takes about the timeout, and their calls fail.
// scripts/probe/instantiate-wait.cu is the same question for plain kernels.
//   node scripts/probe/instantiate-wait.mjs [W=8] [rowsPerChunk=146] [experts=16] [rowBytes=14336]
import { runRanks } from '../../dist/src/world/threads.js';

const [W = 8, n = 146, E = 16, rb = 14336] = process.argv.slice(2).map(Number);
// peers: how ranks 1..W-1 issue their call (eager, or a graph replay of their own); prior: every
// rank first holds a replayed combine graph; warm: each kind ran eagerly before.
const cases = (process.env.PROBE_CASES ?? 'eager,graph,graph+prior').split(',');
for (const c of cases) {
  const peers = c.startsWith('graph') ? 'graph' : 'eager', prior = c.endsWith('+prior');
  for (const kind of ['dispatch', 'combine', '1d-there', '1d-back']) {
    for (const warm of [true, false]) {
      const name = `peers ${c.padEnd(11)} ${kind.padEnd(9)} ${warm ? 'warm' : 'cold'}`;
      try {
        const rows = await runRanks({ backend: process.env.PROBE_BACKEND ?? 'cuda', ranks: W, timeoutMs: 4000 }, new URL('./instantiate-wait-rank.mjs', import.meta.url), 'probe', { n, E, rb, kind, warm, peers, prior });
        console.log(`${name}: rank 0's capture ${rows[0].captureMs.toFixed(2)} ms, every call ok`);
      } catch (e) {
        console.log(`${name}: failed: ${String(e.message).split('\n')[0].slice(0, 200)}`);
      }
    }
  }
}
