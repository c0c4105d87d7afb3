// `a2av bench --op dispatch|combine|roundtrip`: the host reference of the MoE layouts, the sweep on
// cpu ranks (checked against it, the 1-D call beside it), a wrong result named, and the flags.
// The cpu sweeps skip, saying so, while the cpu backend has no MoE calls yet; they run once it does.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { describe, it, type TestContext } from 'node:test';
import { fileURLToPath } from 'node:url';
import { blockRows, combineLayout, dispatchLayout, maxDispatchRows, splitsOffsetsOf } from '../src/bench/moe-layout.js';
import { transposed, type BenchOp } from '../src/bench/ops.js';
import { runBench } from '../src/bench/run.js';
import type { Splits } from '../src/bench/splits.js';
import { formatJson } from '../src/bench/table.js';
import { runRanks } from '../src/world/threads.js';
import type { FaultyMoeArg } from './fixtures/bench-faulty-moe-rank.js';

// W = 2, E = 2: chunks[src][peer·E + e].
const splits: Splits = {
  rows: [[1, 5], [3, 3]],
  rowsPerRank: 6,
  maxRowsReceived: 8,
  experts: 2,
  chunks: [[1, 0, 2, 3], [2, 1, 0, 3]],
};
const at = (src: number, expert: number, rows: number, dstRow: number, srcRow: number) => ({ src, expert, rows, dstRow, srcRow });

describe('MoE layouts on the host', () => {
  it('an expert block takes its rows rounded up to the alignment, and the alignment when empty', () => {
    assert.deepEqual([blockRows(0, 4), blockRows(0, 1), blockRows(5, 4), blockRows(8, 4), blockRows(3, 1)], [4, 1, 8, 8, 3]);
  });

  it('dispatch: expert-major, sources in order within an expert, each block aligned; rows from where each source packed them', () => {
    const { placed, totalRows } = dispatchLayout(splits, 1, 4);
    assert.deepEqual(placed, [at(0, 0, 2, 0, 1), at(1, 0, 0, 2, 3), at(0, 1, 3, 4, 3), at(1, 1, 3, 7, 3)]);
    assert.equal(totalRows, 12);
    assert.deepEqual([...splitsOffsetsOf(placed)], [2n, 0n, 3n, 3n, 0n, 2n, 4n, 7n]);
    assert.equal(dispatchLayout(splits, 0, 4).totalRows, 8);
    assert.equal(dispatchLayout(splits, 1, 1).totalRows, 8);
    assert.equal(maxDispatchRows(splits, 4), 12);
    assert.equal(maxDispatchRows(splits, 1), 8, 'align 1: the rows received');
    assert.equal(maxDispatchRows({ ...splits, chunks: [[0, 0, 1, 1], [0, 0, 1, 1]] }, 16), 32, 'rank 0 receives nothing: two blocks of 16 all the same');
  });

  it('combine: every rank gets its dispatch input back, rank-major, packed', () => {
    const placed = combineLayout(splits, 0);
    assert.deepEqual(placed, [at(0, 0, 1, 0, 0), at(0, 1, 0, 1, 1), at(1, 0, 2, 1, 1), at(1, 1, 3, 3, 3)]);
    assert.deepEqual([...splitsOffsetsOf(placed)], [1n, 0n, 2n, 3n, 0n, 1n, 1n, 3n]);
  });

  it('the way back (the 1-D comparison of a combine): the transposed matrix, every rank getting its rows back', () => {
    const back = transposed(splits);
    assert.deepEqual(back.rows, [[1, 3], [5, 3]]);
    assert.equal(back.maxRowsReceived, 6);
  });
});

const NOT_YET = /not available on the cpu backend yet/;

/** Runs `fn`; skips the test, saying why, while the cpu backend refuses the MoE calls. */
async function unlessNotYet<T>(t: TestContext, fn: () => Promise<T>): Promise<T | undefined> {
  try {
    return await fn();
  } catch (err) {
    const e = err as Error & { code?: string };
    if (e.code !== 'A2AV_USAGE' || !NOT_YET.test(e.message)) throw err;
    t.skip(`the cpu backend has no MoE calls yet (${e.message}): this test runs once they land`);
    return undefined;
  }
}

