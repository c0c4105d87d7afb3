// allReduce's kernel structures mirrored in TypeScript (kernel-params.ts ArParams, layout.ts's
// allReduce region and staging, status.ts's wait sites) against kernels/all-reduce.cuh and
// config.cuh, and every kernel compiled for the device by nvcc, where the layout checks
// (static_assert; NVRTC lacks offsetof) hold. The nvcc parts skip with a message where nvcc is missing.
import assert from 'node:assert/strict';
import { execFileSync, spawnSync, type SpawnSyncReturns } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { WaitSite } from '../src/collectives/status.js';
import { allReduceBlocks } from '../src/backends/cuda/all-reduce.js';
import { AR_PARAMS_BYTES, ArDtype, ArOp, writeArParams } from '../src/backends/cuda/kernel-params.js';
import { allReduceOffset, AR_HEADER, AR_TILE_BYTES, arOneShotBytes, arRounds, arSharedBytes, arSlots, arStageBytes, laneEnd } from '../src/backends/cuda/layout.js';
import { kernelsDir } from '../src/jit/module.js';
import { nvcc } from './support/kernel-source.js';
import { probeDefines, probeNumber, probeSwitch } from '../src/backends/cuda/probe-defines.js';
import { UsageError } from '../src/errors.js';

const config = readFileSync(join(kernelsDir(), 'config.cuh'), 'utf8');
const header = readFileSync(join(kernelsDir(), 'all-reduce.cuh'), 'utf8');

function define(source: string, name: string): number {
  const m = new RegExp(`^#define ${name} \\(?(\\d+)(?: << (\\d+))?\\)?`, 'm').exec(source);
  assert.ok(m, `#define ${name}`);
  return Number(m[1]) * 2 ** Number(m[2] ?? 0);
}

/** Per W: what layout.cu prints, from layout.ts (the lane's allReduce region and its staging). */
function expectedLayout(worlds: number[]): number[][] {
  return worlds.map((W) => {
    const at = allReduceOffset(W), S = arSlots(W);
    const ready = at + 2 * 16 * AR_HEADER * W;
    return [at, ready, ready + 8 * S * W, ready + 16 * S * W, laneEnd(W), arOneShotBytes(W), S, arStageBytes(W), 4 * W * arOneShotBytes(W) + (W + 2) * AR_TILE_BYTES];
  });
}

// Run as a program by the layout test, with the tuning run's A2AV_PROBE_DEFINES: prints the layout.
if (process.argv[2] === '--print-layout') {
  process.stdout.write(JSON.stringify(expectedLayout(process.argv[3].split(',').map(Number))));
  process.exit(0);
}

