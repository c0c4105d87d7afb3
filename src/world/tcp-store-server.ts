// TCP rendezvous store server: one per job, run by the launcher on node rank 0.
// Single-threaded event loop, so every request is atomic with respect to the others.
import { createHash, timingSafeEqual } from 'node:crypto';
import { createServer, type Server, type Socket } from 'node:net';
import { shown, StoreError, UsageError } from '../errors.js';
import {
  decodeRequest,
  encodeAuthOk,
  encodeReply,
  FrameReader,
  MAX_AUTH_FRAME,
  MAX_FRAME,
  Op,
  type Reply,
  type Request,
} from './tcp-protocol.js';

export interface TcpStoreServerOptions {
  /** The job's secret; every connection must present it first. */
  token: string;
  /** Address to bind (default 127.0.0.1: nothing off this machine can connect). */
  host?: string;
  /** Port to bind; 0 (default) lets the system pick a free one, read it back from `port`. */
  port?: number;
  /** An unauthenticated connection is dropped after this long (default 10000 ms). */
  authTimeoutMs?: number;
}

/** A client that stops reading is dropped once this much reply data is queued for it. */
const MAX_QUEUED_REPLY_BYTES = 64 << 20;
/** setTimeout fires at once for delays past 2^31-1 ms; longer waits are clamped to that. */
const MAX_TIMER_MS = 2 ** 31 - 1;

interface Waiter {
  conn: Connection;
  id: number;
  key: string;
  timer: NodeJS.Timeout;
}

interface Connection {
  socket: Socket;
  authenticated: boolean;
  reader: FrameReader;
  waiters: Set<Waiter>;
  /** SET_ON_CLOSE's keys: set when the connection ends, however it ends. */
  onClose: Map<string, Buffer>;
}

const sha256 = (bytes: Buffer): Buffer => createHash('sha256').update(bytes).digest();

export class TcpStoreServer {
  readonly host: string;
  readonly port: number;
  #server: Server;
  #tokenDigest: Buffer;
  #authTimeoutMs: number;
  #data = new Map<string, Buffer>();
  #waiters = new Map<string, Set<Waiter>>();
  #connections = new Set<Connection>();
  #closed: Promise<void> | undefined;
  /** idle()'s waiters. */
  #idle = new Set<() => void>();

