// The pipeline's compute as launches of kernels/pipeline.cu: each call writes its kernel's struct
// (kernel-args.ts) and sizes the grid; where the kernels run is a KernelDevice's business (a GPU,
// compute-cuda.ts; the tests also run the same kernels compiled for the host).
import type { Stream } from '../backends/backend.js';
import type {
  BagArgs,
  BasesArgs,
  Clock,
  ColSumArgs,
  Compute,
  DenseArgs,
  FillArgs,
  GemmArgs,
  IdsArgs,
  LossArgs,
  PermuteArgs,
  Ref,
  ReluGradArgs,
  ScanArgs,
  SgdArgs,
} from './compute.js';
import { colSumChunks, gemmChunks } from './compute.js';
import { fillBits } from './synth.js';
import { KERNEL_SPECS, type KernelName } from './kernel-args.js';
import type { RowMajorGemm } from '../cuda/cublas.js';
import { CublasError } from '../errors.js';

/** Device memory for verifyBlas (a CudaDevice). */
export interface DeviceScratch {
  alloc(bytes: number): bigint;
  free(ptr: bigint): void;
  upload(dst: bigint, src: ArrayBufferView): void;
  download(dst: ArrayBufferView, src: bigint): void;
}

/** A library GEMM in place of pl_gemm (cuBLAS on a GPU: compute-cuda.ts). */
export interface DeviceBlas {
  /** What computes the GEMMs, for the report ("cuBLAS 13.1.1 sgemm"). */
  readonly name: string;
  /** c = op(a)·op(b), row-major, no bias or ReLU (pl_gemm_epilogue adds them). */
  sgemm(stream: Stream, g: RowMajorGemm): void;
  close(): void;
}

export interface KernelDevice {
  /** Where present, the GEMMs go to it (with pl_gemm_epilogue for bias and ReLU), not to pl_gemm. */
  readonly blas?: DeviceBlas;
  readonly compute: Stream;
  readonly data: Stream;
  readonly clock: Clock;
  /** Multiprocessors: a grid-stride kernel needs no more than a few blocks each. */
  readonly multiprocessors: number;
  /** Where `spec`'s struct is written before a launch (8-byte fields at 8·i). */
  params(spec: KernelName): DataView;
  /** Launches `kernel` with `spec`'s struct as it is now. */
  launch(spec: KernelName, kernel: string, grid: number, block: number, stream: Stream): void;
  /** The address kernels use for a ref. */
  address(ref: Ref): bigint;
  zero(stream: Stream, address: bigint, bytes: number): void;
  /** 8 bytes the device owns, and their value once the work queued on `stream` has run. */
  readonly scratch: bigint;
  readScratch(stream: Stream): Uint32Array;
  sync(stream: Stream): void;
  close(): void;
}

const THREADS = 256;
/** kernels/pipeline.cu PL_TILE_M, PL_TILE_N: a GEMM block computes a 128 x 128 tile of C. */
const GEMM_TILE_M = 128;
const GEMM_TILE_N = 128;
/** A column sum's block: a thread a column (pl_col_sum, pl_col_sum_chunks). */
const COL_SUM_THREADS = 128;
/** kernels/pipeline.cu PL_LOSS_THREADS: the loss is one block of them (its summation order). */
const LOSS_THREADS = 256;

/** A field's value: a ref or a raw address (ptr), a number or flag (int), an f32 value (float). */
type Value = Ref | bigint | number | boolean | undefined;

export class KernelCompute implements Compute {
  readonly compute: Stream;
  readonly data: Stream;
  readonly clock: Clock;

  constructor(readonly device: KernelDevice) {
    this.compute = device.compute;
    this.data = device.data;
    this.clock = device.clock;
  }

