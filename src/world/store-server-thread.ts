// The job's store served from a worker thread of rank 0's process (init() with A2AV_STORE_PORT):
// a rank's main thread blocks in its calls (the cpu backend's exchanges, cuda's host waits), and a
// store on that thread's event loop would answer its peers only between them. Run as the worker,
// this module listens and reports its port; imported, it starts and stops that worker.
import { isMainThread, parentPort, Worker, workerData } from 'node:worker_threads';
import { StoreError } from '../errors.js';
import { TcpStoreServer, type TcpStoreServerOptions } from './tcp-store-server.js';

type Reply = { listening: number } | { failed: string };

/**
 * Names this module's own worker's data: the module is also imported in other workers (runRanks'
 * ranks, through the package), which must not start a store.
 */
const MARK = 'a2avStoreServer';

export class StoreServerThread {
  readonly #worker: Worker;
  /** Settles when the thread has ended (terminated, or crashed). */
  readonly #ended: Promise<void>;

  private constructor(
    readonly port: number,
    worker: Worker,
  ) {
    this.#worker = worker;
    this.#ended = new Promise((resolve) => worker.once('exit', () => resolve()));
  }

  /** Binds in a new worker thread; throws StoreError (reason 'listen') as TcpStoreServer.listen does. */
  static async start(options: TcpStoreServerOptions): Promise<StoreServerThread> {
    const worker = new Worker(new URL(import.meta.url), { workerData: { [MARK]: options } });
    const reply = await new Promise<Reply>((resolve, reject) => {
      worker.once('message', resolve);
      worker.once('error', reject);
      worker.once('exit', (code) => reject(new Error(`the store's thread exited (code ${code}) before it listened`)));
    });
    if ('failed' in reply) {
      await worker.terminate();
      throw new StoreError('serve', undefined, 'listen', reply.failed);
    }
    return new StoreServerThread(reply.listening, worker);
  }

  /** Stops taking new connections (TcpStoreServer.stopAccepting); resolves once the thread has. */
  async stopAccepting(): Promise<void> {
    await this.#ask('stopAccepting');
  }

  /** TcpStoreServer.idle in the thread: no client connected, or `timeoutMs` passed. */
  async idle(timeoutMs: number): Promise<void> {
    await this.#ask({ idle: timeoutMs });
  }

  /** Sends the thread `request` and waits for its answer; a thread already gone answers nothing, and is done too. */
  async #ask(request: unknown): Promise<void> {
    const answered = new Promise<void>((resolve) => this.#worker.once('message', () => resolve()));
    this.#worker.postMessage(request);
    await Promise.race([answered, this.#ended]);
  }

  /** Stops serving: every client's pending call fails with a 'disconnected' error. */
  async close(): Promise<void> {
    await this.#worker.terminate();
  }
}

const asked = isMainThread ? undefined : (workerData as Record<string, unknown> | null)?.[MARK];
if (asked !== undefined && parentPort !== null) {
  const port = parentPort;
  TcpStoreServer.listen(asked as TcpStoreServerOptions).then(
    (server) => {
      port.on('message', (asked: unknown) => {
        if (asked === 'stopAccepting') {
          server.stopAccepting();
          port.postMessage('stopped');
        } else if (typeof asked === 'object' && asked !== null && 'idle' in asked) {
          void server.idle((asked as { idle: number }).idle).then(() => port.postMessage('idle'));
        }
      });
      port.postMessage({ listening: server.port } satisfies Reply);
    },
    (err: Error) => port.postMessage({ failed: err.message } satisfies Reply),
  );
}
