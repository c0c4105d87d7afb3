// NCCL through koffi. Communicators, streams and device pointers travel as bigint (uint64_t), like the
// CUDA bindings: ABI-identical to the pointers on every 64-bit target. Every call goes through
// check(), which throws NcclError with NCCL's error name, its explanation and its last error message.
import { join } from 'node:path';
import koffi from 'koffi';
import { NcclError } from '../errors.js';
import { cudaHomeFolders, loadLibrary, systemLibFolders, wheelFolders, type LibrarySpec } from '../native/find-library.js';

/** ncclResult_t */
export const NcclResult = {
  success: 0,
  unhandledCudaError: 1,
  systemError: 2,
  internalError: 3,
  invalidArgument: 4,
  invalidUsage: 5,
  remoteError: 6,
  inProgress: 7,
} as const;

const RESULT_NAMES = [
  'ncclSuccess',
  'ncclUnhandledCudaError',
  'ncclSystemError',
  'ncclInternalError',
  'ncclInvalidArgument',
  'ncclInvalidUsage',
  'ncclRemoteError',
  'ncclInProgress',
];

/** ncclDataType_t (the values a2av uses). bfloat16 since NCCL 2.10 (BF16_MIN_VERSION). */
export const NcclType = { int8: 0, uint8: 1, int32: 2, uint32: 3, int64: 4, uint64: 5, float32: 7, float64: 8, bfloat16: 9 } as const;
export type NcclType = (typeof NcclType)[keyof typeof NcclType];

/** NCCL_VERSION_CODE of the first NCCL with ncclBfloat16 (2.10.3). */
export const BF16_MIN_VERSION = 21003;

/** ncclRedOp_t */
export const NcclOp = { sum: 0, prod: 1, max: 2, min: 3 } as const;
export type NcclOp = (typeof NcclOp)[keyof typeof NcclOp];

export const UNIQUE_ID_BYTES = 128;

/** ncclUniqueId: 128 opaque bytes, passed BY VALUE to ncclCommInitRankConfig. */
const UniqueId = koffi.struct({ internal: koffi.array('uint8_t', UNIQUE_ID_BYTES) });

const signatures = {
  ncclGetVersion: 'int ncclGetVersion(_Out_ int *version)',
  ncclGetUniqueId: 'int ncclGetUniqueId(_Out_ uint8_t *id)',
  ncclGetErrorString: 'const char *ncclGetErrorString(int result)',
  ncclGetLastError: 'const char *ncclGetLastError(uint64_t comm)',
  ncclCommGetAsyncError: 'int ncclCommGetAsyncError(uint64_t comm, _Out_ int *result)',
  ncclCommFinalize: 'int ncclCommFinalize(uint64_t comm)',
  ncclCommDestroy: 'int ncclCommDestroy(uint64_t comm)',
  ncclCommAbort: 'int ncclCommAbort(uint64_t comm)',
  ncclGroupStart: 'int ncclGroupStart()',
  ncclGroupEnd: 'int ncclGroupEnd()',
  ncclSend: 'int ncclSend(uint64_t buf, size_t count, int type, int peer, uint64_t comm, uint64_t stream)',
  ncclRecv: 'int ncclRecv(uint64_t buf, size_t count, int type, int peer, uint64_t comm, uint64_t stream)',
  ncclAllGather: 'int ncclAllGather(uint64_t send, uint64_t recv, size_t count, int type, uint64_t comm, uint64_t stream)',
  ncclAllReduce: 'int ncclAllReduce(uint64_t send, uint64_t recv, size_t count, int type, int op, uint64_t comm, uint64_t stream)',
} as const;

type Fn = (...args: any[]) => any;
export type Nccl = { [K in keyof typeof signatures]: Fn } & {
  /** (comm out, nranks, id by value, rank, config pointer) */
  ncclCommInitRankConfig: Fn;
  /** Present only where the loaded library exports it (NCCL >= 2.28). */
  ncclAlltoAll: Fn | undefined;
  /** e.g. 22805 for 2.28.5 */
  version: number;
};

