// TCP rendezvous store: auth, hostile input, timeouts, atomicity, barriers, server loss.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { connect as netConnect, createServer, type Socket } from 'node:net';
import { after, before, describe, test } from 'node:test';
import { StoreError, UsageError } from '../src/errors.js';
import { encodeAuth, encodeRequest, MAX_VALUE_BYTES, Op } from '../src/world/tcp-protocol.js';
import { TcpStoreClient, TcpStoreServer } from '../src/world/tcp-store.js';
import { allGather, GatherSweep } from '../src/world/all-gather.js';

const TOKEN = 'a'.repeat(64);
const T = { timeout: 5000 };
const text = (bytes: Uint8Array) => Buffer.from(bytes).toString('utf8');
const bytes = (s: string) => new TextEncoder().encode(s);

function client(server: TcpStoreServer, extra: { token?: string; timeoutMs?: number } = {}) {
  return TcpStoreClient.connect({ host: server.host, port: server.port, token: TOKEN, timeoutMs: 2000, ...extra });
}

/** Opens a raw socket, writes `frames`, and resolves with how long the server took to close it. */
function rawSession(port: number, frames: Buffer[], limitMs = 2000): Promise<{ closedAfterMs: number; received: Buffer }> {
  return new Promise((resolve, reject) => {
    const started = Date.now();
    const chunks: Buffer[] = [];
    const socket: Socket = netConnect({ host: '127.0.0.1', port }, () => {
      for (const frame of frames) socket.write(frame);
    });
    const timer = setTimeout(() => {
      socket.destroy();
      reject(new Error(`server kept the connection open for ${limitMs} ms`));
    }, limitMs);
    socket.on('data', (chunk) => chunks.push(chunk));
    socket.on('error', () => {});
    socket.on('close', () => {
      clearTimeout(timer);
      resolve({ closedAfterMs: Date.now() - started, received: Buffer.concat(chunks) });
    });
  });
}

function header(length: number): Buffer {
  const head = Buffer.alloc(4);
  head.writeUInt32BE(length, 0);
  return head;
}

async function rejectsWith(promise: Promise<unknown>, reason: string, pattern?: RegExp): Promise<StoreError> {
  const error = await promise.then(
    () => assert.fail('expected a StoreError'),
    (e: unknown) => e,
  );
  assert.ok(error instanceof StoreError, `expected StoreError, got ${String(error)}`);
  assert.equal(error.code, 'A2AV_STORE');
  assert.equal(error.reason, reason);
  if (pattern) assert.match(error.message, pattern);
  return error;
}

