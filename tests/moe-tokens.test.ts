// The token-level MoE group's GPU code where there is no GPU: kernels/moe-tokens.cu's structs
// against src/moe/kernel-args.ts, its compile under nvcc, and the group's conformance programs run
// on the cpu backend with the kernels compiled for the host (tests/moe/emulate.cpp) in place of its
// TypeScript loops, so the kernels' own routing order, gates and sums meet the host reference.
// The conformance suite (tests/conformance.test.ts) runs the same programs on every backend.
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, test } from 'node:test';
import { kernelsDir } from '../src/jit/module.js';
import { f16BitsToF32Bits, f16ToF32, f32BitsToF16 } from '../src/moe/dtype.js';
import { TOKEN_KERNELS } from '../src/moe/kernel-args.js';
import { runRanks } from '../src/world/threads.js';
import { bitsOf } from './conformance/moe-token-reference.js';
import { caseArg, suite, type Case } from './conformance/suite.js';
import { buildEmulator } from './moe/emulated-device.js';
import { checkRouteGather, type RouteCase } from './moe/route-gather-equivalence.js';
import { SMALL_ENTRIES } from '../src/moe/kernel-args.js';
import { evenRanksPerToken, tokenShape } from '../src/moe/shape.js';
import { mulberry32 } from '../src/bench/splits.js';
import { hostCompiler } from './support/host-kernels.js';
import { assertCompilesForDevice, assertStructsMatch } from './support/kernel-source.js';

const cases = new URL('./conformance/cases.js', import.meta.url);

describe('MoE token kernels', () => {
  test('kernels/moe-tokens.cu: every struct matches src/moe/kernel-args.ts field by field, every kernel has a spec', () => {
    assertStructsMatch('moe-tokens.cu', TOKEN_KERNELS);
  });

  test('kernels/moe-tokens.cu compiles for the device under nvcc', (t) => {
    assertCompilesForDevice(t, 'moe-tokens.cu', [`-I${kernelsDir()}`]);
  });

  test('f16: every f16 widens exactly and rounds back; f32 values round to nearest-even as the reference does', () => {
    for (let h = 0; h < 0x10000; h++) {
      if ((h & 0x7c00) === 0x7c00 && (h & 0x3ff) !== 0) continue; // NaN
      assert.equal(f32BitsToF16(bitsOfF32(f16ToF32(h))), h, `f16 ${h.toString(16)}`);
    }
    const edges = [0, -0, 1, -1, 65504, 65519.99, 65520, 1e9, 2 ** -14, 2 ** -24, 2 ** -25, 3 * 2 ** -26, 2 ** -26, 1 + 2 ** -11, 1 + 3 * 2 ** -11, 5.960464477539063e-8 * 1.5];
    const random = Array.from({ length: 20000 }, (_, i) => Math.fround(Math.sin(i * 12.9898) * 2 ** ((i % 60) - 30)));
    for (const x of [...edges, ...random]) assert.equal(f32BitsToF16(bitsOfF32(x)), bitsOf('f16', Math.fround(x)), `f16 of ${x}`);
    assert.equal(f32BitsToF16(0x7fc00000), 0x7e00, 'NaN stays a quiet NaN');
  });

  test('f16 widened as bits (the combine\'s terms): every value as f16ToF32 gives it, a NaN with its sign and payload as the kernel keeps them', () => {
    for (let h = 0; h < 0x10000; h++) {
      const nan = (h & 0x7c00) === 0x7c00 && (h & 0x3ff) !== 0;
      const want = nan ? (((h & 0x8000) << 16) | 0x7f800000 | ((h & 0x3ff) << 13)) >>> 0 : bitsOfF32(f16ToF32(h));
      assert.equal(f16BitsToF32Bits(h), want, `f16 ${h.toString(16)}`);
    }
  });
});

