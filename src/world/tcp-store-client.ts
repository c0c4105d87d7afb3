// TCP rendezvous store client: what each rank process uses to reach the launcher's store.
import { connect as netConnect, type Socket } from 'node:net';
import { shown, StoreError, UsageError } from '../errors.js';
import { storeBarrier } from './barrier.js';
import { rankEnv, STORE_PORT_ENV, STORE_TOKEN_ENV, storePort, storeToken } from './env.js';
import type { Store } from './store.js';
import {
  decodeReply,
  encodeAuth,
  encodeRequest,
  FrameReader,
  MAX_FRAME,
  MAX_KEY_BYTES,
  MAX_VALUE_BYTES,
  Op,
  type Reply,
  type Request,
} from './tcp-protocol.js';

export interface TcpStoreClientOptions {
  host: string;
  port: number;
  /** The job's secret (env A2AV_STORE_TOKEN). */
  token: string;
  /** Default bound on every call, and on `get` when it is given none (default 60000 ms). */
  timeoutMs?: number;
  /**
   * How long to keep retrying a refused connection (default: timeoutMs). Ranks on other nodes may
   * start before the launcher on node 0 is listening.
   */
  connectTimeoutMs?: number;
  /** Who serves the store ("rank 0"), for errors: a lost connection then says that it is gone. */
  servedBy?: string;
  /**
   * The store listened before this process started (its own launcher's): a refused connection
   * means it has gone, and is not retried (the rank would otherwise run on orphaned until the
   * connect timeout).
   */
  listenedBefore?: boolean;
}

/**
 * Where a launched rank's store is, and its secret: host and port from MASTER_ADDR / MASTER_PORT
 * (or A2AV_STORE_PORT), the secret from A2AV_STORE_TOKEN. Throws UsageError when any is missing.
 */
export function storeAddress(env: Readonly<Record<string, string | undefined>> = process.env): { host: string; port: number; token: string } {
  const place = rankEnv(env);
  const token = storeToken(env);
  const port = storePort(env) ?? place?.masterPort;
  if (place?.masterAddr === undefined || port === undefined || token === undefined) {
    const missing = [place?.masterAddr === undefined ? 'MASTER_ADDR' : '', port === undefined ? `MASTER_PORT (or ${STORE_PORT_ENV})` : '', token === undefined ? STORE_TOKEN_ENV : ''].filter((m) => m !== '');
    throw new UsageError(`no store to connect to: ${missing.join(', ')} ${missing.length > 1 ? 'are' : 'is'} not set; set MASTER_ADDR, MASTER_PORT (or ${STORE_PORT_ENV}: rank 0 serves the store there) and ${STORE_TOKEN_ENV} (a2av launch does)`);
  }
  return { host: place.masterAddr, port, token };
}

/** How long past its own bound a get waits for the server's answer (a round trip, under load). */
const GET_ANSWER_MS = 1000;

interface Pending {
  resolve(reply: Reply): void;
  reject(error: StoreError): void;
}

/** Errors worth retrying while the server may still be starting. */
const RETRYABLE = new Set(['ECONNREFUSED', 'ECONNRESET', 'ETIMEDOUT', 'EHOSTUNREACH', 'ENETUNREACH', 'EAI_AGAIN']);
const MAX_TIMER_MS = 2 ** 31 - 1;
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

export class TcpStoreClient implements Store {
  readonly address: string;
  #socket: Socket;
  #timeoutMs: number;
  #pending = new Map<number, Pending>();
  #nextId = 1;
  /** Set once the connection is gone; every later call fails with it. */
  #broken: StoreError | undefined;
  #closing = false;
  #onLost: ((error: StoreError) => void)[] = [];