describe('tcp store', () => {
  let server: TcpStoreServer;
  before(async () => {
    server = await TcpStoreServer.listen({ token: TOKEN, authTimeoutMs: 300 });
  });
  after(() => server.close());

  test('binds 127.0.0.1 on a free port by default', T, () => {
    assert.equal(server.host, '127.0.0.1');
    assert.ok(server.port > 0);
  });

  test('set, get (waiting for a later set), add', T, async () => {
    const a = await client(server);
    const b = await client(server);
    const waiting = b.get('basic/late', 2000);
    await a.set('basic/late', bytes('hello'));
    assert.equal(text(await waiting), 'hello');
    assert.equal(await a.add('basic/n', 5), 5);
    assert.equal(await b.add('basic/n', -2), 3);
    assert.equal(text(await a.get('basic/n')), '3', 'counters read back as decimal text');
    await rejectsWith(a.add('basic/late', 1), 'rejected', /integer/);
    await Promise.all([a.close(), b.close()]);
  });

  test('values up to 1 MiB round-trip; larger values and keys are refused before sending', T, async () => {
    const c = await client(server);
    const big = new Uint8Array(MAX_VALUE_BYTES).map((_, i) => i % 251);
    await c.set('big', big);
    assert.deepEqual(await c.get('big'), big);
    await assert.rejects(c.set('big', new Uint8Array(MAX_VALUE_BYTES + 1)), UsageError);
    await assert.rejects(c.get('k'.repeat(4097)), UsageError);
    await assert.rejects(c.get(''), UsageError);
    await c.close();
  });

  test('a wrong token is rejected and the server keeps serving others', T, async () => {
    const good = await client(server);
    const error = await rejectsWith(client(server, { token: 'b'.repeat(64) }), 'rejected', /refused/);
    assert.ok(!error.message.includes(TOKEN) && !error.message.includes('b'.repeat(64)), 'no token in messages');
    await rejectsWith(client(server, { token: TOKEN.slice(1) }), 'rejected');
    await assert.rejects(client(server, { token: '' }), UsageError);
    await good.set('auth/ok', bytes('1'));
    assert.equal(text(await good.get('auth/ok')), '1');
    await good.close();
  });

  test('requests without authentication, or silence, close the connection', T, async () => {
    const unauthenticatedSet = encodeRequest({ op: Op.SET, id: 1, key: 'auth/sneak', value: Buffer.from('x') });
    const noAuth = await rawSession(server.port, [unauthenticatedSet]);
    assert.equal(noAuth.received.length, 0);
    const silent = await rawSession(server.port, []);
    assert.ok(silent.closedAfterMs >= 250, `dropped after the auth timeout (${silent.closedAfterMs} ms)`);
    // A long pre-auth frame is refused from its header alone.
    await rawSession(server.port, [header(100_000)]);
    const c = await client(server);
    assert.equal((await c.get('auth/sneak', 0).catch((e: StoreError) => e.reason)), 'timeout', 'the sneaky set did not land');
    await c.close();
  });

  test('malformed and oversized frames close only that connection', T, async () => {
    const survivor = await client(server);
    const pending = survivor.get('hostile/after', 3000);
    const auth = encodeAuth(TOKEN);
    const badKeyLength = encodeRequest({ op: Op.GET, id: 1, key: 'k', timeoutMs: 1 });
    badKeyLength.writeUInt16BE(60_000, 4 + 9); // key length field past the frame
    const cases: Record<string, Buffer[]> = {
      'unknown opcode': [auth, header(5), Buffer.from([0x7f, 0, 0, 0, 1])],
      'empty frame': [auth, header(0)],
      'truncated request': [auth, header(3), Buffer.from([Op.ADD, 0, 0])],
      'bad key length': [auth, badKeyLength],
      'invalid utf-8 key': [auth, encodeRequest({ op: Op.GET, id: 1, key: 'kk', timeoutMs: 1 }).fill(0xff, 4 + 11)],
      'oversized frame (header only)': [auth, header(MAX_VALUE_BYTES + 64 * 1024)],
      'garbage': [auth, Buffer.from('GET / HTTP/1.1\r\n\r\n')],
    };
    for (const [name, frames] of Object.entries(cases)) {
      const { received } = await rawSession(server.port, frames).catch((e: Error) => assert.fail(`${name}: ${e.message}`));
      // The AUTH_OK reply may arrive first; nothing else may.
      assert.ok(received.length <= 5, `${name}: got ${received.length} reply bytes`);
    }
    const other = await client(server);
    await other.set('hostile/after', bytes('still here'));
    assert.equal(text(await pending), 'still here');
    await Promise.all([survivor.close(), other.close()]);
  });

  test('get times out with a StoreError naming the key and the time waited', T, async () => {
    const c = await client(server);
    const started = Date.now();
    await rejectsWith(c.get('never/set', 150), 'timeout', /"never\/set".*150 ms/);
    const waited = Date.now() - started;
    assert.ok(waited >= 140 && waited < 1500, `waited ${waited} ms`);
    // The connection is still usable after a timeout.
    assert.equal(await c.add('after/timeout', 1), 1);
    await c.close();
  });

  test('add is atomic across 32 clients x 50 concurrent adds', T, async () => {
    const clients = await Promise.all(Array.from({ length: 32 }, () => client(server, { timeoutMs: 4000 })));
    const results = await Promise.all(clients.flatMap((c) => Array.from({ length: 50 }, () => c.add('atomic/n', 1))));
    assert.equal(new Set(results).size, 1600, 'every add saw a distinct value');
    assert.equal(Math.max(...results), 1600);
    assert.equal(text(await clients[0]!.get('atomic/n')), '1600');
    await Promise.all(clients.map((c) => c.close()));
  });

  test('barrier releases all ranks, is reusable, and names the shortfall on timeout', T, async () => {
    const world = await Promise.all(Array.from({ length: 8 }, () => client(server)));
    for (let round = 0; round < 3; round++) await Promise.all(world.map((c) => c.barrier('b8', 8, 2000)));
    const late = world.slice(0, 3).map((c) => c.barrier('b4', 4, 200));
    // All three checks attach at once: awaiting one by one would leave the later rejections unhandled for a moment.
    await Promise.all(late.map((arrival) => rejectsWith(arrival, 'timeout', /barrier "b4": 3 of 4 ranks arrived within 200 ms/)));
    await Promise.all(world.map((c) => c.close()));
  });

  test('connectFromEnv reads MASTER_ADDR, MASTER_PORT and A2AV_STORE_TOKEN', T, async () => {
    const env = { RANK: '0', WORLD_SIZE: '1', MASTER_ADDR: '127.0.0.1', MASTER_PORT: String(server.port), A2AV_STORE_TOKEN: TOKEN };
    const c = await TcpStoreClient.connectFromEnv({ env });
    assert.equal(await c.add('env/n', 1), 1);
    await c.close();
    await assert.rejects(TcpStoreClient.connectFromEnv({ env: { ...env, A2AV_STORE_TOKEN: undefined } }), { name: 'UsageError', message: /^no store to connect to: A2AV_STORE_TOKEN is not set; / });
    await assert.rejects(TcpStoreClient.connectFromEnv({ env: { ...env, MASTER_ADDR: undefined, MASTER_PORT: undefined } }),
      { name: 'UsageError', message: /^no store to connect to: MASTER_ADDR, MASTER_PORT \(or A2AV_STORE_PORT\) are not set; / });
    await assert.rejects(TcpStoreClient.connectFromEnv({ env: {} }), UsageError);
  });

  test('retries a refused connection until the server is listening', T, async () => {
    const probe = await TcpStoreServer.listen({ token: TOKEN });
    const port = probe.port;
    await probe.close();
    const connecting = TcpStoreClient.connect({ host: '127.0.0.1', port, token: TOKEN, timeoutMs: 3000 });
    await new Promise((r) => setTimeout(r, 200));
    const late = await TcpStoreServer.listen({ token: TOKEN, port });
    const c = await connecting;
    assert.equal(await c.add('n', 1), 1);
    await c.close();
    await late.close();
  });
});