describe('MoE token group with the kernels compiled for the host (cpu backend)', () => {
  // Small ones: every kernel runs in a host thread per GPU thread where it syncs.
  const picked = ['MoE tokens W=2, expanded', 'MoE tokens W=3, compact', 'MoE tokens graph replay W=2, expanded: new ids', 'MoE tokens errors W=2', 'MoE tokens errors W=3'];
  // (y symmetric changes nothing here: the host build names no peer's buffers, so combine never pulls.)
  const found = suite.filter((c) => picked.some((p) => c.name.startsWith(p)) && !c.name.includes('y symmetric'));
  test('the cases are there', () => assert.equal(found.length, picked.length));
  // Sizes the suite's cases never reach: mt_route with many chunks of more than one tile each
  // (256 entries) and its scan over them, uneven tiles, a hot expert filling whole tiles; the
  // reduction 16 bytes a thread (rows of 32 B) and one element a thread (rows of 24 B).
  const wide: Case[] = [
    {
      name: 'MoE tokens W=2, expanded, many routing chunks: E=64, top-8, up to 2200 tokens',
      fn: 'moeTokens',
      ranks: 2,
      arg: { layout: 'expanded', experts: 64, topk: 8, maxTokens: 2200, align: 1, rowBytes: 48, hidden: 8, calls: 3 },
    },
    {
      name: 'MoE tokens W=3, compact, many routing chunks: E=4, top-6, up to 1500 tokens',
      fn: 'moeTokens',
      ranks: 3,
      arg: { layout: 'compact', experts: 4, topk: 6, maxTokens: 1500, align: 1, rowBytes: 20, hidden: 6, calls: 3 },
    },
  ];
  const chosen = [...found, ...wide];
  let lib: string | undefined;
  let dir: string | undefined;
  for (const c of chosen) {
    test(c.name, async (t) => {
      const compiler = hostCompiler();
      if (compiler === undefined) return t.skip('no host C++ compiler (g++ or clang++)');
      if (lib === undefined) {
        dir = mkdtempSync(join(tmpdir(), 'a2av-moe-tokens-emu-'));
        lib = buildEmulator(compiler, dir);
      }
      const seed = 1 + Math.floor(Math.random() * 2 ** 30);
      try {
        await runRanks({ backend: 'cpu', ranks: c.ranks, timeoutMs: 60_000, lanes: 2 }, cases, c.fn, { ...caseArg(c, seed), emulator: lib });
      } catch (err) {
        throw new Error(`${c.fn} W=${c.ranks} failed with seed ${seed}: ${(err as Error).message}`, { cause: err });
      }
    });
  }
  test('clean up', () => {
    if (dir !== undefined) rmSync(dir, { recursive: true, force: true });
  });
});

