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
import { f16ToF32, f32BitsToF16 } from '../src/moe/dtype.js';
import { TOKEN_KERNELS } from '../src/moe/kernel-args.js';
import { runRanks } from '../src/world/threads.js';
import { bitsOf } from './conformance/moe-token-reference.js';
import { caseArg, suite, type Case } from './conformance/suite.js';
import { buildEmulator } from './moe/emulated-device.js';
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
});

describe('MoE token group with the kernels compiled for the host (cpu backend)', () => {
  // Small ones: every kernel runs in a host thread per GPU thread where it syncs.
  const picked = ['MoE tokens W=2, expanded', 'MoE tokens W=3, compact', 'MoE tokens graph replay W=2', 'MoE tokens errors W=2', 'MoE tokens errors W=3'];
  const found = suite.filter((c) => picked.some((p) => c.name.startsWith(p)));
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

function bitsOfF32(x: number): number {
  return new Uint32Array(Float32Array.of(x).buffer)[0];
}