describe('tcp store: server loss', () => {
  test('pending and later calls fail with "disconnected" when the server goes away', T, async () => {
    const server = await TcpStoreServer.listen({ token: TOKEN });
    const c = await client(server, { timeoutMs: 60_000 });
    const pending = c.get('gone/key', 60_000);
    const started = Date.now();
    await server.close();
    await rejectsWith(pending, 'disconnected', /"gone\/key".*closed/);
    assert.ok(Date.now() - started < 1000);
    await rejectsWith(c.set('gone/other', bytes('x')), 'disconnected');
    await c.close();
  });

  test('setOnClose: the server sets the key when the client closes, or when its process dies', T, async () => {
    const server = await TcpStoreServer.listen({ token: TOKEN });
    try {
      const watcher = await client(server, { timeoutMs: 5000 });
      const leaver = await client(server);
      await leaver.setOnClose('gone/leaver', bytes('left'));
      await assert.rejects(watcher.get('gone/leaver', 50), StoreError, 'not set while the client is there');
      await leaver.close();
      assert.equal(text(await watcher.get('gone/leaver', 2000)), 'left');
      // A process that dies without closing: its connection ends all the same.
      const script = `import { TcpStoreClient } from ${JSON.stringify(new URL('../src/world/tcp-store.js', import.meta.url).href)};
        const c = await TcpStoreClient.connect({ host: '127.0.0.1', port: ${server.port}, token: '${TOKEN}' });
        await c.setOnClose('gone/dead', new TextEncoder().encode('dead'));
        process.kill(process.pid, 'SIGKILL');`;
      const child = spawn(process.execPath, ['--input-type=module', '-e', script], { stdio: 'ignore' });
      assert.equal(text(await watcher.get('gone/dead', 4000)), 'dead');
      await once(child, 'exit');
      await watcher.close();
    } finally {
      await server.close();
    }
  });

  test('a port already served is a "listen" StoreError that says so and how out', T, async () => {
    const first = await TcpStoreServer.listen({ token: TOKEN });
    try {
      await rejectsWith(TcpStoreServer.listen({ token: TOKEN, port: first.port }), 'listen', /EADDRINUSE.*another process serves there.*pick another port/);
    } finally {
      await first.close();
    }
  });

  test('a client that loses a store it was told who serves names the server as gone', T, async () => {
    const server = await TcpStoreServer.listen({ token: TOKEN });
    const c = await TcpStoreClient.connect({ host: server.host, port: server.port, token: TOKEN, servedBy: 'rank 0 (A2AV_STORE_PORT)' });
    const pending = c.get('gone/key', 60_000);
    await server.close();
    await rejectsWith(pending, 'disconnected', /closed: rank 0 \(A2AV_STORE_PORT\), which served it, has exited or was killed/);
    await c.close();
  });

  test('no server: connect fails with "unreachable" after connectTimeoutMs', T, async () => {
    const probe = await TcpStoreServer.listen({ token: TOKEN });
    const port = probe.port;
    await probe.close();
    const started = Date.now();
    await rejectsWith(TcpStoreClient.connect({ host: '127.0.0.1', port, token: TOKEN, connectTimeoutMs: 300 }), 'unreachable', new RegExp(`127.0.0.1:${port}`));
    const waited = Date.now() - started;
    assert.ok(waited >= 280 && waited < 1500, `gave up after ${waited} ms`);
  });

  test('a service at the port that is not a2av\'s store (torchrun\'s at MASTER_PORT) times out authentication, pointing to A2AV_STORE_PORT', T, async () => {
    const other = createServer(() => {}); // takes the connection, never answers
    await new Promise<void>((r) => other.listen(0, '127.0.0.1', r));
    const port = (other.address() as { port: number }).port;
    try {
      await rejectsWith(TcpStoreClient.connect({ host: '127.0.0.1', port, token: TOKEN, timeoutMs: 300 }), 'timeout',
        /did not answer authentication within \d+ ms \(is this a2av's store\? under torchrun, srun or mpirun, set A2AV_STORE_PORT: rank 0 serves a2av's store there\)/);
    } finally {
      other.close();
    }
  });

  test('a server that stops answering cannot hang set or add', T, async () => {
    // Accepts and authenticates, then never replies (a stopped or wedged process).
    const mute = createServer((socket) => socket.once('data', () => socket.write(Buffer.from([0, 0, 0, 1, Op.AUTH_OK]))));
    await new Promise<void>((r) => mute.listen(0, '127.0.0.1', r));
    const port = (mute.address() as { port: number }).port;
    const c = await TcpStoreClient.connect({ host: '127.0.0.1', port, token: TOKEN, timeoutMs: 200 });
    await rejectsWith(c.set('mute/k', bytes('v')), 'timeout', /"mute\/k".*200 ms/);
    await rejectsWith(c.add('mute/n', 1), 'timeout');
    await c.close();
    mute.close();
  });
});