  private constructor(socket: Socket, address: string, timeoutMs: number, reader: FrameReader, servedBy: string | undefined) {
    this.#socket = socket;
    this.address = address;
    this.#timeoutMs = timeoutMs;
    socket.on('data', (chunk: Buffer) => {
      try {
        reader.push(chunk);
        for (let body = reader.next(); body !== undefined; body = reader.next()) {
          const reply = decodeReply(body);
          const pending = this.#pending.get(reply.id);
          // Unknown ids are replies to calls that already timed out here.
          if (pending) {
            this.#pending.delete(reply.id);
            pending.resolve(reply);
          }
        }
      } catch (cause) {
        this.#fail(new StoreError('connect', undefined, 'disconnected', `store at ${address} sent a malformed reply`, { cause }));
        socket.destroy();
      }
    });
    socket.resume();
    socket.on('close', () => {
      const gone = servedBy === undefined ? '' : `: ${servedBy}, which served it, has exited or was killed`;
      this.#fail(new StoreError('connect', undefined, 'disconnected', `connection to the store at ${address} closed${gone}`));
      if (!this.#closing) for (const listener of this.#onLost.splice(0)) listener(this.#broken!);
    });
  }

  /** Calls `listener` once if the connection ends other than by close() (the server went away). */
  onLost(listener: (error: StoreError) => void): void {
    this.#onLost.push(listener);
  }

  /**
   * Connects and authenticates. Retries refused connections until connectTimeoutMs; a server that
   * drops the connection during authentication (wrong token) fails at once with reason 'rejected'.
   */
  static async connect(options: TcpStoreClientOptions): Promise<TcpStoreClient> {
    const { host, port, token, timeoutMs = 60_000 } = options;
    const connectTimeoutMs = options.connectTimeoutMs ?? timeoutMs;
    if (typeof token !== 'string' || token.length === 0) throw new UsageError('store client needs a non-empty token');
    if (!Number.isInteger(port) || port < 1 || port > 65535) throw new UsageError(`store port must be 1..65535, got ${shown(port)}`);
    const address = `${host}:${port}`;
    const deadline = Date.now() + connectTimeoutMs;
    for (let backoff = 20; ; backoff = Math.min(backoff * 2, 500)) {
      let socket: Socket;
      try {
        socket = await openSocket(host, port, Math.max(1, deadline - Date.now()));
      } catch (cause) {
        const code = (cause as NodeJS.ErrnoException).code ?? '';
        const left = deadline - Date.now();
        if (code === 'ECONNREFUSED' && options.listenedBefore) {
          throw new StoreError('connect', undefined, 'unreachable', `cannot reach the store at ${address}: ${(cause as Error).message}; ${options.servedBy ?? 'its server'} listened there before it started this process, so it has gone`, { cause });
        }
        if (RETRYABLE.has(code) && left > 0) {
          await sleep(Math.min(backoff, left));
          continue;
        }
        const who = options.servedBy === undefined ? '' : ` (${options.servedBy} serves it: is it running?)`;
        throw new StoreError('connect', undefined, 'unreachable', `cannot reach the store at ${address}${who} after ${connectTimeoutMs} ms: ${(cause as Error).message}`, { cause });
      }
      const reader = new FrameReader(MAX_FRAME);
      await authenticate(socket, token, reader, address, Math.max(1, deadline - Date.now()));
      return new TcpStoreClient(socket, address, timeoutMs, reader, options.servedBy);
    }
  }

  /**
   * Connects a rank started by a launcher: host and port from MASTER_ADDR / MASTER_PORT (see
   * rankEnv), the secret from A2AV_STORE_TOKEN. Throws UsageError when any of them is missing.
   */
  static async connectFromEnv(options: { env?: Readonly<Record<string, string | undefined>>; timeoutMs?: number; connectTimeoutMs?: number; servedBy?: string; listenedBefore?: boolean } = {}): Promise<TcpStoreClient> {
    const { env = process.env, ...timeouts } = options;
    return TcpStoreClient.connect({ ...storeAddress(env), ...timeouts });
  }

  async set(key: string, value: Uint8Array): Promise<void> {
    await this.#set(Op.SET, key, value);
  }

  /**
   * Asks the server to set `key` to `value` when this connection ends, by close() or by this
   * process's death: a peer waiting for this client's word that it left gets it either way.
   */
  async setOnClose(key: string, value: Uint8Array): Promise<void> {
    await this.#set(Op.SET_ON_CLOSE, key, value);
  }

  /** A SET now or at this connection's end: the same key and value rules, the same reply. */
  async #set(op: typeof Op.SET | typeof Op.SET_ON_CLOSE, key: string, value: Uint8Array): Promise<void> {
    checkKey(key);
    if (value.byteLength > MAX_VALUE_BYTES) throw new UsageError(`store value for "${key}" is ${value.byteLength} bytes (limit ${MAX_VALUE_BYTES})`);
    const bytes = Buffer.from(value.buffer, value.byteOffset, value.byteLength);
    await this.#call(op === Op.SET ? 'set' : 'setOnClose', key, this.#timeoutMs, (id) => ({ op, id, key, value: bytes }));
  }

