// The sparse-data-dist pipeline (src/pipeline/): every arm trains to the same bits, equal to a
// single-process host reference (tests/pipeline/reference.ts); the trace has the tracks it should;
// the CLI runs it; kernels/pipeline.cu compiles and its argument structs match kernel-args.ts. The
// cpu cases run everywhere; the GPU cases skip with the reason where there is no GPU (or NCCL).
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, test } from 'node:test';
import { fileURLToPath } from 'node:url';
import type { BackendName } from '../src/backends/backend.js';
import { KERNEL_SPECS } from '../src/pipeline/kernel-args.js';
import { runPipeline } from '../src/pipeline/run.js';
import { shapeOf } from '../src/pipeline/shapes.js';
import { checksumWords, rintInt32 } from '../src/pipeline/synth.js';
import { chromeTrace, pipelineRows } from '../src/index.js';
import { ARMS, type Arm } from '../src/pipeline/train.js';
import type { PipelineResult } from '../src/pipeline/run.js';
import { PHASES } from '../src/pipeline/trace.js';
import { runRanks } from '../src/world/threads.js';
import { COL_SUM_CANARY, type ArmsArg, type ColSumArg, type ColSumResult, type GemmArg, type GemmResult, type MarksHeld, type RankArm, type Survivor, type VictimArg } from './pipeline/programs.js';
import { colSumChunks, gemmChunks } from '../src/pipeline/compute.js';
import { buildEmulator } from './pipeline/emulated-device.js';
import { referenceRun } from './pipeline/reference.js';
import { hostCompiler } from './support/host-kernels.js';
import { assertCompilesForDevice, assertStructsMatch } from './support/kernel-source.js';

const programs = new URL('./pipeline/programs.js', import.meta.url);
const cli = fileURLToPath(new URL('../src/cli.js', import.meta.url));

/** Every arm on `backend`, each rank's results; then: the arms agree, and match the host reference. */
async function armsAgreeWithReference(
  backend: BackendName,
  ranks: number,
  arms: readonly Arm[],
  steps = { warmup: 1, iters: 2 },
  emulator?: string,
  inputDistBlocks?: number,
): Promise<void> {
  const arg: ArmsArg = { shape: 'tiny', arms: [...arms], seed: 7, ...steps, emulator, inputDistBlocks };
  const perRank = await runRanks<ArmsArg, RankArm[]>({ backend, ranks, timeoutMs: 30_000 }, programs, 'arms', arg);
  const ref = referenceRun(shapeOf('tiny'), ranks, arg.seed, arg.warmup + arg.iters);
  for (const [a, arm] of arms.entries()) {
    for (let r = 0; r < ranks; r++) {
      const got = perRank[r][a];
      assert.equal(got.arm, arm);
      assert.deepEqual(got.loss, ref.loss[r], `${backend} ${arm} rank ${r}: loss per step`);
      assert.deepEqual(got.tables, ref.tables[r], `${backend} ${arm} rank ${r}: tables`);
      assert.deepEqual(got.params, ref.params, `${backend} ${arm} rank ${r}: dense parameters`);
    }
  }
}