/** Where libnccl is looked for, in order (after $A2AV_LIBNCCL and the loader's own search). */
export function ncclLibrarySpec(env: NodeJS.ProcessEnv = process.env): LibrarySpec {
  const homes = [env.NCCL_HOME, env.NCCL_ROOT, env.CONDA_PREFIX].filter((h): h is string => !!h);
  return {
    name: 'libnccl (NCCL)',
    files: ['libnccl.so.2', 'libnccl.so'],
    folders: [
      ...homes.flatMap((h) => [join(h, 'lib'), join(h, 'lib64')]),
      ...systemLibFolders,
      ...cudaHomeFolders(),
      // pip's nvidia-nccl-cu12 / -cu13 wheels (the copy PyTorch uses)
      ...wheelFolders('nccl'),
    ],
    overrideEnv: 'A2AV_LIBNCCL',
    instead: 'the cuda or cpu backend (--backend cuda, --backend cpu)',
  };
}

let nccl: Nccl | undefined;

/** NCCL, loaded once per thread. Throws LibraryNotFoundError listing every place searched. */
export function ncclLib(): Nccl {
  if (nccl) return nccl;
  const lib = loadLibrary(ncclLibrarySpec());
  const n = {} as Record<string, unknown>;
  for (const [key, sig] of Object.entries(signatures)) n[key] = lib.func(sig);
  // Since NCCL 2.14; on older libraries koffi's "cannot find function" names the missing symbol.
  n.ncclCommInitRankConfig = lib.func('ncclCommInitRankConfig', 'int', [koffi.out(koffi.pointer('uint64_t')), 'int', UniqueId, 'int', 'void *']);
  n.ncclAlltoAll = optional(() =>
    lib.func('int ncclAlltoAll(uint64_t send, uint64_t recv, size_t count, int type, uint64_t comm, uint64_t stream)'),
  );
  const version = new Int32Array(1);
  const loaded = n as unknown as Nccl;
  loaded.version = 0;
  nccl = loaded;
  check('ncclGetVersion', loaded.ncclGetVersion(version));
  loaded.version = version[0];
  return loaded;
}

/** undefined when the symbol is missing (koffi throws on lookup). */
function optional(bind: () => Fn): Fn | undefined {
  try {
    return bind();
  } catch {
    return undefined;
  }
}

/** `22805` → `2.28.5` (NCCL_VERSION_CODE: major*10000 + minor*100 + patch since 2.9). */
export function formatNcclVersion(code: number): string {
  const major = Math.floor(code / 10000);
  const minor = Math.floor((code % 10000) / 100);
  return `${major}.${minor}.${code % 100}`;
}

export function resultName(status: number): string {
  return RESULT_NAMES[status] ?? `ncclResult ${status}`;
}

/** Throws NcclError unless `status` is ncclSuccess; `comm` picks whose last error message is attached. */
export function check(call: string, status: number, comm = 0n): void {
  if (status === NcclResult.success) return;
  throw ncclError(call, status, comm);
}

export function ncclError(call: string, status: number, comm = 0n): NcclError {
  const parts: string[] = [];
  const n = nccl;
  if (n) {
    const text = n.ncclGetErrorString(status) as string | null;
    if (text) parts.push(text);
    // NCCL keeps the last WARN of the communicator (or of the thread, for comm 0): the actual cause.
    const last = n.ncclGetLastError(comm) as string | null;
    if (last) parts.push(last.trim());
  }
  return new NcclError(call, status, resultName(status), parts.join(': '));
}

/** Why NCCL cannot be used here (first line of the loader's error), or undefined when it loads. */
export function ncclUnavailableReason(): string | undefined {
  try {
    ncclLib();
    return undefined;
  } catch (err) {
    return (err as Error).message.split('\n')[0];
  }
}