  async get(key: string, timeoutMs = this.#timeoutMs): Promise<Uint8Array> {
    checkKey(key);
    if (!Number.isInteger(timeoutMs) || timeoutMs < 0) throw new UsageError(`store timeout must be a non-negative integer, got ${shown(timeoutMs)}`);
    // The server bounds the wait; the client's own timer, for a server that stopped answering, gives
    // the answer time to come past it (with 0, "is it there now", it fired before a present key's answer).
    const reply = await this.#call('get', key, timeoutMs, (id) => ({ op: Op.GET, id, key, timeoutMs: Math.min(timeoutMs, 0xffffffff) }), timeoutMs + GET_ANSWER_MS);
    // Copy out of the receive buffer so the caller owns plain, right-sized memory.
    if (reply.op === Op.VALUE) return new Uint8Array(reply.value);
    throw timeout('get', key, timeoutMs);
  }

  /** Removes `key` if it is there (a key no rank will read again). */
  async delete(key: string): Promise<void> {
    checkKey(key);
    await this.#call('delete', key, this.#timeoutMs, (id) => ({ op: Op.DELETE, id, key }));
  }

  async add(key: string, delta: number): Promise<number> {
    checkKey(key);
    if (!Number.isSafeInteger(delta)) throw new UsageError(`store add delta must be a safe integer, got ${shown(delta)}`);
    const reply = await this.#call('add', key, this.#timeoutMs, (id) => ({ op: Op.ADD, id, key, delta: BigInt(delta) }));
    if (reply.op !== Op.COUNTER) throw new StoreError('add', key, 'rejected', `store add "${key}": unexpected reply`);
    const value = Number(reply.value);
    if (!Number.isSafeInteger(value)) throw new StoreError('add', key, 'rejected', `store counter "${key}" = ${reply.value} is past Number.MAX_SAFE_INTEGER`);
    return value;
  }

  /** Waits until `worldSize` callers reached barrier `name` (reusable; see storeBarrier). */
  barrier(name: string, worldSize: number, timeoutMs = this.#timeoutMs): Promise<void> {
    return storeBarrier(this, { name, worldSize, timeoutMs });
  }

