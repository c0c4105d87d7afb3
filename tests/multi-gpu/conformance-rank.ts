// The conformance suite with one process per rank, for scripts/multi-gpu.sh:
//   node dist/tests/multi-gpu/conformance-rank.js list <backend> <gpus>
//     prints "<index> <ranks> <name>" for each case of tests/conformance/suite.ts that <backend> can
//     run on a machine with <gpus> GPUs: ranks <= gpus (one process per GPU at most).
//   a2av launch -n <ranks> -- node dist/tests/multi-gpu/conformance-rank.js run <backend> <index> <seed>
//     runs case <index> on this process's communicator (init(): rank and world from the launcher),
//     prints one JSON line per rank, exits 1 when the rank failed. <backend> 'default': the one
//     init() picks for this job (nccl when it spans nodes), named in the line.
import type { Comm } from '../../src/backends/backend.js';
import type { BackendName } from '../../src/backends/backend.js';
import { init } from '../../src/world/init.js';
import * as cases from '../conformance/cases.js';
import { caseArg, notFor, suite } from '../conformance/suite.js';

type Program = (comm: Comm, arg: unknown) => Promise<unknown>;
const programs = cases as unknown as Record<string, Program>;

const [command, backendText, third, seedText] = process.argv.slice(2);
const backend = backendText as BackendName;

if (command === 'list') {
  const gpus = Number(third);
  suite.forEach((c, index) => {
    if (c.ranks <= gpus && notFor(backend, c) === undefined) console.log(`${index} ${c.ranks} ${c.name}`);
  });
} else if (command === 'run') {
  const c = suite[Number(third)];
  const seed = Number(seedText);
  const rank = Number(process.env.RANK);
  const print = (fields: object) =>
    console.log(JSON.stringify({ rank, backend, case: c?.name, seed, ...fields }, (_k, v) => (typeof v === 'bigint' ? Number(v) : v)));
  let comm: Comm | undefined;
  try {
    if (c === undefined) throw new Error(`no case ${third} (the suite has ${suite.length})`);
    if (Number(process.env.WORLD_SIZE) !== c.ranks) throw new Error(`case '${c.name}' needs ${c.ranks} ranks, this job has ${process.env.WORLD_SIZE}`);
    comm = await init({ backend: backendText === 'default' ? undefined : backend, timeoutMs: c.timeoutMs ?? 30_000, lanes: c.lanes ?? 2 });
    const skip = notFor(comm.backend, c);
    if (skip !== undefined) throw new Error(`case '${c.name}' is not for ${comm.backend}: ${skip}`);
    print({ ok: true, picked: comm.backend, device: comm.deviceName, result: await programs[c.fn]!(comm, caseArg(c, seed)) });
  } catch (err) {
    const e = err as Error & Record<string, unknown>;
    print({ ok: false, error: { ...e, name: e.name, message: e.message }, rerun: `A2AV_SEED=${seed}` });
    process.exitCode = 1;
  } finally {
    await comm?.close();
  }
} else {
  console.error('usage: conformance-rank.js list <backend> <gpus> | run <backend> <case> <seed>');
  process.exitCode = 2;
}