  private constructor(server: Server, host: string, port: number, tokenDigest: Buffer, authTimeoutMs: number) {
    this.#server = server;
    this.host = host;
    this.port = port;
    this.#tokenDigest = tokenDigest;
    this.#authTimeoutMs = authTimeoutMs;
    server.on('connection', (socket) => this.#accept(socket));
  }

  /** Binds and starts serving. Throws StoreError (reason 'listen') if the address cannot be bound. */
  static async listen(options: TcpStoreServerOptions): Promise<TcpStoreServer> {
    const { token, host = '127.0.0.1', port = 0, authTimeoutMs = 10_000 } = options;
    if (typeof token !== 'string' || token.length === 0) throw new UsageError('store server needs a non-empty token');
    if (!Number.isInteger(port) || port < 0 || port > 65535) throw new UsageError(`store port must be 0..65535, got ${shown(port)}`);
    const server = createServer({ noDelay: true });
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen({ host, port }, () => {
        server.off('error', reject);
        resolve();
      });
    }).catch((cause: unknown) => {
      // A port in use is most often another job's store (or one still closing): say so, and the way out.
      const inUse = (cause as NodeJS.ErrnoException).code === 'EADDRINUSE' ? ' (another process serves there, perhaps an earlier job\'s store still closing: pick another port)' : '';
      throw new StoreError('serve', undefined, 'listen', `store cannot listen on ${host}:${port}: ${(cause as Error).message}${inUse}`, { cause });
    });
    // A listening server only emits 'error' for rare accept failures; losing one client is not fatal.
    server.on('error', () => {});
    const address = server.address();
    const boundPort = typeof address === 'object' && address !== null ? address.port : port;
    // Compare digests, not raw tokens: equal lengths for timingSafeEqual and no length leak.
    return new TcpStoreServer(server, host, boundPort, sha256(Buffer.from(token, 'utf8')), authTimeoutMs);
  }

  /** Whether `key` is set now (read in place, as the process serving the store sees it: a launcher's checks). */
  has(key: string): boolean {
    return this.#data.has(key);
  }

  /** Connections currently open (authenticated or not). */
  get connectionCount(): number {
    return this.#connections.size;
  }

  /** Stops listening and drops every client; their pending calls fail with a 'disconnected' error. */
  close(): Promise<void> {
    this.#closed ??= new Promise<void>((resolve) => {
      // After stopAccepting() the server no longer listens: its callback then reports that, and it is done.
      this.#server.close(() => resolve());
      for (const conn of this.#connections) conn.socket.destroy();
    });
    return this.#closed;
  }

  /**
   * Resolves once no client is connected, or after `timeoutMs`. Rank 0 whose set-up failed waits
   * so before closing its store: its peers, still waiting on it for the rank that is missing, then
   * fail naming that rank, not the store's going.
   */
  idle(timeoutMs: number): Promise<void> {
    if (this.#connections.size === 0) return Promise.resolve();
    return new Promise((resolve) => {
      const done = () => {
        clearTimeout(timer);
        this.#idle.delete(done);
        resolve();
      };
      const timer = setTimeout(done, Math.min(timeoutMs, MAX_TIMER_MS));
      this.#idle.add(done);
    });
  }

  /**
   * Stops taking new connections; those made go on being served until close(). Rank 0 closing its
   * store calls it first, so a peer's next init() is refused here (and retries until rank 0 serves
   * its next store) rather than joining a store about to close.
   */
  stopAccepting(): void {
    if (this.#server.listening) this.#server.close();
  }

  #accept(socket: Socket): void {
    const conn: Connection = { socket, authenticated: false, reader: new FrameReader(MAX_AUTH_FRAME), waiters: new Set(), onClose: new Map() };
    this.#connections.add(conn);
    const authTimer = setTimeout(() => socket.destroy(), this.#authTimeoutMs);
    authTimer.unref();
    // Errors (resets, broken pipes) only ever end this one connection.
    socket.on('error', () => {});
    socket.on('close', () => {
      clearTimeout(authTimer);
      this.#drop(conn);
    });
    socket.on('data', (chunk: Buffer) => {
      // Batch the replies to one read's worth of requests into one write.
      socket.cork();
      try {
        conn.reader.push(chunk);
        for (let body = conn.reader.next(); body !== undefined; body = conn.reader.next()) {
          if (socket.destroyed) return;
          if (conn.authenticated) this.#handle(conn, decodeRequest(body));
          else if (this.#authenticate(body)) {
            clearTimeout(authTimer);
            conn.authenticated = true;
            conn.reader.maxBody = MAX_FRAME;
            socket.write(encodeAuthOk());
          } else {
            socket.destroy();
            return;
          }
        }
      } catch {
        // Malformed or oversized: the sender is broken or hostile; cut it off, serve the others.
        socket.destroy();
      } finally {
        socket.uncork();
      }
    });
  }

  #authenticate(body: Buffer): boolean {
    if (body[0] !== Op.AUTH) return false;
    return timingSafeEqual(sha256(body.subarray(1)), this.#tokenDigest);
  }

  #drop(conn: Connection): void {
    this.#connections.delete(conn);
    if (this.#connections.size === 0) for (const done of [...this.#idle]) done();
    for (const waiter of conn.waiters) this.#removeWaiter(waiter);
    // A client's word that it is gone, said for it: after close(), or after it died (a peer then
    // stops waiting for it to say so). Not while the server itself closes: nobody is left to read it.
    if (this.#closed === undefined) for (const [key, value] of conn.onClose) this.#store(key, value);
  }

  #reply(conn: Connection, reply: Reply): void {
    if (conn.socket.destroyed) return;
    conn.socket.write(encodeReply(reply));
    if (conn.socket.writableLength > MAX_QUEUED_REPLY_BYTES) conn.socket.destroy();
  }

  #handle(conn: Connection, req: Request): void {
    switch (req.op) {
      case Op.SET:
        this.#store(req.key, req.value);
        this.#reply(conn, { op: Op.OK, id: req.id });
        return;
      case Op.SET_ON_CLOSE:
        conn.onClose.set(req.key, req.value);
        this.#reply(conn, { op: Op.OK, id: req.id });
        return;
      case Op.GET:
        this.#get(conn, req.id, req.key, req.timeoutMs);
        return;
      case Op.DELETE:
        this.#data.delete(req.key);
        this.#reply(conn, { op: Op.OK, id: req.id });
        return;
      case Op.ADD: {
        const result = this.#add(req.key, req.delta);
        this.#reply(conn, typeof result === 'string' ? { op: Op.ERROR, id: req.id, message: result } : { op: Op.COUNTER, id: req.id, value: result });
        return;
      }
    }
  }

  #store(key: string, value: Buffer): void {
    this.#data.set(key, value);
    const waiting = this.#waiters.get(key);
    if (!waiting) return;
    for (const waiter of waiting) {
      this.#removeWaiter(waiter);
      this.#reply(waiter.conn, { op: Op.VALUE, id: waiter.id, value });
    }
  }

  #get(conn: Connection, id: number, key: string, timeoutMs: number): void {
    const value = this.#data.get(key);
    if (value !== undefined) return this.#reply(conn, { op: Op.VALUE, id, value });
    if (timeoutMs === 0) return this.#reply(conn, { op: Op.TIMEOUT, id });
    const waiter: Waiter = {
      conn,
      id,
      key,
      timer: setTimeout(() => {
        this.#removeWaiter(waiter);
        this.#reply(conn, { op: Op.TIMEOUT, id });
      }, Math.min(timeoutMs, MAX_TIMER_MS)),
    };
    conn.waiters.add(waiter);
    let waiting = this.#waiters.get(key);
    if (!waiting) this.#waiters.set(key, (waiting = new Set()));
    waiting.add(waiter);
  }

  #removeWaiter(waiter: Waiter): void {
    clearTimeout(waiter.timer);
    waiter.conn.waiters.delete(waiter);
    const waiting = this.#waiters.get(waiter.key);
    waiting?.delete(waiter);
    if (waiting?.size === 0) this.#waiters.delete(waiter.key);
  }

  /** Counters are stored as decimal text (as torch's TCPStore does) so `get` can read them. */
  #add(key: string, delta: bigint): bigint | string {
    const current = this.#data.get(key);
    const text = current?.toString('latin1') ?? '0';
    if (!/^-?\d{1,19}$/.test(text)) return `key "${key}" does not hold an integer`;
    const next = BigInt(text) + delta;
    if (next !== BigInt.asIntN(64, next)) return `counter "${key}" overflows int64`;
    this.#store(key, Buffer.from(next.toString(), 'latin1'));
    return next;
  }
}
