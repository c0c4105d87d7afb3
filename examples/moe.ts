// A MoE layer's token traffic on W ranks as threads: each runs moeStep() (moe-step.ts), which
// dispatches its tokens to their top-k experts and combines the experts' outputs back.
//   node dist/examples/moe.js [--backend cpu|cuda|nccl] [--ranks 4]
import { runRanks } from 'a2av';
import { main } from './common.js';

await main(async ({ backend, ranks }) => {
  const lines = await runRanks<{ steps: number }, string>({ backend, ranks }, new URL('./moe-step.js', import.meta.url), 'moeStep', { steps: 3 });
  for (const line of lines) console.log(line);
});
