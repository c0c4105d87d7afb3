// split_by_peer (kernels/copy.cuh: how a copy's blocks split between destinations when its ranks
// span GPUs), compiled by nvcc for the host and run on fresh random segment sizes,
// against the rule computed here: each non-empty segment gets one block plus its share of the rest
// in proportion to its bytes, the largest takes what rounding leaves, every block lands in exactly
// one segment, a segment's blocks are contiguous, so its tiles are each copied once. Skipped with a
// message where nvcc is missing (CI has it).
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { randomInt } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { kernelsDir } from '../src/jit/module.js';
import { nvcc } from './support/kernel-source.js';
import { Rng } from './conformance/reference.js';
import { PeerSplitMode, SPLIT_MIN_BYTES } from '../src/tune/plan.js';

const seed = process.env.A2AV_SEED !== undefined ? Number(process.env.A2AV_SEED) : randomInt(2 ** 31);

interface Case {
  blocks: number;
  len: bigint[];
}

/** Per block: [segment, first, quota], or null when the call keeps the shared sweep. */
type Split = [number, number, number][] | null;

function expected(c: Case): Split {
  const nonEmpty = c.len.filter((l) => l > 0n).length;
  if (nonEmpty < 2 || c.blocks < nonEmpty) return null;
  const total = c.len.reduce((a, b) => a + b, 0n);
  const extra = BigInt(c.blocks - nonEmpty);
  const share = c.len.map((l) => (l > 0n ? 1n + (extra * l) / total : 0n));
  let largest = 0;
  c.len.forEach((l, k) => {
    if (l > c.len[largest]!) largest = k;
  });
  share[largest]! += BigInt(c.blocks) - share.reduce((a, b) => a + b, 0n);
  const out: [number, number, number][] = [];
  let first = 0;
  share.forEach((q, k) => {
    for (let j = 0; j < Number(q); j++) out.push([k, first, Number(q)]);
    first += Number(q);
  });
  return out;
}

test('split_by_peer: every block in one segment, each non-empty segment at least one, shares by bytes', (t) => {
  if (nvcc === undefined) return t.skip('nvcc not found: split_by_peer cannot be compiled here (CI has nvcc)');
  const rng = new Rng(seed);
  const cases: Case[] = [
    { blocks: 264, len: [128n << 20n, 128n << 20n] },
    { blocks: 264, len: [0n, 128n << 20n] },
    { blocks: 1, len: [5n, 7n] },
    { blocks: 2, len: [5n, 0n, 7n] },
    { blocks: 3, len: [1n, 1n << 40n, 1n] },
    { blocks: 8, len: Array.from({ length: 8 }, () => 0n) },
  ];
  for (let i = 0; i < 200; i++) {
    const W = [1, 2, 3, 4, 8, 16, 72][rng.int(7)]!;
    const blocks = [1, 2, W - 1, W, W + 1, 66, 264, 528, 1 + rng.int(600)][rng.int(9)]!;
    const len = Array.from({ length: W }, () => {
      const r = rng.int(10);
      return r < 3 ? 0n : r < 6 ? BigInt(16 * rng.int(1000)) : r < 9 ? BigInt(1024 * (1 + rng.int(1 << 20))) : 1n << BigInt(30 + rng.int(12));
    });
    cases.push({ blocks: Math.max(1, blocks), len });
  }
  const dir = mkdtempSync(join(tmpdir(), 'a2av-split-'));
  try {
    writeFileSync(
      join(dir, 'split.cu'),
      `#include <cstdio>\n#include <vector>\n#include "copy.cuh"\nint main() {\n` +
        `  int W; long long B;\n` +
        `  while (scanf("%d %lld", &W, &B) == 2) {\n` +
        `    std::vector<i64> len(W); i64 total = 0;\n` +
        `    for (int k = 0; k < W; ++k) { scanf("%lld", &len[k]); total += len[k]; }\n` +
        `    for (i64 b = 0; b < B; ++b) {\n` +
        `      int seg = -1; i64 first = -1, quota = -1;\n` +
        `      if (!(total > 0 && split_by_peer(W, len.data(), total, B, b, &seg, &first, &quota))) { printf("none"); break; }\n` +
        `      printf("%d %lld %lld ", seg, (long long)first, (long long)quota);\n` +
        `    }\n` +
        `    printf("\\n");\n` +
        `  }\n}\n`,
    );
    execFileSync(nvcc, ['-std=c++17', `-I${kernelsDir()}`, join(dir, 'split.cu'), '-o', join(dir, 'split')]);
    const input = cases.map((c) => `${c.len.length} ${c.blocks} ${c.len.join(' ')}`).join('\n') + '\n';
    const lines = execFileSync(join(dir, 'split'), { input, encoding: 'utf8', maxBuffer: 1 << 26 }).trim().split('\n');
    assert.equal(lines.length, cases.length);
    cases.forEach((c, i) => {
      const want = expected(c);
      const line = lines[i]!.trim();
      const label = `seed ${seed} (A2AV_SEED reruns it): W=${c.len.length} B=${c.blocks} len=[${c.len.join(',')}]`;
      if (want === null) return assert.equal(line, 'none', label);
      const got = line.split(/\s+/).map(Number);
      assert.deepEqual(got, want.flat(), label);
      // What the sweep does with it: block b copies tiles j, j + quota, ... of its segment, j = b - first.
      const tiles = c.len.map((l) => Number((l + 4095n) / 4096n));
      const covered = tiles.map(() => 0);
      for (const [k, first, quota] of want) covered[k]! += quota > 0 ? 1 : 0;
      c.len.forEach((l, k) => assert.ok(l === 0n ? covered[k] === 0 : covered[k]! >= 1, `${label}: segment ${k} has ${covered[k]} blocks`));
      assert.equal(want.length, c.blocks, `${label}: every block placed`);
    });
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('split_wanted: the kernels read the modes and the size threshold the host sends (PeerSplitMode, SPLIT_MIN_BYTES)', (t) => {
  if (nvcc === undefined) return t.skip('nvcc not found: split_wanted cannot be compiled here (CI has nvcc)');
  const sizes = [0, 1, SPLIT_MIN_BYTES - 1, SPLIT_MIN_BYTES, SPLIT_MIN_BYTES + 1, 2 ** 40];
  const modes = Object.values(PeerSplitMode);
  const dir = mkdtempSync(join(tmpdir(), 'a2av-split-'));
  try {
    writeFileSync(
      join(dir, 'wanted.cu'),
      `#include <cstdio>\n#include "config.cuh"\nint main() {\n` +
        `  for (int m : {${modes.join(', ')}}) for (long long n : {${sizes.map((n) => `${n}ll`).join(', ')}}) printf("%d ", (int)split_wanted(m, n));\n}\n`,
    );
    execFileSync(nvcc, ['-std=c++17', `-I${kernelsDir()}`, join(dir, 'wanted.cu'), '-o', join(dir, 'wanted')]);
    const got = execFileSync(join(dir, 'wanted'), { encoding: 'utf8' }).trim().split(' ').map(Number);
    const want = modes.flatMap((m) => sizes.map((n) => Number(m === PeerSplitMode.always || (m === PeerSplitMode.large && n >= SPLIT_MIN_BYTES))));
    assert.deepEqual(got, want);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
