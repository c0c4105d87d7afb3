// The host summation of allReduce (src/collectives/reduce.ts) against a scalar reference written
// here with Math.fround and integer bit arithmetic: the ordered sum is the cpu backend's result and
// the conformance suite's expectation, so it gets a check that shares no code with it.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { bf16ToF32, f32ToBf16, orderedSum } from '../src/collectives/reduce.js';

/** bf16 bits of f32 `x` (already an f32 value), nearest-even, by integer arithmetic on its bits. */
function scalarBf16(x: number): number {
  const dv = new DataView(new ArrayBuffer(4));
  dv.setFloat32(0, x);
  const bits = dv.getUint32(0);
  if (Number.isNaN(x)) return (bits >>> 16) | 0x40;
  const upper = Math.floor(bits / 65536);
  const lower = bits % 65536;
  const up = lower > 0x8000 || (lower === 0x8000 && upper % 2 === 1);
  return (upper + (up ? 1 : 0)) & 0xffff;
}

function scalarWiden(bits: number): number {
  const dv = new DataView(new ArrayBuffer(4));
  dv.setUint32(0, bits * 65536);
  return dv.getFloat32(0);
}

test('bf16 rounding: nearest, ties to even, signed zero, infinities, NaN', () => {
  const cases = [0, -0, 1, -1, 1 + 2 ** -8, 1 + 2 ** -7 + 2 ** -8, 1 + 2 ** -9, 3.140625, 65504, 3.4e38, -3.4e38, Infinity, -Infinity, 2 ** -130, NaN];
  for (const x of cases) assert.equal(f32ToBf16(x), scalarBf16(Math.fround(x)), `f32ToBf16(${x})`);
  assert.equal(f32ToBf16(1 + 2 ** -8), 0x3f80, 'a tie rounds to the even 1.0');
  assert.equal(f32ToBf16(1 + 2 ** -7 + 2 ** -8), 0x3f82, 'a tie rounds up to even');
  assert.equal(f32ToBf16(3.4e38), 0x7f80, 'past the largest bf16: infinity');
  assert.ok(Number.isNaN(bf16ToF32(f32ToBf16(NaN))));
  for (let bits = 0; bits < 0x10000; bits += 97) {
    const want = scalarWiden(bits);
    if (Number.isNaN(want)) assert.ok(Number.isNaN(bf16ToF32(bits)));
    else assert.equal(Object.is(bf16ToF32(bits), want), true, `bf16ToF32(0x${bits.toString(16)})`);
  }
});

test('orderedSum matches a scalar rank-ordered f32 sum bit for bit (f32 and bf16, W = 1..8)', () => {
  let state = 12345;
  const rand = (): number => ((state = (Math.imul(state, 1103515245) + 12345) >>> 0) / 2 ** 32 - 0.5) * 2 ** ((state >>> 3) % 16 - 8);
  for (const W of [1, 2, 3, 5, 8]) {
    const count = 1001;
    const values = Array.from({ length: W }, () => Array.from({ length: count }, () => Math.fround(rand())));
    const f32 = values.map((v) => new Uint8Array(Float32Array.from(v).buffer));
    const out = new Uint8Array(4 * count);
    orderedSum({ dtype: 'f32', sources: f32, output: out, count });
    const got = new Float32Array(out.buffer);
    const bf = values.map((v) => Uint16Array.from(v, (x) => scalarBf16(x)));
    const outBf = new Uint8Array(2 * count);
    orderedSum({ dtype: 'bf16', sources: bf.map((b) => new Uint8Array(b.buffer)), output: outBf, count });
    const gotBf = new Uint16Array(outBf.buffer);
    for (let i = 0; i < count; i++) {
      let acc = values[0][i];
      for (let r = 1; r < W; r++) acc = Math.fround(acc + values[r][i]);
      assert.ok(Object.is(got[i], acc), `f32 W=${W} element ${i}: ${got[i]} vs ${acc}`);
      let accBf = scalarWiden(bf[0][i]);
      for (let r = 1; r < W; r++) accBf = Math.fround(accBf + scalarWiden(bf[r][i]));
      assert.equal(gotBf[i], scalarBf16(accBf), `bf16 W=${W} element ${i}`);
    }
  }
});

test('orderedSum follows the given order (which is what makes it deterministic)', () => {
  const f = (xs: number[]): Uint8Array => new Uint8Array(Float32Array.from(xs).buffer);
  const sum = (sources: Uint8Array[]): number => {
    const out = new Uint8Array(4);
    orderedSum({ dtype: 'f32', sources, output: out, count: 1 });
    return new Float32Array(out.buffer)[0];
  };
  assert.equal(sum([f([1e8]), f([1]), f([-1e8])]), 0);
  assert.equal(sum([f([1e8]), f([-1e8]), f([1])]), 1);
  assert.ok(Object.is(sum([f([-0]), f([-0])]), -0), '-0 + -0 stays -0');
});

test('orderedSum: unaligned sources and output, in place on the first source, count 0', () => {
  const raw = new Uint8Array(4 * 3 + 1);
  new DataView(raw.buffer).setFloat32(1, 1.5, true);
  new DataView(raw.buffer).setFloat32(5, 2.25, true);
  const a = raw.subarray(1, 9);
  const b = new Uint8Array(Float32Array.from([0.25, 0.5]).buffer);
  orderedSum({ dtype: 'f32', sources: [a, b], output: a, count: 2 });
  assert.equal(new DataView(raw.buffer).getFloat32(1, true), 1.75);
  assert.equal(new DataView(raw.buffer).getFloat32(5, true), 2.75);
  const untouched = new Uint8Array([9, 9]);
  orderedSum({ dtype: 'bf16', sources: [untouched], output: untouched, count: 0 });
  assert.deepEqual([...untouched], [9, 9]);
});
