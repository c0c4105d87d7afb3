// How far a lane may run ahead of its GPU. Without a bound, a loop of graph replays queues
// thousands of kernels; once the driver's launch queue is full, the launching thread blocks inside
// the driver, and with ranks as threads of one process that blocks the other ranks' launches too:
// a rank whose next call is not queued leaves its peers spinning on it until they time out
// (measured: 8 ranks on one H200, 2000 replays of 20 MoE calls each). A lane therefore waits on
// the host, before queueing, until it holds at most PACE_LIMIT unfinished calls. The device never
// runs dry: that many calls take far longer than the host needs to queue the next.
import type { CudaDevice, CudaEvent, CudaStream } from '../../cuda/device.js';

/** Unfinished calls a lane may hold (at most the status ring, so no call's record is overwritten before the host could read it). */
export const PACE_LIMIT = 128;
/** Calls between two checkpoints of eager calls: one event record per this many calls. */
const CHECKPOINT_EVERY = 16;

interface Checkpoint {
  /** The lane's sequence number once the checkpoint has passed. */
  seq: number;
  event: CudaEvent;
}

export class LanePacer {
  readonly #pending: Checkpoint[] = [];
  readonly #free: CudaEvent[] = [];
  /** Calls known finished (the last checkpoint passed). */
  #settled = 0;
  /** Sequence number of the newest checkpoint queued. */
  #marked = 0;

  /**
   * Every event a lane can need (one checkpoint a call at most), made now, at set-up: creating
   * driver objects while a peer's kernel spins on this rank is what has stalled ranks before.
   */
  constructor(readonly device: CudaDevice) {
    for (let i = 0; i <= PACE_LIMIT; i++) this.#free.push(device.createEvent());
  }

  /**
   * Before queueing `calls` calls on a lane whose last queued call is `seq`: waits (through
   * `wait`, bounded) for the oldest checkpoints until the lane holds at most PACE_LIMIT.
   */
  makeRoom(seq: number, calls: number, wait: (event: CudaEvent, calls: number) => void): void {
    while (this.#pending.length > 0 && seq + calls - this.#settled > PACE_LIMIT) {
      const c = this.#pending[0];
      if (!c.event.query()) wait(c.event, c.seq - this.#settled);
      this.#pending.shift();
      this.#settled = c.seq;
      this.#free.push(c.event);
    }
  }

  /** After queueing on `stream` up to call `seq`; `always`: record one now (a replay), else every few calls. */
  mark(stream: CudaStream, seq: number, always: boolean): void {
    if (!always && seq - this.#marked < CHECKPOINT_EVERY) return;
    // Never empty: at most PACE_LIMIT checkpoints are pending when a new one is made.
    const event = this.#free.pop() ?? this.device.createEvent();
    event.record(stream);
    this.#pending.push({ seq, event });
    this.#marked = seq;
  }

  destroy(): void {
    for (const e of [...this.#free, ...this.#pending.map((c) => c.event)]) e.destroy();
    this.#free.length = 0;
    this.#pending.length = 0;
  }
}
