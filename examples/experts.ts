// MoE expert exchange at the level of PyTorch's all_to_all_vdev_2d (dispatch) and _offset
// (combine), on W ranks as threads: each runs expertsStep() (experts-step.ts), with exchange plans
// that move two payloads of one routing with a single splits exchange.
//   node dist/examples/experts.js [--backend cpu|cuda|nccl] [--ranks 4]
import { runRanks } from 'a2av';
import { main } from './common.js';

await main(async ({ backend, ranks }) => {
  const lines = await runRanks<{ steps: number }, string>({ backend, ranks }, new URL('./experts-step.js', import.meta.url), 'expertsStep', { steps: 3 });
  for (const line of lines) console.log(line);
});