describe('pipeline on cpu', () => {
  test('W=2: every arm trains to the bits of the host reference (3 steps)', () => armsAgreeWithReference('cpu', 2, ARMS));
  test('W=3 (uneven ownership: 2, 2, 1 features) and W=1: the same', async () => {
    await armsAgreeWithReference('cpu', 3, ['one-lane', 'two-lanes']);
    await armsAgreeWithReference('cpu', 1, ['one-lane']);
  });

  test('a rank that stops mid-pipeline: every survivor ends naming it (its TimeoutError, or the abort that repeats it)', { timeout: 60_000 }, async () => {
    const arg: VictimArg = { shape: 'tiny', arm: 'two-lanes', seed: 3, victim: 1, stopAfter: 4, steps: 50 };
    const seen = await runRanks<VictimArg, Survivor | null>({ backend: 'cpu', ranks: 3, timeoutMs: 1500 }, programs, 'victim', arg);
    assert.equal(seen[1], null);
    for (const r of [0, 2]) {
      const s = seen[r]!;
      // A collective on the other lane may meet the abort first: CommAbortedError carries the timeout.
      assert.ok(s.code === 'A2AV_TIMEOUT' || s.code === 'A2AV_ABORTED', `rank ${r}: ${s.name}: ${s.message}`);
      assert.equal(s.missingRank, 1, `rank ${r}: ${s.message}`);
      assert.match(s.message, /timed out after 1500 ms waiting for rank 1/);
    }
  });

  test('runPipeline: rows agree, and the trace has a compute, data and lane track per arm and rank', async () => {
    const result = await runPipeline({ backend: 'cpu', ranks: 2, shape: 'tiny', arms: [...ARMS], warmup: 2, iters: 3, seed: 3, trace: true });
    assert.ok(result);
    assert.deepEqual(pipelineRows([result]).problems, []);
    assert.deepEqual(result.arms.map((a) => a.arm), [...ARMS]);
    for (const a of result.arms) assert.ok(a.itPerSec > 0 && a.steps.minUs <= a.steps.medianUs && a.steps.medianUs <= a.steps.maxUs, JSON.stringify(a.steps));
    const trace = JSON.parse(JSON.stringify(chromeTrace(result.traces!, result.clock))) as { traceEvents: Array<Record<string, any>> };
    const events = trace.traceEvents;
    const processes = events.filter((e) => e.name === 'process_name').map((e) => e.args.name);
    assert.deepEqual(processes, ARMS.flatMap((arm) => [0, 1].map((r) => `cpu ${arm} · rank ${r}`)));
    for (const [i, arm] of ARMS.entries()) {
      for (const rank of [0, 1]) {
        const pid = i * 1000 + rank;
        const tracks = events.filter((e) => e.pid === pid && e.name === 'thread_name').map((e) => e.args.name);
        assert.deepEqual(tracks, arm === 'one-lane' ? ['compute', 'data', 'lane 0'] : ['compute', 'data', 'lane 0', 'lane 1'], `${arm} rank ${rank}`);
        const spans = events.filter((e) => e.pid === pid && e.ph === 'X');
        assert.equal(spans.length, 3 * PHASES.length, `${arm} rank ${rank}: every phase of every timed step`);
        for (const s of spans) assert.ok(PHASES.includes(s.name) && s.dur >= 0 && Number.isFinite(s.ts) && [1, 2, 3].includes(s.args.step), JSON.stringify(s)); // timed steps, from 1
        const inputLane = arm === 'one-lane' ? 'lane 0' : 'lane 1';
        const tid = events.find((e) => e.pid === pid && e.name === 'thread_name' && e.args.name === inputLane)!.tid;
        assert.ok(spans.some((s) => s.tid === tid && s.name === 'input dist ids'), `${arm}: the input dist is on ${inputLane}`);
      }
    }
  });

  test('a long run holds the marks of its last few steps, not of every step, and hands every one back', async () => {
    for (const keepSpans of [false, true]) {
      const perRank = await runRanks<unknown, MarksHeld>({ backend: 'cpu', ranks: 2 }, programs, 'marksHeld', { iters: 300, keepSpans });
      for (const [rank, r] of perRank.entries()) {
        const what = `rank ${rank}${keepSpans ? ', spans kept' : ''}`;
        // 13 phases a step, two marks each, plus its start: 27 a step, for about 10 steps (and the base).
        assert.ok(r.peak > 27 && r.peak <= 27 * 13 + 2, `${what}: held ${r.peak} marks at most`);
        assert.equal(r.left, 0, `${what}: every mark handed back`);
        assert.equal(r.stepUs.length, 300);
        assert.ok(r.stepUs.every((us) => us > 0) && r.computeUs.every((us, i) => us > 0 && us <= r.stepUs[i] + 1), `${what}: every step timed, its compute within it`);
        assert.ok(r.phaseUs.length === PHASES.length && r.phaseUs.every((us) => us > 0), `${what}: a median for every phase: ${r.phaseUs}`);
        assert.equal(r.spans, keepSpans ? 300 * PHASES.length : 0);
      }
    }
  });

  test('runPipeline: each step\'s figures are one rank\'s, so with one step exposed = step - compute', async () => {
    const result = await runPipeline({ backend: 'cpu', ranks: 2, shape: 'tiny', arms: [...ARMS], warmup: 1, iters: 1, seed: 5, trace: false });
    assert.ok(result);
    for (const a of result.arms) assert.equal(a.exposedUs, a.steps.medianUs - a.computeUs, `${a.arm}: ${JSON.stringify({ step: a.steps.medianUs, compute: a.computeUs, exposed: a.exposedUs })}`);
  });

  test('runPipeline refuses bad options by name, before any step (as the CLI refuses its flags)', async () => {
    const base = { backend: 'cpu' as const, ranks: 1, shape: 'tiny' as const, arms: ['one-lane' as Arm], warmup: 0, iters: 1, seed: 1, trace: false };
    const bad: [Record<string, unknown>, RegExp][] = [
      [{ arms: ['one-lane', 'sideways'] }, /^pipeline: unknown arm 'sideways' \(choose from one-lane, two-lanes, two-lanes-serialized\)$/],
      [{ arms: [] }, /pipeline: arms must name at least one arm/],
      [{ arms: 'one-lane' }, /pipeline: arms must be an array of arm names, got 'one-lane' \(a string\)/],
      [{ arms: ['one-lane', 'one-lane'] }, /pipeline: arm one-lane is named twice/],
      [{ iters: 1.5 }, /pipeline: iters must be an integer >= 1, got 1\.5/],
      [{ iters: '2' }, /pipeline: iters must be an integer >= 1, got '2' \(a string\)/],
      [{ warmup: -1 }, /pipeline: warmup must be an integer >= 0, got -1/],
      [{ seed: 0.5 }, /pipeline: seed must be an integer >= 0, got 0\.5/],
      [{ gemm: 'fast' }, /pipeline: gemm must be 'auto', 'cublas' or 'kernel', got 'fast'/],
      [{ gemm: 'cublas' }, /pipeline: gemm 'cublas' is for cuda and nccl/],
      [{ gemm: 'auto' }, /pipeline: gemm 'auto' is for cuda and nccl .*: leave gemm out, or give 'kernel'$/],
      [{ inputDistBlocks: 4 }, /pipeline: inputDistBlocks is the cuda backend's SM budget .*; cpu has none/],
    ];
    for (const [change, message] of bad) {
      await assert.rejects(runPipeline({ ...base, ...change } as never), (err: Error) => err.name === 'UsageError' && message.test(err.message), JSON.stringify(change));
    }
  });

  test('each row against the same backend\'s one lane and against nccl\'s one lane (TorchRec\'s way)', () => {
    const checksums = { loss: 'aa', tables: 'bb', params: 'cc' };
    const arm = (a: Arm, itPerSec: number) => ({ arm: a, itPerSec, checksums, paramsAgree: true }) as unknown as PipelineResult['arms'][number];
    const results = [
      { backend: 'cuda', ranks: 2, arms: [arm('one-lane', 60), arm('two-lanes', 66)] },
      { backend: 'nccl', ranks: 2, arms: [arm('one-lane', 50), arm('two-lanes', 55)] },
    ] as unknown as PipelineResult[];
    const { rows, problems } = pipelineRows(results);
    assert.deepEqual(problems, []);
    assert.deepEqual(rows.map((r) => [r.backend, r.arm, r.vsOneLane, r.vsNcclOneLane]), [
      ['cuda', 'one-lane', 1, 60 / 50],
      ['cuda', 'two-lanes', 66 / 60, 66 / 50],
      ['nccl', 'one-lane', 1, 1],
      ['nccl', 'two-lanes', 55 / 50, 55 / 50],
    ]);
  });

  test('a2av bench pipeline\'s table on cpu says its timings compare nothing, and what the checksum column is', () => {
    const r = spawnSync(process.execPath, [cli, 'bench', 'pipeline', '--backend', 'cpu', '--ranks', '2', '--shape', 'tiny', '--iters', '1', '--warmup', '1'], { encoding: 'utf8', timeout: 60_000 });
    assert.equal(r.status, 0, r.stderr);
    assert.match(r.stdout, /^# cpu: the ranks share the host's cores .* their timings compare nothing \(vs one-lane included\)$/m);
    assert.match(r.stdout, /^# checksums: every row ended with the same loss, tables and parameters \(.*\); checksum = a digest of the three, one per row$/m);
  });

  test('a2av bench pipeline --backend cpu --json --trace: the table as JSON, and a trace file', () => {
    const dir = mkdtempSync(join(tmpdir(), 'a2av-pipeline-'));
    try {
      const traceFile = join(dir, 'trace.json');
      const r = spawnSync(process.execPath, [cli, 'bench', 'pipeline', '--backend', 'cpu', '--ranks', '2', '--shape', 'tiny', '--iters', '2', '--warmup', '1', '--json', '--trace', traceFile], { encoding: 'utf8', timeout: 60_000 });
      assert.equal(r.status, 0, r.stderr);
      const out = JSON.parse(r.stdout);
      assert.equal(out.checksumsAgree, true);
      assert.deepEqual(out.rows.map((row: { arm: string }) => row.arm), [...ARMS]);
      assert.equal(out.rows[0].vsOneLane, 1);
      assert.equal(out.rows[0].vsNcclOneLane, null, 'no nccl row: nothing to compare with');
      // The table's cpu caveat travels with the figures, as do the host's cores and load.
      assert.ok(out.notes.some((n: string) => /^cpu: .* their timings compare nothing/.test(n)), JSON.stringify(out.notes));
      assert.ok(Number.isInteger(out.cores) && out.cores >= 1 && typeof out.load === 'number', JSON.stringify({ cores: out.cores, load: out.load }));
      const trace = JSON.parse(readFileSync(traceFile, 'utf8'));
      assert.ok(trace.traceEvents.some((e: { ph: string }) => e.ph === 'X'));
      // Off a terminal the progress is lines: the start, then each arm's first step.
      assert.match(r.stderr, new RegExp(`^pipeline on cpu thread: ${ARMS.join(', ')}, 3 steps each$`, 'm'));
      for (const arm of ARMS) assert.match(r.stderr, new RegExp(`^pipeline: ${arm}, step 1 of 3$`, 'm'));
      assert.doesNotMatch(r.stderr, /takes minutes a step/, 'tiny is the cpu shape: no note');
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

describe('pipeline kernels', () => {
  test('every argument struct of kernels/pipeline.cu has the fields kernel-args.ts writes, in order', () => {
    assertStructsMatch('pipeline.cu', KERNEL_SPECS);
  });

  test('kernels/pipeline.cu compiles for the device under nvcc', (t) => {
    assertCompilesForDevice(t, 'pipeline.cu');
  });

  test('the kernels compiled for the host (tests/pipeline/emulate.cpp), on cpu buffers: two steps to the reference bits', async (t) => {
    const compiler = hostCompiler();
    if (compiler === undefined) return t.skip('no host C++ compiler (g++ or clang++)');
    const dir = mkdtempSync(join(tmpdir(), 'a2av-pipeline-emu-'));
    try {
      await armsAgreeWithReference('cpu', 2, ['two-lanes'], { warmup: 1, iters: 1 }, buildEmulator(compiler, dir));
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  test('split k (the weight gradients) and k in one piece: the kernels compiled for the host give the host GEMM\'s bits, near the exact sums', async (t) => {
    const compiler = hostCompiler();
    const dir = mkdtempSync(join(tmpdir(), 'a2av-pipeline-gemm-'));
    try {
      const emulator = compiler === undefined ? undefined : buildEmulator(compiler, dir);
      const cases: Omit<GemmArg, 'emulator' | 'seed'>[] = [
        { m: 70, n: 45, k: 1100, transA: true, relu: false },
        { m: 16, n: 13, k: 8200, transA: true, relu: true },
        { m: 33, n: 70, k: 600, transA: false, relu: true },
        // Against the kernel's 128 x 128 x 16 tiles: partial tiles in m, n and k, tiles smaller than
        // a thread's 8 x 8, several tiles each way, and both layouts of A and of B.
        { m: 130, n: 70, k: 37, transA: false, transB: true, relu: true },
        { m: 130, n: 70, k: 37, transA: true, transB: false, relu: false },
        { m: 5, n: 3, k: 37, transA: true, transB: true, relu: false },
        { m: 5, n: 3, k: 1, transA: false, transB: false, relu: true },
        { m: 257, n: 200, k: 1030, transA: false, transB: true, relu: false },
        { m: 3, n: 129, k: 600, transA: false, transB: false, relu: true },
      ];
      for (const [i, c] of cases.entries()) {
        const { count, size } = gemmChunks(c.k);
        const label = `m ${c.m} n ${c.n} k ${c.k} transA ${c.transA} transB ${c.transB ?? false} (${count} chunks of ${size})`;
        const [r] = await runRanks<GemmArg, GemmResult>({ backend: 'cpu', ranks: 1 }, programs, 'gemm', { ...c, emulator, seed: 1000 + i });
        if (r.kernels) assert.deepEqual(r.kernels, r.host, `${label}: kernels against the host, split k`);
        if (r.kernelsUnsplit) assert.deepEqual(r.kernelsUnsplit, r.unsplit, `${label}: kernels against the host, k in one piece`);
        if (count > 1) assert.ok(r.host.some((v, j) => v !== r.unsplit[j]), `${label}: the split sum differs from one pass somewhere (it is taken)`);
        for (const [what, got] of [['split', r.host], ['unsplit', r.unsplit]] as const) {
          const worst = Math.max(...got.map((v, j) => Math.abs(v - r.exact[j])));
          assert.ok(worst < 1e-3, `${label}: ${what}: ${worst} from the float64 sum`);
        }
      }
      if (compiler === undefined) t.diagnostic('no host C++ compiler (g++ or clang++): the kernels were not run, the host GEMM was');
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  test('column sums (the bias gradients) in chunks of 64 rows: the kernels compiled for the host and the cpu Compute give the plain loops\' bits, and write nothing past out', async (t) => {
    assert.deepEqual([0, 1, 64, 65, 130, 1000, 8192].map((r) => colSumChunks(r)), [1, 1, 1, 2, 3, 16, 128].map((count) => ({ count, size: 64 })));
    const compiler = hostCompiler();
    const dir = mkdtempSync(join(tmpdir(), 'a2av-pipeline-colsum-'));
    try {
      const emulator = compiler === undefined ? undefined : buildEmulator(compiler, dir);
      // Rows off the chunk, on it, under it; columns off the kernel's 128-thread blocks, one and several blocks.
      const cases: Omit<ColSumArg, 'emulator' | 'seed'>[] = [
        { rows: 1000, cols: 200, ld: 203 },
        { rows: 130, cols: 45, ld: 45 },
        { rows: 64, cols: 130, ld: 131 },
        { rows: 1, cols: 3, ld: 7 },
        { rows: 65, cols: 257, ld: 257 },
      ];
      for (const [i, c] of cases.entries()) {
        const label = `rows ${c.rows} cols ${c.cols} ld ${c.ld} (${colSumChunks(c.rows).count} chunks)`;
        const [r] = await runRanks<ColSumArg, ColSumResult>({ backend: 'cpu', ranks: 1 }, programs, 'colSum', { ...c, emulator, seed: 2000 + i });
        // Plain loops: each chunk of 64 rows from zero, then the chunks in order, every add rounded to f32.
        const f = Math.fround;
        const chunked = Array.from({ length: c.cols }, (_, col) => {
          let sum = 0;
          for (let r0 = 0; r0 < c.rows; r0 += 64) {
            let part = 0;
            for (let row = r0; row < Math.min(c.rows, r0 + 64); row++) part = f(part + r.x[row * c.ld + col]);
            sum = f(sum + part);
          }
          return sum;
        });
        assert.deepEqual(r.host, chunked, `${label}: cpu Compute against the plain loops`);
        assert.deepEqual(r.hostCanary, COL_SUM_CANARY, `${label}: cpu Compute: the words past out`);
        if (r.kernels) {
          assert.deepEqual(r.kernels, chunked, `${label}: kernels against the plain loops`);
          assert.deepEqual(r.kernelsCanary, COL_SUM_CANARY, `${label}: kernels: the words past out`);
        }
        const onePass = Array.from({ length: c.cols }, (_, col) => {
          let sum = 0;
          for (let row = 0; row < c.rows; row++) sum = f(sum + r.x[row * c.ld + col]);
          return sum;
        });
        if (c.rows <= 64) assert.deepEqual(chunked, onePass, `${label}: one chunk is one pass`);
        if (c.rows >= 1000) assert.ok(chunked.some((v, j) => v !== onePass[j]), `${label}: the chunked sum differs from one pass somewhere (it is taken)`);
        for (const [col, v] of chunked.entries()) {
          let exact = 0;
          for (let row = 0; row < c.rows; row++) exact += r.x[row * c.ld + col];
          assert.ok(Math.abs(v - exact) < 1e-3, `${label}: column ${col}: ${v} against the float64 sum ${exact}`);
        }
      }
      if (compiler === undefined) t.diagnostic('no host C++ compiler (g++ or clang++): the kernels were not run, the cpu Compute was');
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  test('synth: the fixed-point rounding and the checksum (what the kernels mirror)', () => {
    assert.deepEqual([0.5, 1.5, 2.5, -0.5, -1.5, 2.4999, NaN, 3e9, -3e9].map(rintInt32), [0, 2, 2, 0, -2, 2, 0, 2147483647, -2147483648]);
    // Order-independent: two halves summed separately give the whole.
    const words = Uint32Array.from({ length: 1000 }, (_, i) => (i * 2654435761) >>> 0);
    assert.deepEqual(checksumWords(words.subarray(600), checksumWords(words.subarray(0, 600)), 600), checksumWords(words));
  });
});

/** Why cuBLAS cannot load here, or undefined. */
async function cublasUnavailable(): Promise<string | undefined> {
  const [{ loadLibrary }, { cublasLibrarySpec }] = await Promise.all([import('../src/native/find-library.js'), import('../src/cuda/cublas.js')]);
  try {
    loadLibrary(cublasLibrarySpec());
    return undefined;
  } catch (err) {
    return `no cuBLAS: ${(err as Error).message.split('\n')[0]}`;
  }
}

/** Why `backend` cannot run `ranks` ranks here, or undefined (tests/conformance.test.ts's rule). */
async function gpuUnavailable(backend: 'cuda' | 'nccl', ranks: number): Promise<string | undefined> {
  try {
    const probe = await import('../src/cuda/probe.js');
    const gpus = probe.cudaDeviceCount();
    if (gpus === 0) return `no CUDA GPU: ${(probe.cudaUnavailableReason() ?? 'the driver reports none').split(/;|\n/)[0]}`;
    if (backend === 'nccl') {
      const { ncclUnavailableReason } = await import('../src/nccl/library.js');
      const why = ncclUnavailableReason();
      if (why !== undefined) return `no NCCL: ${why.split(/; searched/)[0]}`;
      if (gpus < ranks) return `nccl needs one GPU per rank: ${ranks} ranks, ${gpus} GPU${gpus > 1 ? 's' : ''}`;
    }
  } catch (err) {
    return `the probe failed: ${(err as Error).message}`;
  }
  return undefined;
}

describe('pipeline on GPUs', () => {
  test('cuda W=2: every arm trains to the bits of the host reference (and so of cpu)', async (t) => {
    const why = await gpuUnavailable('cuda', 2);
    if (why) return t.skip(why);
    await armsAgreeWithReference('cuda', 2, ARMS, { warmup: 2, iters: 3 });
  });

  test('cuda W=2 with the input dist held to one thread block (its SM budget): the same bits', async (t) => {
    const why = await gpuUnavailable('cuda', 2);
    if (why) return t.skip(why);
    await armsAgreeWithReference('cuda', 2, ['two-lanes'], { warmup: 2, iters: 3 }, undefined, 1);
  });

  test('cuda W=2 with cuBLAS GEMMs: the arms agree to the bit, and the loss follows the reference to 1e-3', async (t) => {
    const why = (await gpuUnavailable('cuda', 2)) ?? (await cublasUnavailable());
    if (why) return t.skip(why);
    const arg: ArmsArg = { shape: 'tiny', arms: [...ARMS], seed: 7, warmup: 2, iters: 3, gemm: 'cublas' };
    const perRank = await runRanks<ArmsArg, RankArm[]>({ backend: 'cuda', ranks: 2, timeoutMs: 30_000 }, programs, 'arms', arg);
    const ref = referenceRun(shapeOf('tiny'), 2, arg.seed, arg.warmup + arg.iters);
    for (let r = 0; r < 2; r++) {
      const [first, ...rest] = perRank[r];
      for (const other of rest) {
        assert.deepEqual([other.loss, other.tables, other.params], [first.loss, first.tables, first.params], `rank ${r}: ${other.arm} against ${first.arm}`);
      }
      // Another summation order than the reference's: close, not equal (a wrong GEMM is far off).
      first.loss.forEach((l, i) => assert.ok(Math.abs(l - ref.loss[r][i]) <= 1e-3 * Math.max(1, Math.abs(ref.loss[r][i])), `rank ${r} step ${i}: loss ${l} against ${ref.loss[r][i]}`));
    }
  });

  test('cuda W=2, the DLRM shape with cuBLAS (GEMMs far past the check\'s): every arm ends, to the same bits', { timeout: 300_000 }, async (t) => {
    // cuBLAS loads the kernels of a GEMM shape at its first launch, and the load waits for every
    // kernel on a shared GPU: unless the model's GEMMs ran before the first collective, a rank held
    // there left its peer's collective spinning out its timeout, call after call.
    const why = (await gpuUnavailable('cuda', 2)) ?? (await cublasUnavailable());
    if (why) return t.skip(why);
    const arg: ArmsArg = { shape: 'dlrm', arms: [...ARMS], seed: 3, warmup: 1, iters: 2, gemm: 'cublas' };
    const perRank = await runRanks<ArmsArg, RankArm[]>({ backend: 'cuda', ranks: 2, timeoutMs: 20_000 }, programs, 'arms', arg);
    for (let r = 0; r < 2; r++) {
      const [first, ...rest] = perRank[r];
      assert.ok(first.loss.length === 3 && first.loss.every(Number.isFinite), `rank ${r}: a finite loss every step`);
      for (const other of rest) assert.deepEqual([other.loss, other.tables, other.params], [first.loss, first.tables, first.params], `rank ${r}: ${other.arm} against ${first.arm}`);
    }
  });

  test('nccl W=2 (host-side splits): the same bits', async (t) => {
    const why = await gpuUnavailable('nccl', 2);
    if (why) return t.skip(why);
    await armsAgreeWithReference('nccl', 2, ['one-lane', 'two-lanes'], { warmup: 2, iters: 3 });
  });

  test('cuda W=2: 10,000 steps of the tiny shape on two lanes without a hang', { timeout: 600_000 }, async (t) => {
    const why = await gpuUnavailable('cuda', 2);
    if (why) return t.skip(why);
    const steps = await runRanks<ArmsArg, RankArm[]>({ backend: 'cuda', ranks: 2, timeoutMs: 60_000 }, programs, 'arms', { shape: 'tiny', arms: ['two-lanes'], warmup: 9_995, iters: 5, seed: 1 });
    for (const rank of steps) assert.ok(rank[0].loss.every(Number.isFinite) && rank[0].loss.length === 10_000);
  });
});