  /** Closes the connection; calls still in flight fail with reason 'disconnected'. */
  async close(): Promise<void> {
    this.#closing = true;
    this.#fail(new StoreError('connect', undefined, 'disconnected', `store client for ${this.address} was closed`));
    if (this.#socket.destroyed) return;
    await new Promise<void>((resolve) => {
      this.#socket.once('close', () => resolve());
      this.#socket.end();
      // A server that never acknowledges the FIN must not hold up close().
      setTimeout(() => this.#socket.destroy(), 1000).unref();
    });
  }

  #call(op: string, key: string, timeoutMs: number, build: (id: number) => Request, clientMs = timeoutMs): Promise<Reply> {
    if (this.#broken) {
      return Promise.reject(new StoreError(op, key, this.#broken.reason, `store ${op} "${key}": ${this.#broken.message}`, { cause: this.#broken }));
    }
    const id = this.#nextId;
    this.#nextId = this.#nextId >= 0xffffffff ? 1 : this.#nextId + 1;
    return new Promise<Reply>((resolve, reject) => {
      // The server bounds a get too; this timer also covers a server that stopped answering.
      const timer = setTimeout(() => {
        this.#pending.delete(id);
        reject(timeout(op, key, timeoutMs));
      }, Math.min(clientMs, MAX_TIMER_MS));
      this.#pending.set(id, {
        resolve: (reply) => {
          clearTimeout(timer);
          if (reply.op === Op.ERROR) reject(new StoreError(op, key, 'rejected', `store ${op} "${key}" failed: ${reply.message}`));
          else resolve(reply);
        },
        reject: (error) => {
          clearTimeout(timer);
          reject(new StoreError(op, key, error.reason, `store ${op} "${key}": ${error.message}`, { cause: error }));
        },
      });
      // Calls issued in one tick (a rank's Promise.all) leave in one write.
      if (!this.#socket.writableCorked) {
        this.#socket.cork();
        process.nextTick(() => this.#socket.uncork());
      }
      this.#socket.write(encodeRequest(build(id)));
    });
  }

  #fail(error: StoreError): void {
    this.#broken ??= error;
    const pending = [...this.#pending.values()];
    this.#pending.clear();
    for (const call of pending) call.reject(this.#broken);
  }
}

function timeout(op: string, key: string, timeoutMs: number): StoreError {
  const what = op === 'get' ? `key "${key}" was not set` : `no reply for "${key}"`;
  return new StoreError(op, key, 'timeout', `store ${op}: ${what} within ${timeoutMs} ms`);
}

function checkKey(key: string): void {
  const bytes = typeof key === 'string' ? Buffer.byteLength(key, 'utf8') : 0;
  if (bytes === 0 || bytes > MAX_KEY_BYTES) throw new UsageError(`store key must be 1..${MAX_KEY_BYTES} UTF-8 bytes, got ${bytes}`);
}

function openSocket(host: string, port: number, timeoutMs: number): Promise<Socket> {
  return new Promise((resolve, reject) => {
    const socket = netConnect({ host, port, noDelay: true });
    const timer = setTimeout(() => {
      socket.destroy();
      reject(Object.assign(new Error(`connect timed out after ${timeoutMs} ms`), { code: 'ETIMEDOUT' }));
    }, Math.min(timeoutMs, MAX_TIMER_MS));
    socket.once('error', (error) => {
      clearTimeout(timer);
      reject(error);
    });
    socket.once('connect', () => {
      clearTimeout(timer);
      socket.removeAllListeners('error');
      // Later socket errors surface as 'close', which fails the pending calls.
      socket.on('error', () => {});
      resolve(socket);
    });
  });
}

/** Sends the token and waits for AUTH_OK; the server answers a wrong token by closing. */
function authenticate(socket: Socket, token: string, reader: FrameReader, address: string, timeoutMs: number): Promise<void> {
  return new Promise((resolve, reject) => {
    const done = (error?: StoreError) => {
      clearTimeout(timer);
      socket.off('data', onData);
      socket.off('close', onClose);
      // Hold further bytes until the client attaches its own reader (its constructor resumes).
      socket.pause();
      if (error) {
        socket.destroy();
        reject(error);
      } else resolve();
    };
    // What answers at the port but not as a2av's store is most often another service there: under
    // torchrun, MASTER_PORT is its own store's, and a2av's is rank 0's at A2AV_STORE_PORT.
    const ours = storePort() !== undefined
      ? `${STORE_PORT_ENV} is set: is another service at that port, or a store of another job with another token?`
      : `under torchrun, srun or mpirun, set ${STORE_PORT_ENV}: rank 0 serves a2av's store there`;
    const timer = setTimeout(() => done(new StoreError('connect', undefined, 'timeout', `store at ${address} did not answer authentication within ${timeoutMs} ms (is this a2av's store? ${ours})`)), Math.min(timeoutMs, MAX_TIMER_MS));
    // A wrong token is answered by the server closing the connection; a reset is a server that
    // stopped taking connections with this one still queued (a store closing): not a refusal.
    let reset = false;
    socket.on('error', (err: NodeJS.ErrnoException) => (reset ||= err.code === 'ECONNRESET'));
    const onClose = () =>
      done(reset
        ? new StoreError('connect', undefined, 'disconnected', `store at ${address} reset the connection while it authenticated (the store was closing)`)
        : new StoreError('connect', undefined, 'rejected', `store at ${address} refused this client (does ${STORE_TOKEN_ENV} hold this job's token? is this a2av's store? ${ours})`));
    const onData = (chunk: Buffer) => {
      try {
        reader.push(chunk);
        const body = reader.next();
        if (body === undefined) return;
        if (body.length !== 1 || body[0] !== Op.AUTH_OK) throw new Error('unexpected first frame');
        done();
      } catch (cause) {
        done(new StoreError('connect', undefined, 'rejected', `store at ${address} answered authentication with a malformed frame`, { cause }));
      }
    };
    socket.on('data', onData);
    socket.on('close', onClose);
    socket.write(encodeAuth(token));
  });
}
