// cuBLAS through koffi, for the pipeline's dense layers: one handle per rank, its stream set per
// call, single-precision GEMMs in the default math mode (no TF32: the f32 results the pipeline's
// own kernel gives, up to summation order). Handles, streams and device pointers travel as bigint
// (uint64_t), as in the CUDA bindings; every status is checked (CublasError with cuBLAS's name).
import { CublasError } from '../errors.js';
import { cudaHomeFolders, loadLibrary, systemLibFolders, wheelFolders, type LibrarySpec } from '../native/find-library.js';

/** cublasOperation_t */
export const CublasOp = { n: 0, t: 1 } as const;

const STATUS_NAMES: Record<number, string> = {
  0: 'CUBLAS_STATUS_SUCCESS',
  1: 'CUBLAS_STATUS_NOT_INITIALIZED',
  3: 'CUBLAS_STATUS_ALLOC_FAILED',
  7: 'CUBLAS_STATUS_INVALID_VALUE',
  8: 'CUBLAS_STATUS_ARCH_MISMATCH',
  11: 'CUBLAS_STATUS_MAPPING_ERROR',
  13: 'CUBLAS_STATUS_EXECUTION_FAILED',
  14: 'CUBLAS_STATUS_INTERNAL_ERROR',
  15: 'CUBLAS_STATUS_NOT_SUPPORTED',
  16: 'CUBLAS_STATUS_LICENSE_ERROR',
};

const signatures = {
  cublasCreate_v2: 'int cublasCreate_v2(_Out_ uint64_t *handle)',
  cublasDestroy_v2: 'int cublasDestroy_v2(uint64_t handle)',
  cublasGetVersion_v2: 'int cublasGetVersion_v2(uint64_t handle, _Out_ int *version)',
  cublasSetStream_v2: 'int cublasSetStream_v2(uint64_t handle, uint64_t stream)',
  cublasSgemm_v2:
    'int cublasSgemm_v2(uint64_t handle, int transa, int transb, int m, int n, int k, const float *alpha, uint64_t A, int lda, uint64_t B, int ldb, const float *beta, uint64_t C, int ldc)',
} as const;

type Fn = (...args: any[]) => any;
type Lib = { [K in keyof typeof signatures]: Fn };

/** Where libcublas is looked for, in order (after $A2AV_LIBCUBLAS and the loader's own search). */
export function cublasLibrarySpec(): LibrarySpec {
  return {
    name: 'libcublas (cuBLAS)',
    files: ['libcublas.so.13', 'libcublas.so.12', 'libcublas.so'],
    // pip's nvidia-cublas wheels (the copy PyTorch uses): nvidia/cublas/lib, or nvidia/cu13/lib
    folders: [...cudaHomeFolders(), ...systemLibFolders, ...wheelFolders('cublas', 'cu13')],
    overrideEnv: 'A2AV_LIBCUBLAS',
    instead: "the pipeline's own GEMM kernel (--gemm kernel)",
  };
}

let lib: Lib | undefined;

function cublasLib(): Lib {
  if (lib) return lib;
  const loaded = loadLibrary(cublasLibrarySpec());
  const l = {} as Record<string, Fn>;
  for (const [key, sig] of Object.entries(signatures)) l[key] = loaded.func(sig);
  lib = l as Lib;
  return lib;
}

function check(call: string, status: number): void {
  if (status !== 0) throw new CublasError(call, status, STATUS_NAMES[status] ?? `cublasStatus ${status}`);
}

/** A row-major GEMM's shape: c[m][n] (ldc) = op(a)(m x k) · op(b)(k x n); op(a) = a stored k x m when transA. */
export interface GemmShape {
  m: number;
  n: number;
  k: number;
  lda: number;
  ldb: number;
  ldc: number;
  transA: boolean;
  transB: boolean;
}

/** An f32 GEMM of that shape on device pointers. */
export interface RowMajorGemm extends GemmShape {
  a: bigint;
  b: bigint;
  c: bigint;
}

/** One cuBLAS handle on the current context (the rank's GPU). */
export class Cublas {
  readonly handle: bigint;
  /** e.g. 130101 for 13.1.1 (cublasGetVersion). */
  readonly version: number;
  // Host-side alpha and beta (cuBLAS's default pointer mode), as `const float *`.
  readonly #one = new Float32Array([1]);
  readonly #zero = new Float32Array([0]);
  #destroyed = false;

  constructor() {
    const l = cublasLib();
    const out = new BigUint64Array(1);
    check('cublasCreate_v2', l.cublasCreate_v2(out));
    this.handle = out[0];
    const v = new Int32Array(1);
    check('cublasGetVersion_v2', l.cublasGetVersion_v2(this.handle, v));
    this.version = v[0];
  }

  /** "cuBLAS 13.1.1" */
  get name(): string {
    const v = this.version;
    return `cuBLAS ${Math.floor(v / 10000)}.${Math.floor((v % 10000) / 100)}.${v % 100}`;
  }

  /**
   * c = op(a)·op(b) on `stream`, row-major. cuBLAS is column-major, and a row-major matrix read
   * column-major is its transpose: c^T = op(b)^T · op(a)^T, so b goes first and m, n swap.
   */
  sgemm(stream: bigint, g: RowMajorGemm): void {
    const l = cublasLib();
    check('cublasSetStream_v2', l.cublasSetStream_v2(this.handle, stream));
    check(
      'cublasSgemm_v2',
      l.cublasSgemm_v2(this.handle, g.transB ? CublasOp.t : CublasOp.n, g.transA ? CublasOp.t : CublasOp.n, g.n, g.m, g.k, this.#one, g.b, g.ldb, g.a, g.lda, this.#zero, g.c, g.ldc),
    );
  }

  destroy(): void {
    if (this.#destroyed) return;
    this.#destroyed = true;
    check('cublasDestroy_v2', cublasLib().cublasDestroy_v2(this.handle));
  }
}
