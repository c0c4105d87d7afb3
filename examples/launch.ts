// One process per rank: a launcher starts this program W times and init() builds each process's
// communicator from the launcher's variables; every rank then runs exchange() (exchange.ts).
//   npx a2av launch -n 4 -- node dist/examples/launch.js [--backend cpu|cuda|nccl]
// (torchrun, srun or mpirun work too: set A2AV_STORE_PORT to a free port, rank 0 serves the store
// there, and A2AV_STORE_TOKEN to one secret on every rank; MASTER_ADDR names rank 0's host. README, "Use".)
import { init } from 'a2av';
import { main } from './common.js';
import { exchange } from './exchange.js';

await main(async ({ backend }) => {
  const comm = await init({ backend, timeoutMs: 30_000 });
  try {
    console.log(await exchange(comm, { steps: 3 }));
  } finally {
    await comm.close(); // also closes this process's connection to the job's store
  }
}, { launched: true });