describe('mt_route_gather (one block) writes what mt_route then mt_gather write, kernels compiled for the host', () => {
  let lib: string | undefined;
  let dir: string | undefined;
  const seed = 1 + Math.floor(Math.random() * 2 ** 30);
  const random = mulberry32(seed);
  const base: RouteCase = { layout: 'expanded', world: 2, expertsPerRank: 128, topk: 8, tokenCap: 1, tokens: 1, deviceCount: false, idx64: true, weights: true, rowOf: true, rowBytes: 32, badIds: 0, none: 0, hot: 0 };
  // DeepSeek-V3's shape at 1 and 128 tokens, the kernel's most entries and buckets, 72 ranks, no tokens, a hot expert, -1 slots, bad ids and counts, copies of the rows, int32 ids.
  const fixed: RouteCase[] = [
    base,
    { ...base, tokenCap: 128, tokens: 128 },
    { ...base, layout: 'compact', tokenCap: 128, tokens: 128 },
    { ...base, tokenCap: SMALL_ENTRIES / 8, tokens: SMALL_ENTRIES / 8, hot: 0.5 },
    { ...base, world: 2, expertsPerRank: 256, tokenCap: 100, tokens: 77, deviceCount: true },
    { ...base, layout: 'compact', world: 72, expertsPerRank: 4, tokenCap: 100, tokens: 90, deviceCount: true },
    { ...base, tokens: 0, tokenCap: 5 },
    { ...base, tokenCap: 40, tokens: 33, none: 0.4, weights: false, idx64: false },
    { ...base, layout: 'compact', world: 8, expertsPerRank: 2, topk: 6, tokenCap: 50, tokens: 50, none: 0.2, hot: 0.3 },
    { ...base, tokenCap: 64, tokens: 64, badIds: 3 },
    { ...base, layout: 'compact', tokenCap: 64, tokens: 20, badIds: 2, deviceCount: true },
    { ...base, tokenCap: 16, tokens: 17, deviceCount: true },
    { ...base, tokenCap: 16, tokens: -3, deviceCount: true },
    { ...base, rowOf: false, rowBytes: 14, tokenCap: 30, tokens: 29, none: 0.1 },
    { ...base, layout: 'compact', rowOf: false, rowBytes: 48, world: 3, expertsPerRank: 3, topk: 4, tokenCap: 70, tokens: 61 },
    { ...base, world: 1, expertsPerRank: 1, topk: 1, tokenCap: SMALL_ENTRIES, tokens: SMALL_ENTRIES - 1 },
  ];
  const drawn: RouteCase[] = Array.from({ length: 24 }, () => {
    const topk = 1 + Math.floor(random() * 8);
    const tokenCap = 1 + Math.floor(random() * Math.floor(SMALL_ENTRIES / topk));
    const world = 1 + Math.floor(random() * 12);
    const expertsPerRank = 1 + Math.floor(random() * 40);
    return {
      layout: random() < 0.5 ? 'expanded' : 'compact',
      world,
      expertsPerRank,
      topk: Math.min(topk, world * expertsPerRank),
      tokenCap,
      tokens: Math.floor(random() * (tokenCap + 1)),
      deviceCount: random() < 0.5,
      idx64: random() < 0.5,
      weights: random() < 0.7,
      rowOf: random() < 0.7,
      rowBytes: 4 + Math.floor(random() * 60),
      badIds: random() < 0.2 ? 1 + Math.floor(random() * 3) : 0,
      none: random() * 0.3,
      hot: random() < 0.3 ? random() * 0.8 : 0,
    };
  });
  test(`${fixed.length} chosen routings and ${drawn.length} drawn ones (seed ${seed})`, (t) => {
    const compiler = hostCompiler();
    if (compiler === undefined) return t.skip('no host C++ compiler (g++ or clang++)');
    dir = mkdtempSync(join(tmpdir(), 'a2av-route-gather-'));
    lib = buildEmulator(compiler, dir);
    for (const c of [...fixed, ...drawn]) checkRouteGather(lib, c, random);
  });
  test('clean up', () => {
    if (dir !== undefined) rmSync(dir, { recursive: true, force: true });
  });
});

function bitsOfF32(x: number): number {
  return new Uint32Array(Float32Array.of(x).buffer)[0];
}

describe('the token group sizes its exchanges for an even routing', () => {
  // Every K-subset of N = W·E experts, counted: the ranks it falls on, averaged.
  function enumerated(world: number, perRank: number, topk: number): number {
    const n = world * perRank;
    let subsets = 0;
    let ranks = 0;
    const walk = (from: number, left: number, hit: Set<number>): void => {
      if (left === 0) {
        subsets++;
        ranks += hit.size;
        return;
      }
      for (let e = from; e <= n - left; e++) walk(e + 1, left - 1, new Set(hit).add(Math.floor(e / perRank)));
    };
    walk(0, topk, new Set());
    return ranks / subsets;
  }
  test('compact: the ranks K distinct experts fall on, against every K-subset counted', () => {
    for (const [w, e, k] of [[1, 4, 2], [2, 1, 2], [3, 2, 2], [4, 3, 3], [3, 4, 5], [5, 2, 10], [8, 2, 1]] as const) {
      const got = evenRanksPerToken(w, e, k);
      assert.ok(Math.abs(got - enumerated(w, e, k)) < 1e-9, `W=${w} E=${e} K=${k}: ${got} against ${enumerated(w, e, k)}`);
    }
    const v3 = tokenShape({ world: 8, rank: 0, layout: 'compact', experts: 256, topk: 8, tokenCap: 4096, rowBytes: 14336, combineRowBytes: 14336, align: 1 });
    assert.ok(v3.evenRowsPerToken > 5.2 && v3.evenRowsPerToken < 5.3 && v3.rowsPerToken === 8, `DeepSeek-V3 on 8 ranks: ${v3.evenRowsPerToken}`);
    const expanded = tokenShape({ world: 8, rank: 0, layout: 'expanded', experts: 256, topk: 8, tokenCap: 64, rowBytes: 16, combineRowBytes: 16, align: 1 });
    assert.equal(expanded.evenRowsPerToken, 8);
  });
});