  scanLengths(s: Stream, a: ScanArgs): void {
    const g = a.generate;
    this.#launch('scan', 'pl_scan_lengths', { ...a, ...g, generate: g !== undefined }, a.segments, THREADS, s);
  }
  segmentBases(s: Stream, a: BasesArgs): void {
    this.#launch('bases', 'pl_segment_bases', { ...a }, 1, 32, s);
  }
  genIds(s: Stream, a: IdsArgs): void {
    this.#launch('ids', 'pl_gen_ids', { ...a }, blocks(a.segments * a.segLen), THREADS, s);
  }
  genDense(s: Stream, a: DenseArgs): void {
    this.#launch('dense', 'pl_gen_dense', { ...a }, blocks(a.batchSize * (a.denseIn + 1)), THREADS, s);
  }
  embeddingBag(s: Stream, a: BagArgs): void {
    this.#launch('bag', 'pl_embedding_bag', { ...a }, blocks(a.bags * a.dim), THREADS, s);
  }
  scatterUpdate(s: Stream, a: BagArgs): void {
    this.#launch('bag', 'pl_scatter_update', { ...a }, blocks(a.bags * a.dim), THREADS, s);
  }
  /** What computes the dense layers' GEMMs. */
  get gemmName(): string {
    return this.device.blas?.name ?? 'pl_gemm (kernels/pipeline.cu)';
  }

  gemm(s: Stream, a: GemmArgs): void {
    const blas = this.device.blas;
    if (blas) {
      // Its own summation order (a.partials, the kernel's split of k, does not apply).
      const d = this.device;
      blas.sgemm(s, { ...a, a: d.address(a.a), b: d.address(a.b), c: d.address(a.c) });
      if (a.bias || a.relu) this.#launch('gemm', 'pl_gemm_epilogue', { ...a, partials: undefined, kChunk: a.k }, blocks(a.m * a.n), THREADS, s);
      return;
    }
    const tiles = Math.ceil(a.m / GEMM_TILE_M) * Math.ceil(a.n / GEMM_TILE_N);
    const chunks = a.partials ? gemmChunks(a.k) : { count: 1, size: a.k };
    if (chunks.count === 1) {
      this.#launch('gemm', 'pl_gemm', { ...a, partials: undefined, kChunk: a.k }, tiles, THREADS, s);
      return;
    }
    this.#launch('gemm', 'pl_gemm', { ...a, kChunk: chunks.size }, tiles * chunks.count, THREADS, s);
    this.#launch('gemm', 'pl_gemm_sum', { ...a, kChunk: chunks.size }, blocks(a.m * a.n), THREADS, s);
  }
  colSum(s: Stream, a: ColSumArgs): void {
    const colBlocks = Math.ceil(a.cols / COL_SUM_THREADS);
    const { count, size } = colSumChunks(a.rows);
    if (count === 1) {
      this.#launch('colSum', 'pl_col_sum', { ...a, partials: undefined, chunk: a.rows }, colBlocks, COL_SUM_THREADS, s);
      return;
    }
    // Block b sums chunk b / colBlocks of column block b % colBlocks into partials; then the chunks in order.
    this.#launch('colSum', 'pl_col_sum', { ...a, chunk: size }, colBlocks * count, COL_SUM_THREADS, s);
    this.#launch('colSum', 'pl_col_sum_chunks', { ...a, chunk: size }, colBlocks, COL_SUM_THREADS, s);
  }
  reluGrad(s: Stream, a: ReluGradArgs): void {
    this.#launch('reluGrad', 'pl_relu_grad', { ...a }, blocks(a.rows * a.cols), THREADS, s);
  }
  permute(s: Stream, a: PermuteArgs): void {
    this.#launch('permute', 'pl_permute', { ...a }, blocks(a.slots * a.batchSize * a.dim), THREADS, s);
  }
  loss(s: Stream, a: LossArgs): void {
    this.#launch('loss', 'pl_loss', { ...a }, 1, LOSS_THREADS, s);
  }
  sgd(s: Stream, a: SgdArgs): void {
    this.#launch('sgd', 'pl_sgd', { ...a }, blocks(a.count), THREADS, s);
  }
  fill(s: Stream, a: FillArgs): void {
    this.#launch('fill', 'pl_fill', { ...a, kind: a.kind === 'f32' ? 0 : 1 }, blocks(a.count), THREADS, s);
  }
  zero(s: Stream, at: Ref, bytes: number): void {
    if (bytes > 0) this.device.zero(s, this.device.address(at), bytes);
  }

