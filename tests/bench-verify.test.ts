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
  const check = ResultCheck.allToAllV(comm, { output, outSplitsOffsets }, splits, ROW, patterns, 5);
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
    assert.throws(
      () => check.verify('eager'),
      (e: unknown) => e instanceof WrongResultError && /outSplitsOffsets byte 0: outSplitsOffsets\[0\]\[0\] is -1, expected/.test(e.message),
    );
  });

  it('names the first wrong byte: its offset in the output, its row and source, both values', () => {
    const received = splits.rows.map((row) => row[ME]);
    const { check, output, outSplitsOffsets } = setup();
    deliver(output, outSplitsOffsets);
    // Two wrong bytes: the check reports the one earlier in the output, whichever source it came from.
    const last = received.length - 1 - [...received].reverse().findIndex((n) => n > 0);
    const first = received.findIndex((n) => n > 0);
    assert.ok(first < last, 'rows from two sources');
    const startOf = (src: number) => received.slice(0, src).reduce((a, b) => a + b, 0) * ROW;
    output.data[startOf(last) + 2] ^= 0xff;
    const at = startOf(first) + 5;
    const was = output.data[at];
    output.data[at] ^= 0x0f;
    const hex = (b: number) => `0x${b.toString(16).padStart(2, '0')}`;
    assert.throws(() => check.verify('eager'), (e: unknown) => {
      assert.ok(e instanceof WrongResultError);
      assert.deepEqual(e.wrong, { buffer: 'output', offset: at, detail: `row 0 from rank ${first}, byte 5 of the row, is ${hex(was ^ 0x0f)}, expected ${hex(was)}` });
      assert.equal(e.message, `rank ${ME}: eager all-to-all-v gave a wrong result at ${(splits.rowsPerRank * ROW)} B per rank: output byte ${at}: ${e.wrong.detail}`);
      assert.equal(e.code, 'A2AV_BENCH_WRONG_RESULT');
      return true;
    });
  });

  it('rejects a wrong byte in the first or last row from a source', () => {
    const received = splits.rows.map((row) => row[ME]);
    const src = received.findIndex((n) => n > 0);
    for (const row of [0, received[src] - 1]) {
      const { check, output, outSplitsOffsets } = setup();
      deliver(output, outSplitsOffsets);
      const offset = received.slice(0, src).reduce((a, b) => a + b, 0);
      output.data[(offset + row) * ROW + 3] ^= 1;
      assert.throws(() => check.verify('graph'), new RegExp(`graph all-to-all-v .*: output byte ${(offset + row) * ROW + 3}: row ${row} from rank ${src}, byte 3 of the row`));
    }
  });

  it('rejects wrong counts or offsets', () => {
    const { check, output, outSplitsOffsets } = setup();
    deliver(output, outSplitsOffsets);
    outSplitsOffsets.data[8 * (W + 2)] += 1;
    assert.throws(() => check.verify('eager'), new RegExp(`outSplitsOffsets byte ${8 * (W + 2)}: outSplitsOffsets\\[1\\]\\[2\\]`));
  });

  it('rejects a write past the last received row', () => {
    const { check, output, outSplitsOffsets } = setup();
    deliver(output, outSplitsOffsets);
    const end = splits.rows.reduce((sum, row) => sum + row[ME], 0) * ROW;
    output.data[end + 1] = 0;
    assert.throws(() => check.verify('eager'), new RegExp(`output byte ${end + 1}: written past the last received row \\(0x00 over the canary 0xa5\\)`));
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
