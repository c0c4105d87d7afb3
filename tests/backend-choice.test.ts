// The backend a job gets when it names none: nccl when it spans nodes (the cuda and cpu backends
// reach the ranks of one machine only), cuda on a GPU, cpu elsewhere; a job across nodes without a
// GPU is refused. Checked on the rule, and end to end with two launchers on this host acting as two
// nodes of one job (the launcher's variables carry the job's shape to the ranks).
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { once } from 'node:events';
import { createServer } from 'node:net';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { chooseBackend } from '../src/backends/create.js';
import { UsageError } from '../src/errors.js';
import { cudaDeviceCount } from '../src/cuda/probe.js';
import { linesOf, runLaunch } from './support/launch-capture.js';

test('one machine: cuda with a GPU, cpu without; across nodes: nccl, or refused without a GPU', () => {
  assert.deepEqual(chooseBackend(undefined, true), { backend: 'cuda' });
  assert.deepEqual(chooseBackend(undefined, false), { backend: 'cpu' });
  assert.deepEqual(chooseBackend({ rank: 0, worldSize: 8, localWorldSize: 8 }, true), { backend: 'cuda' });
  assert.deepEqual(chooseBackend({ rank: 3, worldSize: 4, localWorldSize: 4 }, false), { backend: 'cpu' });
  const across = chooseBackend({ rank: 5, worldSize: 16, localWorldSize: 8 }, true);
  assert.equal(across.backend, 'nccl');
  assert.match(across.note ?? '', /spans more than one node \(16 ranks, 8 on this node\).*nccl/);
  assert.throws(
    () => chooseBackend({ rank: 0, worldSize: 2, localWorldSize: 1 }, false),
    (err: Error) => err instanceof UsageError && /spans more than one node \(2 ranks, 1 on this node\) and no GPU/.test(err.message),
  );
});

async function freePort(): Promise<number> {
  const server = createServer();
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  const port = (server.address() as { port: number }).port;
  server.close();
  await once(server, 'close');
  return port;
}

function gpuVisible(): boolean {
  try {
    return cudaDeviceCount() > 0;
  } catch {
    return false;
  }
}

test('two launchers as two nodes of one job: each rank picks nccl, or is refused without a GPU', { timeout: 20_000 }, async () => {
  const masterPort = await freePort();
  const env = { A2AV_STORE_TOKEN: randomBytes(32).toString('hex') };
  const command = [process.execPath, fileURLToPath(new URL('../../tests/fixtures/backend-choice-rank.mjs', import.meta.url))];
  const nodes = await Promise.all([0, 1].map((nodeRank) => runLaunch({ nprocs: 1, nnodes: 2, nodeRank, masterPort, masterAddr: '127.0.0.1', env, command })));
  const gpu = gpuVisible();
  for (const [nodeRank, node] of nodes.entries()) {
    assert.equal(node.code, 0, node.stderr);
    const seen = JSON.parse(linesOf(node.stdout, nodeRank)[0] ?? 'null');
    if (gpu) {
      assert.deepEqual(seen, { backend: 'nccl' });
    } else {
      assert.equal(seen.code, 'A2AV_USAGE');
      assert.match(seen.message, /spans more than one node \(2 ranks, 1 on this node\)/);
    }
  }
});
