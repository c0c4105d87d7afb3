// The nccl lanes' growing buffers (src/backends/nccl/growing-buffer.ts), on a fake allocator: an
// outgrown allocation is never freed while a lane may be busy, is freed once every lane is idle,
// and every allocation is freed exactly once by the end.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { GrowingBuffer, type DeviceAllocator } from '../src/backends/nccl/growing-buffer.js';
import { Rng } from './conformance/reference.js';

/** Device memory as a set of live allocations; frees are checked and logged. */
class FakeDevice implements DeviceAllocator {
  readonly live = new Map<bigint, number>();
  readonly freed: bigint[] = [];
  #next = 0x1000n;
  /** Whether a free would be made while a lane is busy (the hazard). */
  busy = false;
  alloc(bytes: number): bigint {
    const ptr = this.#next;
    this.#next += BigInt(bytes) + 0x100n;
    this.live.set(ptr, bytes);
    return ptr;
  }
  free(ptr: bigint): void {
    assert.ok(this.live.has(ptr), `free of ${ptr}: not a live allocation (double free?)`);
    assert.equal(this.busy, false, `free of ${ptr} while a lane is busy`);
    this.live.delete(ptr);
    this.freed.push(ptr);
  }
}

describe('nccl growing buffers', () => {
  it('an outgrown allocation waits for every lane to be idle, then is freed', () => {
    const dev = new FakeDevice();
    const buf = new GrowingBuffer();
    const a = buf.reserve(dev, 100, () => true);
    assert.equal(buf.reserve(dev, 60, () => true), a, 'no growth for less');
    dev.busy = true;
    const b = buf.reserve(dev, 200, () => false);
    assert.notEqual(b, a);
    assert.equal(buf.bytes, 200);
    assert.ok(dev.live.has(a), 'the old allocation kept while a lane is busy');
    const c = buf.reserve(dev, 300, () => false);
    assert.equal(buf.retired, 2);
    dev.busy = false;
    assert.equal(buf.reserve(dev, 10, () => true), c, 'an idle reserve keeps the current allocation');
    assert.deepEqual(dev.freed.sort(), [a, b].sort(), 'both outgrown ones freed once idle');
    assert.equal(buf.retired, 0);
    buf.release(dev);
    assert.equal(dev.live.size, 0);
    assert.equal(buf.ptr, 0n);
    assert.equal(buf.bytes, 0);
  });

  it('random growth and idleness: the current allocation always live and large enough, no free while busy, none leaked', () => {
    for (let seed = 1; seed <= 20; seed++) {
      const rng = new Rng(0x6b0f, seed);
      const dev = new FakeDevice();
      const buf = new GrowingBuffer();
      for (let step = 0; step < 200; step++) {
        const bytes = 1 + rng.int(1 << (1 + rng.int(20)));
        const idle = rng.int(4) === 0;
        dev.busy = !idle;
        const ptr = buf.reserve(dev, bytes, () => idle);
        assert.ok(dev.live.has(ptr), `seed ${seed} step ${step}: the buffer's pointer is not live`);
        assert.ok((dev.live.get(ptr) ?? 0) >= bytes, `seed ${seed} step ${step}: ${dev.live.get(ptr)} bytes for ${bytes} asked`);
        assert.equal(dev.live.size, 1 + buf.retired, `seed ${seed} step ${step}: live allocations are the current and the retired`);
        if (idle) assert.equal(buf.retired, 0, `seed ${seed} step ${step}: an idle reserve leaves nothing retired`);
      }
      dev.busy = false;
      buf.release(dev);
      assert.equal(dev.live.size, 0, `seed ${seed}: allocations left after release`);
    }
  });
});
