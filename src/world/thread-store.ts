// The rendezvous store for ranks that are worker threads of one process: the main thread keeps the
// keys (ThreadStoreBroker) and every rank talks to it over its own MessagePort (ThreadStoreClient).
// Values travel by structured clone, so a Uint8Array over a SharedArrayBuffer arrives as a view of
// the same memory: that is how the CPU backend hands its symmetric buffers to its peers.
import type { MessagePort } from 'node:worker_threads';
import { StoreError } from '../errors.js';
import type { Store } from './store.js';

type Request =
  | { op: 'set'; id: number; key: string; value: Uint8Array }
  | { op: 'get'; id: number; key: string }
  | { op: 'add'; id: number; key: string; delta: number }
  | { op: 'delete'; id: number; key: string };

type Reply = { id: number; value?: Uint8Array; counter?: number; error?: string };

/** Main-thread side: owns the keys; answers every connected port. */
export class ThreadStoreBroker {
  #values = new Map<string, Uint8Array>();
  #counters = new Map<string, number>();
  /** Gets that arrived before their key, answered when it is set. */
  #waiting = new Map<string, { port: MessagePort; id: number }[]>();
  #ports = new Set<MessagePort>();

  serve(port: MessagePort): void {
    this.#ports.add(port);
    port.on('message', (req: Request) => this.#handle(port, req));
  }

  #handle(port: MessagePort, req: Request): void {
    switch (req.op) {
      case 'set': {
        this.#values.set(req.key, req.value);
        const waiters = this.#waiting.get(req.key) ?? [];
        this.#waiting.delete(req.key);
        for (const w of waiters) reply(w.port, { id: w.id, value: req.value });
        reply(port, { id: req.id });
        return;
      }
      case 'get': {
        const value = this.#values.get(req.key);
        if (value !== undefined) return reply(port, { id: req.id, value });
        // The client times the wait out itself; a late answer to a forgotten id is dropped there.
        const list = this.#waiting.get(req.key) ?? [];
        list.push({ port, id: req.id });
        this.#waiting.set(req.key, list);
        return;
      }
      case 'delete':
        this.#values.delete(req.key);
        return reply(port, { id: req.id });
      case 'add': {
        const counter = (this.#counters.get(req.key) ?? 0) + req.delta;
        this.#counters.set(req.key, counter);
        return reply(port, { id: req.id, counter });
      }
      default:
        return reply(port, { id: (req as { id: number }).id, error: `unknown store op ${(req as { op: string }).op}` });
    }
  }

  close(): void {
    for (const port of this.#ports) port.close();
    this.#ports.clear();
    this.#waiting.clear();
  }
}

function reply(port: MessagePort, msg: Reply): void {
  try {
    port.postMessage(msg);
  } catch {
    // The rank's port is gone (its worker ended); nobody is left to answer.
  }
}

/** Rank side: the Store a worker thread hands to its communicator. */
export class ThreadStoreClient implements Store {
  readonly sharesMemory = true;
  #port: MessagePort;
  #defaultTimeoutMs: number;
  #nextId = 1;
  #pending = new Map<number, { resolve: (r: Reply) => void; reject: (e: Error) => void; op: string; key: string }>();
  #closed = false;

  constructor(port: MessagePort, defaultTimeoutMs: number) {
    this.#port = port;
    this.#defaultTimeoutMs = defaultTimeoutMs;
    port.on('message', (msg: Reply) => {
      const call = this.#pending.get(msg.id);
      if (call === undefined) return;
      this.#pending.delete(msg.id);
      if (msg.error !== undefined) call.reject(new StoreError(call.op, call.key, 'rejected', msg.error));
      else call.resolve(msg);
    });
  }

  async set(key: string, value: Uint8Array): Promise<void> {
    await this.#call({ op: 'set', id: 0, key, value }, undefined);
  }

  async get(key: string, timeoutMs = this.#defaultTimeoutMs): Promise<Uint8Array> {
    const r = await this.#call({ op: 'get', id: 0, key }, timeoutMs);
    return r.value as Uint8Array;
  }

  async add(key: string, delta: number): Promise<number> {
    const r = await this.#call({ op: 'add', id: 0, key, delta }, undefined);
    return r.counter as number;
  }

  async delete(key: string): Promise<void> {
    await this.#call({ op: 'delete', id: 0, key }, undefined);
  }

  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    for (const call of this.#pending.values()) {
      call.reject(new StoreError(call.op, call.key, 'disconnected', `store closed while ${call.op} '${call.key}' was pending`));
    }
    this.#pending.clear();
    this.#port.close();
  }

  #call(req: Request, timeoutMs: number | undefined): Promise<Reply> {
    if (this.#closed) {
      return Promise.reject(new StoreError(req.op, req.key, 'disconnected', `store is closed (${req.op} '${req.key}')`));
    }
    const id = this.#nextId++;
    req.id = id;
    return new Promise<Reply>((resolve, reject) => {
      let timer: NodeJS.Timeout | undefined;
      if (timeoutMs !== undefined) {
        timer = setTimeout(() => {
          this.#pending.delete(id);
          reject(new StoreError(req.op, req.key, 'timeout', `store ${req.op} '${req.key}' timed out after ${timeoutMs} ms`));
        }, timeoutMs);
      }
      this.#pending.set(id, {
        op: req.op,
        key: req.key,
        resolve: (r) => (clearTimeout(timer), resolve(r)),
        reject: (e) => (clearTimeout(timer), reject(e)),
      });
      this.#port.postMessage(req);
    });
  }
}
