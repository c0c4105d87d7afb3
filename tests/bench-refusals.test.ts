// Options that cannot mean what they say on the run asked for are refused before anything runs:
// --rows-per-expert beside zipf splits, the cuda-only --input-dist-blocks on cpu, a --trace file
// that cannot be written, and bench allreduce sizes and MoE token counts past the cpu backend's
// largest buffer.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { describe, it } from 'node:test';
import { fileURLToPath } from 'node:url';
import { CPU_MAX_BUFFER_BYTES } from '../src/backends/cpu/buffer.js';
import { formatBytes, formatBytesExact } from '../src/bench/units.js';
import { cudaUnavailableReason } from '../src/cuda/probe.js';

const cli = fileURLToPath(new URL('../src/cli.js', import.meta.url));
const a2av = (...args: string[]) => spawnSync(process.execPath, [cli, ...args], { encoding: 'utf8', timeout: 60_000 });

/** Refused before anything runs: exit status 1, this one line on stderr, nothing on stdout. */
function refused(args: string[], message: string): void {
  const { status, stdout, stderr } = a2av(...args);
  assert.equal(status, 1, `${args.join(' ')}: ${stderr}`);
  assert.equal(stdout, '', args.join(' '));
  assert.equal(stderr.trim(), `a2av: ${message}`, args.join(' '));
}