describe('runBench of the MoE ops on the cpu backend', () => {
  for (const op of ['dispatch', 'combine', 'roundtrip'] as const satisfies BenchOp[]) {
    it(`${op}: checks every size against the host reference, times it, and the 1-D call beside it`, async (t) => {
      const opts = { backend: 'cpu', ranks: 3, minBytes: 8 << 10, maxBytes: 16 << 10, splits: 'zipf', rowBytes: 24, seed: 5, iters: 2, repeats: 2, op, experts: 5, align: 4 } as const;
      const result = await unlessNotYet(t, () => runBench(opts));
      if (!result) return;
      assert.deepEqual([result.op, result.experts, result.align], [op, 5, 4]);
      assert.deepEqual(Object.keys(JSON.parse(formatJson(result))), ['backend', 'ranks', 'op', 'experts', 'align', 'splits', 'seed', 'rowBytes', 'device', 'cores', 'load', 'date', 'repeats', 'iters', 'rows']);
      assert.deepEqual(result.rows.map((r) => r.bytes), [342 * 24, 682 * 24]);
      for (const r of result.rows) {
        for (const v of [r.timeUs, r.refUs, r.oneDUs!, r.vsOneD!]) assert.ok(Number.isFinite(v) && v > 0, JSON.stringify(r));
        assert.ok(r.timeMinUs <= r.timeUs && r.timeUs <= r.timeMaxUs, JSON.stringify(r));
        assert.equal(r.vsOneD, r.oneDUs! / r.timeUs);
        assert.deepEqual(r.checked, ['eager']);
        assert.equal(r.oneDGraphUs, undefined, 'no graph on cpu');
      }
    });
  }

  for (const [corrupt, op, wrong] of [
    ['allToAllV2d', 'dispatch', /^rank 1: eager dispatch gave a wrong result at 4 KiB per rank: output byte 0: row 0 from rank 0 for expert 0, byte 0 of the row, is 0x/],
    ['allToAllV2dOffset', 'combine', /^rank 1: eager combine gave a wrong result at 4 KiB per rank: output byte 0: row 0 back from expert 0 of rank 0, byte 0 of the row, is 0x/],
  ] as const) {
    it(`a wrong ${op} result stops every rank and names the first wrong byte`, async (t) => {
      const arg: FaultyMoeArg = { sizes: [4096], splits: 'uniform', rowBytes: 8, seed: 1, dataKey: 5, iters: 2, repeats: 1, op, experts: 4, align: 2, corrupt };
      const started = Date.now();
      await unlessNotYet(t, () => assert.rejects(
        runRanks({ backend: 'cpu', ranks: 2, timeoutMs: 30_000 }, new URL('./fixtures/bench-faulty-moe-rank.js', import.meta.url), 'faultyMoeSweep', arg),
        (err: Error & { code?: string }) => {
          if (NOT_YET.test(err.message)) throw err;
          assert.equal(err.code, 'A2AV_BENCH_WRONG_RESULT');
          assert.match(err.message.replace(/^rank 1 failed: (rank 1: )?/, 'rank 1: '), wrong);
          return true;
        },
      ));
      assert.ok(Date.now() - started < 10_000, 'rank 0 waited for a timeout instead of stopping');
    });
  }
});

describe('a2av bench MoE flags', () => {
  const cli = fileURLToPath(new URL('../src/cli.js', import.meta.url));
  const bench = (...args: string[]) => spawnSync(process.execPath, [cli, 'bench', '--backend', 'cpu', ...args], { encoding: 'utf8', timeout: 60_000 });

  it('refuses --experts and --align without a MoE op, and sizes beside --rows-per-expert', () => {
    for (const [args, message] of [
      [['--experts', '4'], 'a2av: --op alltoallv does not take --experts (an option of --op dispatch, combine or roundtrip)'],
      [['--op', 'dispatch', '--experts', '257'], "a2av: option '--experts <E>' argument '257' is invalid. expected an integer <= 256 (MAX_EXPERTS_PER_RANK)"],
      [['--op', 'dispatch', '--rows-per-expert', '4', '--max', '1M'], 'a2av: --rows-per-expert sets the size: leave out --max'],
    ] as const) {
      const { status, stderr } = bench(...args);
      assert.equal(status, 1, stderr);
      assert.equal(stderr.trim(), message);
    }
  });

  it('--rows-per-expert: one size, W×E×n rows per rank, n in every chunk', (t) => {
    const { status, stdout, stderr } = bench('--ranks', '2', '--op', 'dispatch', '--experts', '16', '--rows-per-expert', '4', '--row-bytes', '4096', '--repeats', '1', '--json');
    if (status !== 0 && NOT_YET.test(stderr)) return t.skip(`the cpu backend has no MoE calls yet (${stderr.trim()})`);
    assert.equal(status, 0, stderr);
    const result = JSON.parse(stdout);
    assert.deepEqual([result.op, result.experts, result.align, result.rowBytes], ['dispatch', 16, 1, 4096]);
    assert.deepEqual(result.rows.map((r: { bytes: number }) => r.bytes), [2 * 16 * 4 * 4096]);
  });
});
