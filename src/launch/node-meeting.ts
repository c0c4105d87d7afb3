// The launchers of a job that spans nodes meet at node 0's store before any starts its ranks, as
// torchrun's agents do at their rendezvous: every node must run as many ranks (ranks are numbered
// from -n), and each node rank must be started once. Otherwise a node started alone, or with
// another -n, ran its program with ranks numbered for a job that does not exist.
import type { Writable } from 'node:stream';
import { StoreError, UsageError } from '../errors.js';
import { TcpStoreClient } from '../world/tcp-store.js';

/** How long a launcher waits for the other nodes to join (torchrun's default rendezvous timeout is 900 s). */
export const NODE_JOIN_MS = 900_000;
/** After this long without every node, the wait is said on stderr, once. */
const SAY_WAITING_MS = 5000;

export interface NodeMeeting {
  nprocs: number;
  nnodes: number;
  nodeRank: number;
  masterAddr: string;
  port: number;
  token: string;
  stderr: Writable;
  joinTimeoutMs?: number;
}

/** Resolves once every node of the job has joined with the same -n; throws UsageError otherwise. */
export async function meetNodes(m: NodeMeeting): Promise<void> {
  const joinMs = m.joinTimeoutMs ?? NODE_JOIN_MS;
  const deadline = Date.now() + joinMs;
  const said = setTimeout(() => m.stderr.write(`a2av launch: node ${m.nodeRank} waits for the job's other nodes at ${m.masterAddr}:${m.port} (up to ${Math.round(joinMs / 1000)} s)\n`), SAY_WAITING_MS);
  let store: TcpStoreClient | undefined;
  try {
    try {
      store = await TcpStoreClient.connect({ host: m.masterAddr, port: m.port, token: m.token, timeoutMs: joinMs, connectTimeoutMs: joinMs, servedBy: "node 0's a2av launch" });
    } catch (err) {
      if (err instanceof StoreError && err.reason === 'unreachable') {
        throw new UsageError(`launch: node 0's a2av launch did not answer at ${m.masterAddr}:${m.port} within ${Math.round(joinMs / 1000)} s (start it there with --node-rank 0 and the same --master-port and A2AV_STORE_TOKEN)`, { cause: err });
      }
      throw err;
    }
    if ((await store.add(`a2av/launch/node/${m.nodeRank}`, 1)) > 1) {
      throw new UsageError(`launch: node ${m.nodeRank} has joined this job already: another a2av launch was started with --node-rank ${m.nodeRank}`);
    }
    await store.set(`a2av/launch/nprocs/${m.nodeRank}`, new TextEncoder().encode(String(m.nprocs)));
    for (let node = 0; node < m.nnodes; node++) {
      if (node === m.nodeRank) continue;
      let theirs: number;
      try {
        theirs = Number(new TextDecoder().decode(await store.get(`a2av/launch/nprocs/${node}`, Math.max(1, deadline - Date.now()))));
      } catch (err) {
        if (err instanceof StoreError && err.reason === 'timeout') {
          throw new UsageError(`launch: node ${node} of ${m.nnodes} did not join within ${Math.round(joinMs / 1000)} s (start a2av launch --node-rank ${node} there, with the same --master-addr, --master-port and A2AV_STORE_TOKEN)`, { cause: err });
        }
        throw err;
      }
      if (theirs !== m.nprocs) {
        throw new UsageError(`launch: node ${node} runs ${theirs} ranks and node ${m.nodeRank} ${m.nprocs}: every node must run as many (-n; ranks are numbered from it)`);
      }
    }
  } finally {
    clearTimeout(said);
    await store?.close();
  }
}
