// W ranks as threads of this process: runRanks starts them, each runs exchange() (exchange.ts) with
// its own communicator, and their results come back in rank order.
//   node dist/examples/threads.js [--backend cpu|cuda|nccl] [--ranks 4]
import { runRanks } from 'a2av';
import { main } from './common.js';

await main(async ({ backend, ranks }) => {
  // The rank program is named by module and export: every thread imports it for itself.
  const lines = await runRanks<{ steps: number }, string>({ backend, ranks }, new URL('./exchange.js', import.meta.url), 'exchange', { steps: 3 });
  for (const line of lines) console.log(line);
});
