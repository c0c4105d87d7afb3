// LanePacer (src/backends/cuda/pacing.ts) with stand-in events: a lane never holds more than
// PACE_LIMIT unfinished calls once it has checkpoints to wait on, waits oldest first, skips the
// wait for a checkpoint already passed, and makes no event once calls are being queued.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { CudaDevice, CudaEvent, CudaStream } from '../src/cuda/device.js';
import { LanePacer, PACE_LIMIT } from '../src/backends/cuda/pacing.js';

class FakeEvent {
  /** The call count the fake device reaches when this event passes. */
  at = 0;
  records = 0;
  constructor(readonly device: FakeDevice) {}
  record(): void {
    this.at = this.device.queued;
    this.records += 1;
  }
  query(): boolean {
    return this.device.finished >= this.at;
  }
  destroy(): void {}
}

class FakeDevice {
  queued = 0;
  finished = 0;
  created: FakeEvent[] = [];
  createEvent(): FakeEvent {
    const e = new FakeEvent(this);
    this.created.push(e);
    return e;
  }
}

const stream = {} as CudaStream;

describe('lane pacing', () => {
  it('keeps at most PACE_LIMIT calls unfinished, waiting on the oldest checkpoint first', () => {
    const dev = new FakeDevice();
    const pacer = new LanePacer(dev as unknown as CudaDevice);
    const waited: number[] = [];
    // The device finishes only what the host waits for: the worst case for the bound.
    const wait = (event: CudaEvent) => {
      waited.push((event as unknown as FakeEvent).at);
      dev.finished = Math.max(dev.finished, (event as unknown as FakeEvent).at);
    };
    let seq = 0;
    for (let i = 0; i < 5 * PACE_LIMIT; i++) {
      pacer.makeRoom(seq, 1, wait);
      seq += 1;
      dev.queued = seq;
      pacer.mark(stream, seq, false);
      assert.ok(seq - dev.finished <= PACE_LIMIT, `call ${seq}: ${seq - dev.finished} unfinished`);
    }
    assert.ok(waited.length > 0);
    assert.deepEqual(waited, [...waited].sort((a, b) => a - b), 'oldest checkpoint first');
    // Every event was made with the pacer (at set-up), none while calls were queued.
    assert.equal(dev.created.length, PACE_LIMIT + 1, `${dev.created.length} events for ${seq} calls`);
  });

  it('does not wait while the device keeps up, nor for a checkpoint already passed', () => {
    const dev = new FakeDevice();
    const pacer = new LanePacer(dev as unknown as CudaDevice);
    let waits = 0;
    let seq = 0;
    for (let i = 0; i < 10; i++) {
      pacer.makeRoom(seq, 20, () => (waits += 1));
      seq += 20;
      dev.queued = seq;
      pacer.mark(stream, seq, true);
      dev.finished = seq; // the device is done before the next replay
    }
    assert.equal(waits, 0);
  });

  it('lets a replay larger than the limit through once the lane is drained', () => {
    const dev = new FakeDevice();
    const pacer = new LanePacer(dev as unknown as CudaDevice);
    const wait = (event: CudaEvent) => {
      dev.finished = (event as unknown as FakeEvent).at;
    };
    dev.queued = 10;
    pacer.mark(stream, 10, true);
    pacer.makeRoom(10, PACE_LIMIT + 50, wait);
    assert.equal(dev.finished, 10, 'waited for everything queued before it');
  });
});
