// The cpu backend's largest buffer (Node's typed-array limit): allocations past it are a UsageError
// naming it, and the bench's sweep lowers --max to sizes whose buffers stay within it.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { describe, it } from 'node:test';
import { fileURLToPath } from 'node:url';
import { allocateShared, CPU_MAX_BUFFER_BYTES } from '../src/backends/cpu/buffer.js';
import { HostMemoryError } from '../src/errors.js';
import { fitSweep } from '../src/bench/fit.js';
import type { OpShape } from '../src/bench/ops.js';
import { makeSplits } from '../src/bench/splits.js';
import { doublingSizes, formatBytes } from '../src/bench/units.js';
import { runRanks } from '../src/world/threads.js';

const GiB = 2 ** 30;
const cli = fileURLToPath(new URL('../src/cli.js', import.meta.url));
// Node 20 caps typed arrays at 4 GiB; later Nodes at 2^53 - 1 bytes, which memory reaches first.
const unreachable = CPU_MAX_BUFFER_BYTES > 2 ** 40 && `this Node's typed arrays reach ${CPU_MAX_BUFFER_BYTES} bytes: memory runs out first`;
// 1 PiB: past the 2^47 bytes a process can map, so no host makes it.
const PiB = 2 ** 50;

describe('cpu buffers past the limit', () => {
  it('alloc and allocSymmetric refuse them with a UsageError naming the rank and the limit, on every rank', { timeout: 30_000, skip: unreachable }, async () => {
    const seen = await runRanks<number, string[]>({ backend: 'cpu', ranks: 2, timeoutMs: 10_000 }, new URL('./fixtures/cpu-alloc-limit.js', import.meta.url),
      'allocBoth', CPU_MAX_BUFFER_BYTES + 4);
    // Named by rank, as every other refusal is: ranks as processes print to one terminal.
    for (const [rank, outcomes] of seen.entries()) {
      for (const outcome of outcomes!) assert.equal(outcome, `UsageError: rank ${rank}: a cpu buffer holds at most ${CPU_MAX_BUFFER_BYTES} bytes (Node's typed-array limit), asked for ${CPU_MAX_BUFFER_BYTES + 4}`);
    }
  });

  it('memory the host cannot make is a HostMemoryError naming the rank, the call and the size, not a bare RangeError', () => {
    assert.throws(() => allocateShared(3, PiB, 'alloc'), (err: unknown) => {
      assert.ok(err instanceof HostMemoryError && err.cause instanceof RangeError, String(err));
      assert.equal(err.code, 'A2AV_HOST_MEMORY');
      assert.deepEqual([err.rank, err.bytes, err.what], [3, PiB, 'alloc']);
      assert.match(err.message, new RegExp(`^rank 3: alloc: could not allocate ${PiB} bytes of host memory \\(\\d+ bytes free on this machine\\)$`));
      return true;
    });
  });

  it('alloc and allocSymmetric of 1 PiB under the limit: a HostMemoryError on every rank', { timeout: 30_000, skip: !unreachable && `this Node refuses ${PiB} bytes by its typed-array limit first` }, async () => {
    const seen = await runRanks<number, string[]>({ backend: 'cpu', ranks: 2, timeoutMs: 10_000 }, new URL('./fixtures/cpu-alloc-limit.js', import.meta.url), 'allocBoth', PiB);
    for (const [rank, outcomes] of seen.entries()) {
      assert.equal(outcomes!.length, 2);
      assert.match(outcomes![0]!, new RegExp(`^HostMemoryError: rank ${rank}: alloc: could not allocate ${PiB} bytes`));
      assert.match(outcomes![1]!, new RegExp(`^HostMemoryError: rank ${rank}: allocSymmetric #0: could not allocate ${PiB} bytes`));
    }
  });

  it('the sweep keeps the largest sizes whose buffers fit one, and says why the next does not', () => {
    const shape: OpShape = { op: 'alltoallv', experts: 1, align: 1, rowBytes: 1024 };
    const sizes = doublingSizes(GiB, 2 ** 40);
    const all = sizes.map((bytesPerRank) => makeSplits({ kind: 'uniform', worldSize: 2, bytesPerRank, rowBytes: 1024, seed: 1, experts: 1 }));
    const limits = { free: 2 ** 50, maxBuffer: 4 * GiB, perDevice: 2, deviceName: 'cpu thread', backend: 'cpu' };
    const fit = fitSweep(all, sizes, shape, 'copy', limits);
    // 4 GiB of input needs 4 GiB plus the canary for its output: past the limit.
    assert.equal(fit.plans.length, 2);
    assert.ok(Math.max(fit.memory.inputBytes, fit.memory.midBytes) <= limits.maxBuffer);
    assert.equal(fit.dropped, "4 GiB per rank needs a buffer of 4 GiB + 64 bytes, past the cpu backend's 4 GiB per buffer");
    assert.throws(() => fitSweep(all.slice(2), sizes.slice(2), shape, 'copy', limits),
      { name: 'UsageError', message: "4 GiB per rank needs a buffer of 4 GiB + 64 bytes, past the cpu backend's 4 GiB per buffer" });
    // Memory short of the limit still lowers for memory, and says so.
    const short = fitSweep(all, sizes, shape, 'copy', { ...limits, free: 8 * GiB });
    assert.equal(short.plans.length, 1);
    assert.match(short.dropped!, /^2 GiB per rank needs .* on cpu thread, 8 GiB is free \(2 ranks share it\)$/);
  });

  it('bench --min 4G --max 4G on cpu: one line naming the limit, no raw RangeError', { timeout: 30_000, skip: unreachable }, () => {
    const size = formatBytes(CPU_MAX_BUFFER_BYTES).replace(' ', '');
    const run = spawnSync(process.execPath, [cli, 'bench', '--backend', 'cpu', '--ranks', '1', '--min', size, '--max', size], { encoding: 'utf8' });
    assert.equal(run.status, 1, run.stderr);
    assert.match(run.stderr.trim(), new RegExp(`^a2av: rank 0 failed: ${formatBytes(CPU_MAX_BUFFER_BYTES)} per rank needs a buffer of .*, past the cpu backend's ${formatBytes(CPU_MAX_BUFFER_BYTES)} per buffer$`));
  });
});