describe('a long job\'s store does not grow with its gathers', () => {
  test('delete removes a key (a get then waits for it again); deleting a missing key is no error', T, async () => {
    const server = await TcpStoreServer.listen({ token: TOKEN });
    const c = await client(server);
    try {
      await c.set('k', bytes('v'));
      assert.equal(text(await c.get('k', 0)), 'v');
      await c.delete('k');
      await assert.rejects(c.get('k', 50), (err: unknown) => err instanceof StoreError && err.reason === 'timeout');
      await c.delete('never-set');
    } finally {
      await c.close();
      await server.close();
    }
  });

  test('a series of gathers keeps only the keys a rank may still read: each rank removes its own once a later gather is complete', T, async () => {
    const server = await TcpStoreServer.listen({ token: TOKEN });
    const stores = await Promise.all([0, 1, 2].map(() => client(server)));
    try {
      const sweeps = stores.map((s) => new GatherSweep(s));
      const rounds = 40;
      for (let n = 0; n < rounds; n++) {
        const values = await Promise.all(stores.map((store, rank) =>
          allGather({ store, key: `g/${n}`, rank, worldSize: 3, value: bytes(`${rank}:${n}`), timeoutMs: 2000, sweep: sweeps[rank] })));
        for (const got of values) assert.deepEqual(got.map(text), [0, 1, 2].map((r) => `${r}:${n}`));
      }
      // The deletes are not waited for by the gathers: a round trip on each client settles them.
      await Promise.all(stores.map((s) => s.add('settle', 1)));
      const present = async (key: string) => stores[0].get(key, 0).then(() => true, () => false);
      for (const r of [0, 1, 2]) {
        assert.equal(await present(`g/${rounds - 1}/${r}`), true, 'the last gather, which a slow rank may still read, stays');
        for (const n of [0, 1, rounds - 2]) assert.equal(await present(`g/${n}/${r}`), false, `gather ${n}'s key of rank ${r} is gone`);
      }
    } finally {
      await Promise.all(stores.map((s) => s.close()));
      await server.close();
    }
  });
});
