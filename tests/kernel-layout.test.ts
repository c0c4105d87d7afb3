// The TypeScript mirrors of the kernels' structures (src/backends/cuda/layout.ts, kernel-params.ts,
// collectives/status.ts) against kernels/config.cuh and kernels/a2av.cu: the constants are read
// from the sources, and the pad layout is computed by the headers themselves, compiled by nvcc
// for the host (skipped with a message where nvcc is missing; CI has it).
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, test } from 'node:test';
import { MismatchCode, StatusCode, StatusField, STATUS_BYTES } from '../src/collectives/status.js';
import { A2AV_PARAMS_BYTES, writeA2avParams } from '../src/backends/cuda/kernel-params.js';
import { LANE_HEADER_BYTES, LaneHeaderField, laneEnd, MAX_EXPERTS, moeOffset, PAYLOAD_HEADER, planBytes, scratchBytes, SLICE_INDEX_ENTRIES, sliceIndexOffset, STATUS_AREA_BYTES, STATUS_RING, StatusAreaField, X1_HEADER, X2_HEADER, XF_EXTRA, XF_MAX_MATRIX } from '../src/backends/cuda/layout.js';
import { MAX_EXPERTS_PER_RANK } from '../src/backends/backend.js';
import { writeXParams, X_PARAMS_BYTES } from '../src/backends/cuda/kernel-params.js';
import { EVENT_RING } from '../src/backends/stream-lane.js';
import { kernelsDir } from '../src/jit/module.js';
import { nvcc } from './support/kernel-source.js';
import { SLICE_THREADS } from '../src/backends/cuda/moe.js';
import { REPLAY_CALLS_PER_LANE } from '../src/collectives/check.js';

const config = readFileSync(join(kernelsDir(), 'config.cuh'), 'utf8');
const kernel = readFileSync(join(kernelsDir(), 'a2av.cu'), 'utf8');
const exchange = readFileSync(join(kernelsDir(), 'exchange.cuh'), 'utf8');

function define(name: string): number {
  const m = new RegExp(`^#define ${name} (\\S+)`, 'm').exec(config);
  assert.ok(m, `#define ${name} in config.cuh`);
  return Number(m[1]);
}