describe('allReduce kernels mirrored in TypeScript', () => {
  test('constants of config.cuh and all-reduce.cuh', () => {
    assert.equal(AR_HEADER, define(config, 'A2AV_AR_HEADER'));
    assert.equal(AR_TILE_BYTES, define(config, 'A2AV_AR_TILE_BYTES'));
    assert.equal(ArDtype.f32, define(header, 'AR_F32'));
    assert.equal(ArDtype.bf16, define(header, 'AR_BF16'));
    assert.equal(ArOp.sum, define(header, 'AR_SUM'));
    for (const m of config.matchAll(/^#define A2AV_WAIT_(\w+) (\d+)/gm)) assert.ok(WaitSite[Number(m[2])], `status.ts names wait A2AV_WAIT_${m[1]}`);
  });

  test('ArParams: kernel-params.ts writes every field at the offset all-reduce.cuh asserts', () => {
    const at = new Map<string, number>();
    for (const m of header.matchAll(/A2AV_LAYOUT_CHECK\(__builtin_offsetof\(ArParams, (\w+)\) == (\d+)/g)) at.set(m[1], Number(m[2]));
    const size = /A2AV_LAYOUT_CHECK\(sizeof\(ArParams\) == (\d+)/.exec(header);
    assert.ok(size && at.size === 13, 'all-reduce.cuh asserts the size and every offset past the first');
    assert.equal(AR_PARAMS_BYTES, Number(size[1]));
    const view = new DataView(new ArrayBuffer(AR_PARAMS_BYTES));
    writeArParams(view, {
      input: 0x11n, outPeers: 0x22n, padPeers: 0x33n, pad: 0x44n, stagePeers: 0x55n, laneOffset: 0x66, stageOffset: 0x77, count: 0x88,
      outId: 0x99, timeoutNs: 0xaan, dtype: 0xb, op: 0xc, rank: 0xd, world: 0xe,
    });
    const u64 = (name: string) => view.getBigUint64(at.get(name)!, true);
    const i32 = (name: string) => view.getInt32(at.get(name)!, true);
    assert.equal(view.getBigUint64(0, true), 0x11n, 'input at 0');
    assert.deepEqual(
      ['outPeers', 'padPeers', 'pad', 'stagePeers', 'laneOffset', 'stageOffset', 'count', 'outId', 'timeoutNs'].map(u64),
      [0x22n, 0x33n, 0x44n, 0x55n, 0x66n, 0x77n, 0x88n, 0x99n, 0xaan],
    );
    assert.deepEqual(['dtype', 'op', 'rank', 'world'].map(i32), [0xb, 0xc, 0xd, 0xe]);
  });

  test('tuning sizes (A2AV_PROBE_DEFINES): the flags, the values, and a named error for one the kernels cannot take', () => {
    assert.deepEqual(probeDefines('A2AV_PROBE_NO_COPY  A2AV_PROBE_AR_TILE_BYTES=65536'), ['-DA2AV_PROBE_NO_COPY', '-DA2AV_PROBE_AR_TILE_BYTES=65536']);
    assert.deepEqual(probeDefines(''), []);
    assert.throws(() => probeDefines('-DA2AV_PROBE_X'), UsageError);
    assert.equal(probeNumber('A2AV_PROBE_AR_TILE_BYTES', 7, 256, 'A2AV_PROBE_NO_COPY'), 7, 'not given: the default');
    assert.equal(probeSwitch('A2AV_PROBE_NO_COPY', 'A2AV_PROBE_AR_TILE_BYTES=512 A2AV_PROBE_NO_COPY'), true);
    assert.equal(probeSwitch('A2AV_PROBE_NO_COPY', 'A2AV_PROBE_NO_COPY_X A2AV_PROBE_NO_COPY=1'), false, 'another name, or a value: not the switch');
    assert.equal(probeSwitch('A2AV_PROBE_NO_COPY', undefined), false);
    assert.equal(probeNumber('A2AV_PROBE_AR_TILE_BYTES', 7, 256, 'A2AV_PROBE_NO_COPY A2AV_PROBE_AR_TILE_BYTES=512'), 512);
    for (const bad of ['A2AV_PROBE_AR_TILE_BYTES=100', 'A2AV_PROBE_AR_TILE_BYTES=0', 'A2AV_PROBE_AR_TILE_BYTES', 'A2AV_PROBE_AR_TILE_BYTES=1k']) {
      assert.throws(() => probeNumber('A2AV_PROBE_AR_TILE_BYTES', 7, 256, bad), (e: unknown) => e instanceof UsageError && /A2AV_PROBE_AR_TILE_BYTES must be/.test(e.message), bad);
    }
  });

  test('round counts and shared memory: small cases by hand', () => {
    // 16384 f32 or 32768 bf16 a tile; W tiles a round
    assert.equal(arRounds(2, 0, 4), 0);
    assert.equal(arRounds(2, 1, 4), 1);
    assert.equal(arRounds(2, 2 * 16384, 4), 1);
    assert.equal(arRounds(2, 2 * 16384 + 1, 4), 2);
    assert.equal(arRounds(3, 3 * 32768 * 5, 2), 5);
    assert.equal(arSharedBytes(160), 160 * 6 * 8);
    assert.ok(arSharedBytes(160) <= 48 * 1024, 'no opt-in to more shared memory');
  });

  test('blocks a call launches: a thread a packet one-shot, a block a round after, never past the fair share or half the slots', () => {
    assert.equal(allReduceBlocks(2, 0, 4, 66), 1, 'a zero count still meets its peers');
    assert.equal(allReduceBlocks(2, 1, 2, 66), 1);
    assert.equal(allReduceBlocks(2, 65536, 4, 66), 64, '256 KiB one-shot at W = 2: 32768 packets');
    assert.equal(allReduceBlocks(2, 65536, 4, 8), 8, 'the fair share caps it');
    assert.equal(allReduceBlocks(2, (1 << 18) + 1, 4, 66), 9, 'past one-shot (1 MiB at W = 2): 17 tiles, 9 rounds');
    assert.equal(allReduceBlocks(2, 64 << 20, 4, 1000), 64, 'half of 128 slots');
    assert.equal(allReduceBlocks(2, 64 << 20, 4, 33), 33, 'the fair share caps it');
    assert.equal(allReduceBlocks(8, 1 << 18, 4, 66), 2, 'W = 8, 1 MiB (one-shot ends at 256 KiB): 16 tiles, 2 rounds');
    assert.equal(allReduceBlocks(72, 1 << 22, 4, 66), 1, 'W = 72: 3 slots, one block');
    for (const W of [1, 2, 3, 8, 160]) {
      for (const count of [0, 1, 4097, 1 << 16, 1 << 22]) {
        const b = allReduceBlocks(W, count, 4, 1000);
        assert.ok(Number.isInteger(b) && b >= 1, `W=${W} count=${count}: ${b}`);
        if (count * 4 > arOneShotBytes(W)) assert.ok(b <= arSlots(W) / 2, `W=${W} count=${count}: ${b} blocks, ${arSlots(W)} slots`);
      }
    }
  });

  test('allReduce region and staging: the headers compiled for the host give what layout.ts computes', (t) => {
    const compiler = nvcc;
    if (compiler === undefined) return t.skip('nvcc not found: the layout cannot be compiled here (CI has nvcc)');
    const dir = mkdtempSync(join(tmpdir(), 'a2av-ar-layout-'));
    try {
      const worlds = [1, 2, 3, 7, 8, 16, 72, 160];
      writeFileSync(
        join(dir, 'layout.cu'),
        `#include <cstdio>\n#include "config.cuh"\nint main() {\n` +
          `  for (int W : {${worlds.join(', ')}}) {\n` +
          `    u8* l = (u8*)0;\n` +
          `    printf("%lld %lld %lld %lld %lld %lld %d %lld %lld\\n", (long long)((u8*)lane_ar_header(l, W, 0, 0) - l), (long long)((u8*)lane_ar_ready(l, W, 0) - l),\n` +
          `           (long long)((u8*)lane_ar_free(l, W, 0) - l), (long long)((u8*)lane_ar_rounds(l, W) - l), (long long)(lane_end(l, W) - l),\n` +
          `           (long long)ar_one_shot_bytes(W), ar_slots(W), (long long)ar_stage_bytes(W), (long long)(ar_stage_tile(l, W, 1, 2) - l));\n` +
          `  }\n}\n`,
      );
      const hostLayout = (defines: string[]) => {
        execFileSync(compiler, ['-std=c++17', ...defines, `-I${kernelsDir()}`, join(dir, 'layout.cu'), '-o', join(dir, 'layout')]);
        return execFileSync(join(dir, 'layout'), { encoding: 'utf8' }).trim().split('\n').map((l) => l.split(' ').map(Number));
      };
      assert.deepEqual(hostLayout([]), expectedLayout(worlds));
      // A tuning run's sizes (A2AV_PROBE_DEFINES): layout.ts reads them when it loads, so in a child.
      const tuned = 'A2AV_PROBE_AR_TILE_BYTES=65536 A2AV_PROBE_AR_ONE_SHOT_MAX=1048576 A2AV_PROBE_AR_ONE_SHOT_TOTAL=2097152 A2AV_PROBE_AR_SLOT_BUDGET=8388608 A2AV_PROBE_AR_MAX_SLOTS=64';
      const child = spawnSync(process.execPath, [fileURLToPath(import.meta.url), '--print-layout', worlds.join(',')], { encoding: 'utf8', env: { ...process.env, A2AV_PROBE_DEFINES: tuned } });
      assert.equal(child.status, 0, child.stderr);
      const tunedWant = JSON.parse(child.stdout) as number[][];
      assert.notDeepEqual(tunedWant, expectedLayout(worlds), 'the tuned sizes change the layout');
      assert.deepEqual(hostLayout(tuned.split(' ').map((d) => `-D${d}`)), tunedWant);
      for (const W of worlds) {
        assert.equal(arStageBytes(W) % 256, 0, `W=${W}: lanes' staging stays 256-byte aligned`);
        const slotArea = Math.max(16 << 20, 2 * W * AR_TILE_BYTES);
        assert.ok(arStageBytes(W) <= slotArea + (8 << 20), `W=${W}: staging of a lane stays within the slot budget (or two slots a source) and the two LL areas`);
        assert.ok(arSlots(W) >= 2, `W=${W}: a block has two rounds in flight`);
      }
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  test('every kernel compiles for the device under nvcc (layout checks hold), on one GPU and across GPUs', (t) => {
    if (nvcc === undefined) return t.skip('nvcc not found: the kernels cannot be compiled here (CI has nvcc)');
    const dir = mkdtempSync(join(tmpdir(), 'a2av-kernels-'));
    try {
      const files = readdirSync(kernelsDir()).filter((f) => f.endsWith('.cu'));
      assert.ok(files.includes('all-reduce.cu'));
      for (const f of files) {
        for (const oneGpu of f === 'all-reduce.cu' ? [0, 1] : [0]) {
          const r: SpawnSyncReturns<string> = spawnSync(nvcc, ['-std=c++17', '-arch=sm_90', `-DA2AV_ONE_GPU=${oneGpu}`, '-c', join(kernelsDir(), f), '-o', join(dir, `${f}.${oneGpu}.o`)], { encoding: 'utf8' });
          assert.equal(r.status, 0, `${f} (A2AV_ONE_GPU=${oneGpu}):\n${r.stderr}`);
        }
      }
      // Every probe's switch a kernel reads (A2AV_PROBE_DEFINES) still compiles: the probes of
      // docs/perf.md rely on them. Sizes (A2AV_PROBE_AR_*) are covered by the layout test above.
      // A .cu file's switches are its own and its headers' (followed through their includes).
      for (const f of files) {
        const seen = new Set<string>();
        const sources = (file: string): string[] => {
          if (seen.has(file)) return [];
          seen.add(file);
          const source = readFileSync(join(kernelsDir(), file), 'utf8');
          return [source, ...[...source.matchAll(/#include "([^"]+)"/g)].flatMap((m) => sources(m[1]!))];
        };
        const switches = [...new Set(sources(f).flatMap((source) => [...source.matchAll(/#if(?:n?def)? (A2AV_PROBE_(?!AR_)[A-Z0-9_]+)/g)].map((m) => m[1])))];
        for (const name of switches) {
          const r: SpawnSyncReturns<string> = spawnSync(nvcc, ['-std=c++17', '-arch=sm_90', `-D${name}`, '-c', join(kernelsDir(), f), '-o', join(dir, `${f}.${name}.o`)], { encoding: 'utf8' });
          assert.equal(r.status, 0, `${f} (${name}):\n${r.stderr}`);
        }
      }
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