  /**
   * Where a library computes the GEMMs: its results against pl_gemm's on a small odd shape, every
   * transpose, before any step. A wrong binding would otherwise train on garbage the same way in
   * every arm, and the arms' equal checksums would not show it. Beyond f32 rounding: CublasError.
   */
  verifyBlas(mem: DeviceScratch): void {
    const blas = this.device.blas;
    if (!blas) return;
    const [m, n, k] = [37, 29, 41];
    const s = this.compute;
    // Values in [-1, 1): the fill stream the model's weights come from (synth.ts).
    const a = Float32Array.from({ length: m * k }, (_, i) => fillBits(1, 0, 1, i) * 2 ** -23);
    const b = Float32Array.from({ length: k * n }, (_, i) => fillBits(1, 0, 2, i) * 2 ** -23);
    const [pa, pb, pLib, pOwn] = [a.byteLength, b.byteLength, 4 * m * n, 4 * m * n].map((bytes) => mem.alloc(bytes));
    try {
      mem.upload(pa, a);
      mem.upload(pb, b);
      const [lib, own] = [new Float32Array(m * n), new Float32Array(m * n)];
      for (const transA of [false, true]) {
        for (const transB of [false, true]) {
          const g = { m, n, k, lda: transA ? m : k, ldb: transB ? k : n, ldc: n, transA, transB };
          blas.sgemm(s, { a: pa, b: pb, c: pLib, ...g });
          this.#launch('gemm', 'pl_gemm', { a: pa, b: pb, c: pOwn, ...g, relu: false, kChunk: k }, Math.ceil(m / GEMM_TILE_M) * Math.ceil(n / GEMM_TILE_N), THREADS, s);
          this.device.sync(s);
          mem.download(lib, pLib);
          mem.download(own, pOwn);
          // Terms in [-1, 1], 41 of them: f32 rounding in any order stays far below 1e-3.
          const worst = lib.reduce((w, v, i) => Math.max(w, Math.abs(v - own[i]!)), 0);
          if (!(worst <= 1e-3)) {
            throw new CublasError(`${blas.name} sgemm`, -1, 'WRONG_RESULT', `differs from pl_gemm by ${worst} on ${m}x${n}x${k}, transA ${transA}, transB ${transB}`);
          }
        }
      }
    } finally {
      for (const p of [pa, pb, pLib, pOwn]) mem.free(p);
    }
  }

  checksum(s: Stream, at: Ref, words: number): [number, number] {
    this.device.zero(s, this.device.scratch, 8);
    const grid = Math.min(blocks(words), 8 * this.device.multiprocessors);
    this.#launch('checksum', 'pl_checksum', { words: at, out: this.device.scratch, count: words }, grid, THREADS, s);
    const [a, b] = this.device.readScratch(s);
    return [a, b];
  }

  sync(s: Stream): void {
    this.device.sync(s);
  }

  close(): void {
    this.device.close();
  }

  #launch(spec: KernelName, kernel: string, args: Record<string, Value>, grid: number, block: number, stream: Stream): void {
    if (grid === 0) return;
    const view = this.device.params(spec);
    KERNEL_SPECS[spec].fields.forEach(([name, kind], i) => {
      const v = args[name];
      if (kind === 'ptr') {
        const r = v as Ref | bigint | undefined;
        view.setBigUint64(8 * i, r === undefined ? 0n : typeof r === 'bigint' ? r : this.device.address(r), true);
      } else if (kind === 'float') {
        view.setFloat64(8 * i, v as number, true);
      } else {
        view.setBigInt64(8 * i, BigInt(typeof v === 'boolean' ? Number(v) : ((v as number | undefined) ?? 0)), true);
      }
    });
    this.device.launch(spec, kernel, grid, block, stream);
  }
}

function blocks(work: number): number {
  return Math.ceil(work / THREADS);
}
