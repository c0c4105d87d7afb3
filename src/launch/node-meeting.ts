// The launchers of a job that spans nodes meet at node 0's store before any starts its ranks, as
// torchrun's agents do at their rendezvous: every node must run as many ranks (ranks are numbered
// from -n), all with the same --nnodes, and each node rank must be started once. Otherwise a node
// started alone, or with another -n, ran its program with ranks numbered for a job that does not exist.
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

const key = (what: string, node: number) => `a2av/launch/${what}/${node}`;
const ONE = new Uint8Array([1]);

/**
 * Resolves once every node of the job has joined with the same -n and --nnodes; throws UsageError
 * otherwise. Returns the connection it met on: this launcher holds it while its ranks run, so that a
 * second launcher of the same node rank is refused while this one lives, and let in once it has gone.
 */
export async function meetNodes(m: NodeMeeting): Promise<TcpStoreClient> {
  const joinMs = m.joinTimeoutMs ?? NODE_JOIN_MS;
  const started = Date.now();
  const deadline = started + joinMs;
  const left = () => Math.max(1, deadline - Date.now());
  const said = setTimeout(() => m.stderr.write(`a2av launch: node ${m.nodeRank} waits for the job's other nodes at ${m.masterAddr}:${m.port} (up to ${Math.round(joinMs / 1000)} s)\n`), SAY_WAITING_MS);
  let store: TcpStoreClient | undefined;
  try {
    store = await connect(m, joinMs, started);
    const me = m.nodeRank;
    // Each launcher of a node rank is numbered; its connection's end, however it ends, says it left.
    const join = await store.add(key('joins', me), 1);
    await store.setOnClose(`${key('left', me)}/${join}`, ONE);
    for (let earlier = 1; earlier < join; earlier++) {
      if (!(await isSet(store, `${key('left', me)}/${earlier}`))) {
        throw new UsageError(`launch: node ${me} has joined this job already: another a2av launch of --node-rank ${me} is running`);
      }
    }
    await store.set(key('shape', me), new TextEncoder().encode(`${m.nprocs} ${m.nnodes}`));
    let refusal: UsageError | undefined;
    for (let node = 0; node < m.nnodes && refusal === undefined; node++) {
      if (node === me) continue;
      const [nprocs, nnodes] = new TextDecoder().decode(await waitFor(store, key('shape', node), left(), joinMs, node, m)).split(' ').map(Number);
      if (nnodes !== m.nnodes) refusal = new UsageError(`launch: node ${node} was started with --nnodes ${nnodes} and node ${me} with ${m.nnodes}: every node must give the same`);
      else if (nprocs !== m.nprocs) refusal = new UsageError(`launch: node ${node} runs ${nprocs} ranks and node ${me} ${m.nprocs}: every node must run as many (-n; ranks are numbered from it)`);
    }
    // Every node has read the others before any starts its ranks or refuses: node 0's store closes
    // with node 0, and a node still reading would be told that node 0 died rather than why.
    await store.set(key('met', me), ONE);
    try {
      for (let node = 0; node < m.nnodes; node++) if (node !== me) await waitFor(store, key('met', node), left(), joinMs, node, m);
    } catch (err) {
      throw refusal ?? err;
    }
    if (refusal !== undefined) throw refusal;
    const met = store;
    store = undefined;
    return met;
  } finally {
    clearTimeout(said);
    await store?.close();
  }
}

async function connect(m: NodeMeeting, joinMs: number, started: number): Promise<TcpStoreClient> {
  try {
    return await TcpStoreClient.connect({ host: m.masterAddr, port: m.port, token: m.token, timeoutMs: joinMs, connectTimeoutMs: joinMs, servedBy: "node 0's a2av launch" });
  } catch (err) {
    // Refusals are retried to the end of the wait; anything else (a misspelt host) is said as it is.
    if (err instanceof StoreError && err.reason === 'unreachable' && Date.now() - started >= joinMs) {
      throw new UsageError(`launch: node 0's a2av launch did not answer at ${m.masterAddr}:${m.port} within ${Math.round(joinMs / 1000)} s (start it there with --node-rank 0 and the same --master-port and A2AV_STORE_TOKEN)`, { cause: err });
    }
    throw err;
  }
}

/** Whether `name` is set now. */
async function isSet(store: TcpStoreClient, name: string): Promise<boolean> {
  try {
    await store.get(name, 0);
    return true;
  } catch (err) {
    if (err instanceof StoreError && err.reason === 'timeout') return false;
    throw err;
  }
}

/** `name`'s value once node `node` has set it, until the meeting's end. */
async function waitFor(store: TcpStoreClient, name: string, ms: number, joinMs: number, node: number, m: NodeMeeting): Promise<Uint8Array> {
  try {
    return await store.get(name, ms);
  } catch (err) {
    if (err instanceof StoreError && err.reason === 'timeout') {
      throw new UsageError(`launch: node ${node} of ${m.nnodes} did not join within ${Math.round(joinMs / 1000)} s (start a2av launch --node-rank ${node} there, with the same --master-addr, --master-port and A2AV_STORE_TOKEN)`, { cause: err });
    }
    throw err;
  }
}
