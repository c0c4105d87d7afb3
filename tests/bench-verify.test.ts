import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { Comm, DeviceBuffer } from '../src/backends/backend.js';
import { InputPattern } from '../src/bench/data.js';
import { makeSplits } from '../src/bench/splits.js';
import { CANARY_BYTES, ResultCheck, WrongResultError } from '../src/bench/verify.js';

// ResultCheck only writes and reads this rank's buffers: host memory stands in for the device.
class HostBuffer implements DeviceBuffer {
  readonly data: Uint8Array;
  readonly symmetric = false;
  readonly symmetricId = -1;
  readonly freed = false;
  constructor(readonly bytes: number) {
    this.data = new Uint8Array(bytes);
  }
}

function fakeComm(rank: number, worldSize: number): Comm {
  const comm = {
    rank,
    worldSize,
    write: (buf: HostBuffer, data: ArrayBufferView, offset = 0) => buf.data.set(new Uint8Array(data.buffer, data.byteOffset, data.byteLength), offset),
    read: (buf: HostBuffer, offset: number, bytes: number) => buf.data.slice(offset, offset + bytes),
  };
  return comm as unknown as Comm;
}

const W = 3;
const ME = 1;
const ROW = 7;
const splits = makeSplits({ kind: 'zipf', worldSize: W, bytesPerRank: 700, rowBytes: ROW, seed: 9 });
const patterns = Array.from({ length: W }, (_, r) => new InputPattern(1234, r));

/** What a correct all-to-all-v leaves on rank ME. */
function deliver(output: HostBuffer, outSplitsOffsets: HostBuffer): void {
  const counts = new BigInt64Array(2 * W);
  let at = 0;
  for (let src = 0; src < W; src++) {
    const n = splits.rows[src][ME];
    let first = 0;
    for (let dst = 0; dst < ME; dst++) first += splits.rows[src][dst];
    output.data.set(patterns[src].bytes(first * ROW, n * ROW), at * ROW);
    counts[src] = BigInt(n);
    counts[W + src] = BigInt(at);
    at += n;
  }
  outSplitsOffsets.data.set(new Uint8Array(counts.buffer));
}

function setup() {
  const comm = fakeComm(ME, W);
  const output = new HostBuffer(splits.maxRowsReceived * ROW + CANARY_BYTES);
  const outSplitsOffsets = new HostBuffer(16 * W);
  const check = new ResultCheck(comm, { output, outSplitsOffsets }, splits, ROW, patterns, 5);
  check.arm();
  return { check, output, outSplitsOffsets };
}

describe('ResultCheck', () => {
  it('accepts a correct result', () => {
    const { check, output, outSplitsOffsets } = setup();
    deliver(output, outSplitsOffsets);
    check.verify('eager');
  });

  it('rejects a call that wrote nothing (the armed poison is still there)', () => {
    const { check } = setup();
    assert.throws(() => check.verify('eager'), (e: unknown) => e instanceof WrongResultError && /outSplitsOffsets\[0\]\[0\] is -1/.test(e.message));
  });

  it('rejects a wrong byte in the first or last row from a source', () => {
    const received = splits.rows.map((row) => row[ME]);
    const src = received.findIndex((n) => n > 0);
    for (const row of [0, received[src] - 1]) {
      const { check, output, outSplitsOffsets } = setup();
      deliver(output, outSplitsOffsets);
      const offset = received.slice(0, src).reduce((a, b) => a + b, 0);
      output.data[(offset + row) * ROW + 3] ^= 1;
      assert.throws(() => check.verify('graph'), new RegExp(`graph all-to-all-v .* row ${row} from rank ${src} differs at byte 3`));
    }
  });

  it('rejects wrong counts or offsets', () => {
    const { check, output, outSplitsOffsets } = setup();
    deliver(output, outSplitsOffsets);
    outSplitsOffsets.data[8 * (W + 2)] += 1;
    assert.throws(() => check.verify('eager'), /outSplitsOffsets\[1\]\[2\]/);
  });

  it('rejects a write past the last received row', () => {
    const { check, output, outSplitsOffsets } = setup();
    deliver(output, outSplitsOffsets);
    const end = splits.rows.reduce((sum, row) => sum + row[ME], 0) * ROW;
    output.data[end + 1] = 0;
    assert.throws(() => check.verify('eager'), /wrote past the last received row/);
  });
});

describe('InputPattern', () => {
  it('bytes() matches what fill() writes, at any offset', () => {
    const comm = fakeComm(0, 1);
    const buf = new HostBuffer(1001);
    const p = new InputPattern(77, 2);
    p.fill(comm, buf, 1001);
    for (const [offset, length] of [[0, 1001], [3, 7], [998, 3], [500, 1]]) {
      assert.deepEqual(p.bytes(offset, length), buf.data.subarray(offset, offset + length));
    }
    assert.notDeepEqual(new InputPattern(77, 3).bytes(0, 64), p.bytes(0, 64), 'ranks differ');
  });
});