describe('kernel structures mirrored in TypeScript', () => {
  test('constants of config.cuh', () => {
    assert.equal(PAYLOAD_HEADER, define('A2AV_PAYLOAD_HEADER'));
    assert.equal(LANE_HEADER_BYTES, define('A2AV_LANE_HEADER_BYTES'));
    assert.equal(STATUS_RING, define('A2AV_STATUS_RING'));
    assert.equal(REPLAY_CALLS_PER_LANE, STATUS_RING, 'a replayed call past the ring would have no outcome to report');
    assert.equal(MAX_EXPERTS, define('A2AV_MAX_EXPERTS'));
    assert.equal(MAX_EXPERTS_PER_RANK, MAX_EXPERTS);
    assert.equal(X1_HEADER, define('A2AV_X1_HEADER'));
    assert.equal(X2_HEADER, define('A2AV_X2_HEADER'));
    assert.equal(XF_EXTRA, define('A2AV_XF_EXTRA'));
    assert.equal(XF_MAX_MATRIX, define('A2AV_XF_MAX_MATRIX'));
    assert.equal(EVENT_RING, STATUS_RING, 'a handle outlives neither its event nor its status record');
    // x_copy_slices is compiled for at most XS_THREADS threads a block: moe.ts launches that many.
    assert.equal(SLICE_THREADS, Number(/^#define XS_THREADS (\d+)/m.exec(exchange)?.[1]));
    assert.equal(SLICE_INDEX_ENTRIES, Number(/^#define XS_INDEX_ENTRIES (\d+)/m.exec(exchange)?.[1]));
    for (const [name, code] of Object.entries({ NEGATIVE: 'negative', INPUT_OVERFLOW: 'inputOverflow', OUTPUT_OVERFLOW: 'outputOverflow', MISMATCH: 'mismatch', TIMEOUT: 'timeout' })) {
      assert.equal(StatusCode[code as keyof typeof StatusCode], define(`A2AV_ERR_${name}`), `A2AV_ERR_${name}`);
    }
    const fields = { KIND: 'kind', ROW_BYTES: 'rowBytes', OUTPUT: 'output', EXPERTS: 'expertsPerRank', ALIGN: 'majorAlign', COUNT: 'count', DTYPE: 'dtype', OP: 'op', PLAN: 'plan' } as const;
    for (const [name, field] of Object.entries(fields)) assert.equal(MismatchCode[field], define(`A2AV_FIELD_${name}`), `A2AV_FIELD_${name}`);
    assert.equal(Object.keys(fields).length, Object.keys(MismatchCode).length, 'every field a mismatch names has its define');
  });

  test('A2avParams: kernel-params.ts writes every field at the offset a2av.cu asserts', () => {
    const offsets = new Map<string, number>();
    for (const m of kernel.matchAll(/A2AV_LAYOUT_CHECK\(__builtin_offsetof\(A2avParams, (\w+)\) == (\d+)/g)) offsets.set(m[1], Number(m[2]));
    const size = /A2AV_LAYOUT_CHECK\(sizeof\(A2avParams\) == (\d+)/.exec(kernel);
    assert.ok(size && offsets.size >= 15, 'a2av.cu asserts the size and every offset of A2avParams');
    assert.equal(A2AV_PARAMS_BYTES, Number(size[1]));
    const view = new DataView(new ArrayBuffer(A2AV_PARAMS_BYTES));
    const p = {
      input: 0x1111n, inputBytes: 0x2222, outPeers: 0x3333n, outputBytes: 0x4444, inSplits: 0x5555n, outSplitsOffsets: 0x6666n,
      padPeers: 0x7777n, laneOffset: 0x8888, rowBytes: 0x9999, outId: 0xaaaa, timeoutNs: 0xbbbbn, rank: 0xcc, world: 0xdd, pad: 0xeeeen, gridCopy: true, splitByPeer: 2,
    };
    writeA2avParams(view, p);
    const field = (name: string, bytes: 4 | 8): bigint => {
      const at = offsets.get(name);
      assert.ok(at !== undefined, `a2av.cu asserts the offset of ${name}`);
      return bytes === 8 ? view.getBigUint64(at, true) : BigInt(view.getUint32(at, true));
    };
    assert.equal(field('inputBytes', 8), 0x2222n);
    assert.equal(field('outPeers', 8), 0x3333n);
    assert.equal(field('outputBytes', 8), 0x4444n);
    assert.equal(field('inSplits', 8), 0x5555n);
    assert.equal(field('outSplitsOffsets', 8), 0x6666n);
    assert.equal(field('padPeers', 8), 0x7777n);
    assert.equal(field('laneOffset', 8), 0x8888n);
    assert.equal(field('rowBytes', 8), 0x9999n);
    assert.equal(field('outId', 8), 0xaaaan);
    assert.equal(field('timeoutNs', 8), 0xbbbbn);
    assert.equal(field('rank', 4), 0xccn);
    assert.equal(field('world', 4), 0xddn);
    assert.equal(field('pad', 8), 0xeeeen);
    assert.equal(field('gridCopy', 4), 1n);
    assert.equal(field('splitByPeer', 4), 2n);
    writeA2avParams(view, { ...p, splitByPeer: 0 });
    assert.deepEqual([field('gridCopy', 4), field('splitByPeer', 4)], [1n, 0n], 'the two flags at their own offsets');
    assert.equal(view.getBigUint64(0, true), 0x1111n, 'input at 0');
  });

  test('XParams: kernel-params.ts writes the fields exchange.cuh asserts', () => {
    const size = /A2AV_LAYOUT_CHECK\(sizeof\(XParams\) == (\d+)/.exec(exchange);
    assert.ok(size, 'exchange.cuh asserts the size of XParams');
    assert.equal(X_PARAMS_BYTES, Number(size[1]));
    const view = new DataView(new ArrayBuffer(X_PARAMS_BYTES));
    writeXParams(view, {
      input: 1n, outPeers: 2n, splits: 3n, outSplitsOffsets: 4n, padPeers: 5n, pad: 6n, plan: 7n, scratch: 8n, laneOffset: 9,
      rowBytes: 10, outId: 11, inRows: 12, outRows: 13, timeoutNs: 14n, align: 15, kind: 16, experts: 17, rank: 18, world: 19, splitByPeer: 2,
      input2: 20n, outPeers2: 21n, rowBytes2: 22, gatherRows: 23n, sliceSpanLog2: 24, gridBytes: 25, gatherInputRows: 26, callPlan: -1,
      scatterSlots: 27n, scatterDests: 28n, scatterTokens: 29n, scatterTopk: 30, scatterRows: 31,
    });
    const at = new Map<string, number>();
    for (const m of exchange.matchAll(/A2AV_LAYOUT_CHECK\(__builtin_offsetof\(XParams, (\w+)\) == (\d+)/g)) at.set(m[1], Number(m[2]));
    assert.equal(view.getBigUint64(at.get('scratch')!, true), 8n);
    assert.equal(view.getBigUint64(at.get('laneOffset')!, true), 9n);
    assert.equal(view.getBigInt64(at.get('align')!, true), 15n);
    assert.equal(view.getInt32(at.get('kind')!, true), 16);
    assert.equal(view.getInt32(at.get('world')!, true), 19);
    assert.equal(view.getInt32(at.get('splitByPeer')!, true), 2);
    assert.equal(view.getBigUint64(at.get('input2')!, true), 20n);
    assert.equal(view.getBigUint64(at.get('input2')! + 8, true), 21n);
    assert.equal(view.getBigInt64(at.get('input2')! + 16, true), 22n);
    assert.equal(view.getBigUint64(at.get('gatherRows')!, true), 23n);
    assert.equal(view.getInt32(at.get('sliceSpanLog2')!, true), 24);
    assert.equal(view.getBigInt64(at.get('gridBytes')!, true), 25n);
    assert.equal(view.getBigInt64(at.get('gatherInputRows')!, true), 26n);
    assert.equal(view.getBigInt64(at.get('callPlan')!, true), -1n);
    assert.equal(view.getBigUint64(at.get('scatterSlots')!, true), 27n);
    assert.deepEqual([8, 16, 24].map((d) => view.getBigInt64(at.get('scatterSlots')! + d, true)), [28n, 29n, 30n]);
    assert.equal(view.getBigInt64(at.get('scatterRows')!, true), 31n);
  });

  test('pad layout: the headers compiled for the host give the offsets layout.ts computes', (t) => {
    if (nvcc === undefined) return t.skip('nvcc not found: the layout cannot be compiled here (CI has nvcc)');
    const dir = mkdtempSync(join(tmpdir(), 'a2av-layout-'));
    try {
      const worlds = [1, 2, 3, 8, 72, 160];
      writeFileSync(
        join(dir, 'layout.cu'),
        `#include <cstdio>\n#include "config.cuh"\n#include "exchange.cuh"\nint main() {\n` +
          `  for (int W : {${worlds.join(', ')}}) printf("%lld\\n", (long long)((u8*)lane_x1((u8*)0, W, 0, 0) - (u8*)0));\n` +
          `  printf("%zu %zu %zu %zu %zu %zu\\n", __builtin_offsetof(LaneHeader, seq), __builtin_offsetof(LaneHeader, status), sizeof(StatusRecord),\n` +
          `         __builtin_offsetof(StatusArea, refused), __builtin_offsetof(StatusArea, ring), sizeof(StatusArea));\n` +
          `  for (int W : {${worlds.join(', ')}}) printf("%lld %lld %lld %lld\\n", (long long)(lane_end((u8*)0, W) - (u8*)0), 8 * scratch_words(W), 8 * plan_words(W), 8 * xs_index_word(W));\n}\n`,
      );
      execFileSync(nvcc, ['-std=c++17', `-I${kernelsDir()}`, join(dir, 'layout.cu'), '-o', join(dir, 'layout')]);
      const lines = execFileSync(join(dir, 'layout'), { encoding: 'utf8' }).trim().split('\n');
      assert.deepEqual(lines.slice(0, worlds.length).map(Number), worlds.map(moeOffset), 'MoE packets offset per world');
      assert.deepEqual(lines[worlds.length].split(' ').map(Number), [
        LaneHeaderField.seq, LaneHeaderField.status, STATUS_BYTES, StatusAreaField.refused, StatusAreaField.ring, STATUS_AREA_BYTES,
      ]);
      const moe = lines.slice(worlds.length + 1).map((l) => l.split(' ').map(Number));
      assert.deepEqual(moe, worlds.map((W) => [laneEnd(W), scratchBytes(W), planBytes(W), sliceIndexOffset(W)]), 'MoE packets, scratch, plan and slice index per world');
      assert.equal(StatusField.seq * 8, 48, 'StatusRecord.seq is word 6 (asserted in config.cuh)');
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
