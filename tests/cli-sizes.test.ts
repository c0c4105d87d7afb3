import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { doublingSizes, formatBytes, parseSize } from '../src/bench/units.js';

describe('parseSize', () => {
  it('reads binary units and plain bytes', () => {
    assert.equal(parseSize('512K'), 512 * 1024);
    assert.equal(parseSize('4G'), 4 * 2 ** 30);
    assert.equal(parseSize('1M'), 2 ** 20);
    assert.equal(parseSize('4096'), 4096);
    assert.equal(parseSize('64k'), 64 * 1024);
    assert.equal(parseSize('2GiB'), 2 * 2 ** 30);
    assert.equal(parseSize('8MB'), 8 * 2 ** 20);
    assert.equal(parseSize('1.5G'), 1.5 * 2 ** 30);
    assert.equal(parseSize(' 3 T '), 3 * 2 ** 40);
    assert.equal(parseSize('100B'), 100);
    // IEC's short form, as the tables print the unit less its B.
    assert.equal(parseSize('4Ki'), 4096);
    assert.equal(parseSize('1.5Gi'), 1.5 * 2 ** 30);
  });

  it('rejects garbage, saying what is accepted', () => {
    for (const bad of ['', 'abc', '4X', '-1', '1e6', 'K', '4 G B', '0x10', '1,024', '4i', '4ib', '4Bi']) {
      assert.throws(() => parseSize(bad), /not a size: .*512K, 4G/, bad);
    }
  });

  it('rejects sizes that are not a whole positive number of bytes', () => {
    for (const bad of ['0', '0K', '0.3K', '1.5']) assert.throws(() => parseSize(bad), /not a whole positive number of bytes/, bad);
  });

  it('rejects sizes past 2^53 - 1 bytes as too large, naming the limit, not as fractional', () => {
    for (const big of ['8192T', '99999999T', '9007199254740992']) {
      assert.throws(() => parseSize(big), { name: 'RangeError', message: `too large: '${big}' (a size is at most 2^53 - 1 bytes, just under 8192T)` }, big);
    }
    assert.equal(parseSize('8191T'), 8191 * 2 ** 40);
    assert.equal(parseSize('9007199254740991'), Number.MAX_SAFE_INTEGER);
  });
});

describe('formatBytes', () => {
  it('prints binary units', () => {
    assert.equal(formatBytes(512 * 1024), '512 KiB');
    assert.equal(formatBytes(4 * 2 ** 30), '4 GiB');
    assert.equal(formatBytes(1536), '1.5 KiB');
    assert.equal(formatBytes(1000), '1000 B');
    assert.equal(formatBytes(2 ** 20), '1 MiB');
  });

  it('keeps a decimal on sizes that are not whole units', () => {
    assert.equal(formatBytes(65534), '64.0 KiB');
    assert.equal(formatBytes(2 ** 20 - 4), '1.0 MiB');
    assert.equal(formatBytes(2 ** 20 + 2 ** 19), '1.5 MiB');
  });

  it('round-trips with parseSize for powers of two', () => {
    for (let s = 1; s <= 2 ** 42; s *= 2) assert.equal(parseSize(formatBytes(s).replace(' ', '')), s);
  });
});

describe('doublingSizes', () => {
  it('doubles from min up to max', () => {
    assert.deepEqual(doublingSizes(512 << 10, 4 << 20), [512 << 10, 1 << 20, 2 << 20, 4 << 20]);
    assert.deepEqual(doublingSizes(3, 20), [3, 6, 12]);
    assert.deepEqual(doublingSizes(8, 8), [8]);
  });
  it('rounds each size up to whole units, never below min nor past max, without repeats', () => {
    assert.deepEqual(doublingSizes(1500, 6000, 1024), [2048, 3072, 5120]);
    assert.deepEqual(doublingSizes(7, 40, 4), [8, 16, 28]);
    assert.deepEqual(doublingSizes(5, 9, 4), [8]);
    assert.deepEqual(doublingSizes(1000, 5000, 1024), [1024, 2048, 4096]);
    for (const [min, max, unit] of [[3, 100, 7], [1 << 20, 3 << 20, 14336], [9, 70, 8]] as const) {
      const sizes = doublingSizes(min, max, unit);
      for (const s of sizes) assert.ok(s >= min && s <= max && s % unit === 0, `${s} in [${min}, ${max}], a multiple of ${unit}`);
      assert.equal(new Set(sizes).size, sizes.length);
    }
    assert.throws(() => doublingSizes(5, 7, 4), /no multiple of 4 bytes lies between 5 B and 7 B/);
  });
});