describe('a2av bench: refusals up front', () => {
  it('--rows-per-expert with zipf splits (n rows in every chunk is uniform)', () => {
    refused(['bench', '--backend', 'cpu', '--op', 'dispatch', '--splits', 'zipf', '--rows-per-expert', '4'],
      '--rows-per-expert gives every (peer, expert) chunk n rows (uniform splits): leave out --splits zipf, or give --min/--max');
  });

  it('bench pipeline: --input-dist-blocks without cuda, and a --trace file that cannot be written', () => {
    refused(['bench', 'pipeline', '--backend', 'cpu', '--input-dist-blocks', '4'],
      "--input-dist-blocks is the cuda backend's SM budget (the input dist's maxBlocks); cpu has none: run it with --backend cuda");
    refused(['bench', 'pipeline', '--backend', 'cpu', '--iters', '1', '--warmup', '0', '--trace', '/nonexistent/t.json'], '/nonexistent/t.json: cannot write (ENOENT on /nonexistent)');
  });

  it('bench pipeline: cuBLAS GEMMs beside the cpu backend (whose rows must match it to the bit)', () => {
    refused(['bench', 'pipeline', '--backend', 'cpu', '--gemm', 'cublas'],
      "--gemm cublas is for cuda and nccl (the cpu backend's GEMMs are host loops, bit-exact with the kernel): leave cpu out of --backend, or leave out --gemm");
  });

  it('a GPU backend where libcuda is not found: the way out said once', { skip: cudaUnavailableReason()?.startsWith('libcuda (the NVIDIA driver) not found') ? false : 'libcuda loads here' }, () => {
    const way = "libcuda (the NVIDIA driver) not found: use the cpu backend (backend 'cpu'; --backend cpu on the command line), or set A2AV_LIBCUDA to the library's path";
    refused(['bench', '--backend', 'cuda', '--max', '1M'], `--backend cuda: no GPU: ${way}`);
    refused(['bench', 'allreduce', '--backend', 'cuda,nccl'], `--backend cuda,nccl: no GPU: ${way}`);
    // cpu among them: not "use the cpu backend", but leave the GPU ones out.
    refused(['bench', '--backend', 'cpu,nccl', '--max', '1M'],
      "--backend cpu,nccl: nccl needs a GPU and none is usable here (libcuda (the NVIDIA driver) not found): run --backend cpu alone, or set A2AV_LIBCUDA to the driver's path");
  });

  it('A2AV_LIBCUDA naming a file that does not load: said, not passed over', { skip: cudaUnavailableReason() === undefined ? 'a GPU is usable here' : false }, () => {
    const env = { ...process.env, A2AV_LIBCUDA: '/etc/passwd' };
    const asked = spawnSync(process.execPath, [cli, 'bench', '--backend', 'cuda', '--max', '512K'], { encoding: 'utf8', timeout: 60_000, env });
    assert.equal(asked.status, 1);
    assert.match(asked.stderr.trim(), /^a2av: --backend cuda: A2AV_LIBCUDA=\/etc\/passwd: it does not load \(.+\)$/);
    // Without --backend the run falls back to cpu, and says why.
    const fallback = spawnSync(process.execPath, [cli, 'bench', '--max', '512K', '--repeats', '1'], { encoding: 'utf8', timeout: 60_000, env });
    assert.equal(fallback.status, 0, fallback.stderr);
    assert.match(fallback.stderr, /^a2av: note: A2AV_LIBCUDA=\/etc\/passwd: it does not load \(.+\); using the cpu backend$/m);
    assert.match(fallback.stdout, /^# a2av bench: cpu,/);
  });

  it('bench --op moe-dispatch: experts that the ranks cannot share, or fewer than topk, before the ranks start', () => {
    refused(['bench', '--op', 'moe-dispatch', '--backend', 'cpu', '--ranks', '3', '--num-experts', '8', '--tokens', '1'], '--num-experts 8 is not a multiple of the 3 ranks');
    refused(['bench', '--op', 'moe-dispatch', '--backend', 'cpu', '--num-experts', '8', '--topk', '9', '--tokens', '1'], '--topk 9 is more than the 8 experts');
  });

  // Node 20 caps a buffer at 4 GiB; Node 22 and later at 2^53 - 1 bytes, past any host's memory.
  const cap = CPU_MAX_BUFFER_BYTES;
  it('bench allreduce: a size whose output passes the cpu backend\'s largest buffer names --max',
    { skip: cap > 2 ** 40 ? `this Node caps a buffer at ${cap} bytes: no size a host holds passes it` : false }, () => {
    const size = 2 ** Math.ceil(Math.log2(cap - 255));
    refused(['bench', 'allreduce', '--backend', 'cpu', '--min', String(size), '--max', String(size)],
      `bench allreduce: ${formatBytes(size)} (the largest size up to --max) on cpu: the output, its sum and a 256-byte canary past it, needs ${formatBytesExact(size + 256)}, ` +
        `past the cpu backend's ${formatBytes(cap)} per buffer: lower --max`);
  });

  // 2^20 tokens of 2^29 bf16 elements from each of 2 ranks, top-8: 2^24 + 128 rows of 1 GiB, past 2^53 bytes.
  it('bench --op moe-dispatch: a largest --tokens whose recvX passes the cpu backend\'s largest buffer names the flags, before any rank allocates', () => {
    const started = performance.now();
    const rows = 2 * 2 ** 20 * 8 + 128;
    refused(['bench', '--op', 'moe-dispatch', '--backend', 'cpu', '--ranks', '2', '--tokens', `1,${2 ** 20}`, '--hidden', String(2 ** 29)],
      `bench moe-dispatch: ${2 ** 20} tokens a rank (the largest of --tokens) on cpu: a rank's recvX holds up to ${rows} rows of 1 GiB (--hidden ${2 ** 29} bf16), ` +
        `${formatBytesExact(rows * 2 ** 30)}, past the cpu backend's ${formatBytes(cap)} per buffer: lower --tokens, --topk or --hidden`);
    refused(['bench', '--op', 'moe-combine', '--backend', 'cpu', '--ranks', '2', '--tokens', String(2 ** 30), '--hidden', String(2 ** 29), '--layout', 'compact'],
      `bench moe-combine: ${2 ** 30} tokens a rank (the largest of --tokens) on cpu: a rank's recvX holds up to ${2 ** 31 + 1} rows of 1 GiB (--hidden ${2 ** 29} bf16), ` +
        `${formatBytesExact((2 ** 31 + 1) * 2 ** 30)}, past the cpu backend's ${formatBytes(cap)} per buffer: lower --tokens or --hidden`);
    assert.ok(performance.now() - started < 10_000, 'refused before the ranks allocated');
  });
});
