#!/usr/bin/env node
// Where a token MoE dispatch and combine spend their time: W ranks as threads on the visible GPUs,
// the DeepSeek-V3 shape by default (256 experts, top-8, hidden 7168 bf16, uniform routing), each
// call split into its steps by timing events recorded between them (route+gather, exchange,
// layout; exchange, reduce), median over the calls, beside the plain call's time per call.
//   node scripts/probe/token-steps.mjs W '{"tokens":[1,128,4096],"layout":"expanded"}'
// Other keys: numExperts, topk, hidden, iters (calls timed, default 50), seed; A2AV_PROBE_BACKEND=cpu
// runs the program on the cpu backend (its host clock times nothing useful: a check of the probe).
// The events keep each step from launching before the one ahead of it ends, so the steps can add
// up to more than the plain call; on cuda also graph µs per call with steps left out (their
// buffers keep the last full call's contents), what each step adds in a graph; env switches (A2AV_MOE_GATHER=0, A2AV_MOE_GRID=...) pass through.
import { runRanks } from '../../dist/src/world/threads.js';

const W = Number(process.argv[2] ?? 2);
const arg = JSON.parse(process.argv[3] ?? '{"tokens":[1,128,4096]}');
const backend = process.env.A2AV_PROBE_BACKEND ?? 'cuda';
const ranks = await runRanks({ backend, ranks: W, timeoutMs: Number(process.env.A2AV_TIMEOUT_MS ?? 60_000) }, new URL('./token-steps-rank.mjs', import.meta.url), 'tokenSteps', arg);
const f = (x) => (x === undefined ? '-' : x.toFixed(1));
console.log(`# token steps: ${backend}, W=${W}, ${arg.layout ?? 'expanded'}, ${JSON.stringify(arg)}; µs, the slowest rank's median per step`);
for (const [i, row] of ranks[0].entries()) {
  for (const op of ['dispatch', 'combine']) {
    const names = Object.keys(row[op].steps);
    const worst = Object.fromEntries(names.map((n) => [n, Math.max(...ranks.map((r) => r[i][op].steps[n]))]));
    const sum = names.reduce((s, n) => s + worst[n], 0);
    const plain = Math.max(...ranks.map((r) => r[i][op].plainUs));
    console.log(`${String(row.tokens).padStart(5)} tokens ${op.padEnd(8)} plain ${f(plain).padStart(8)}  marked sum ${f(sum).padStart(8)}  ` + names.map((n) => `${n} ${f(worst[n])}`).join('  '));
    if (row[op].graph) console.log(`${' '.repeat(20)}graph µs: ` + Object.keys(row[op].graph).map((n) => `${n} ${f(Math.max(...ranks.map((r) => r[i][op].graph[n])))}`).join('  '));
  }
}
