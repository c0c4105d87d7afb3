// One base class with a stable `code`; one subclass per failure, with typed fields.
import { freemem } from 'node:os';
import { ALL_REDUCE_KIND, DTYPE_CODE, ExchangeKind, OP_CODE } from './codes.js';
import { OP_OF_KIND } from './collectives/call-names.js';

export class A2avError extends Error {
  readonly code: string;
  constructor(code: string, message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.code = code;
    this.name = new.target.name;
  }
}

/** What a search for a native library tried, for LibraryNotFoundError. */
export interface LibrarySearch {
  /** Human name, e.g. "libcuda (the NVIDIA driver)". */
  library: string;
  /** Every file tried, in order: paths, and bare names left to the loader's own search. */
  searched: string[];
  /** The variable that names the file outright, e.g. A2AV_LIBCUDA. */
  overrideEnv: string;
  /** What works without the library, e.g. "the cpu backend (--backend cpu)"; absent when nothing does. */
  instead?: string;
  /** The path overrideEnv gave, where it was set: then it alone was tried. */
  overridden?: string;
}

/**
 * A native library (libcuda, NVRTC, NCCL) could not be found or loaded. The message's first line is
 * the way out (another backend, or the variable naming the file); every place searched follows,
 * one per line.
 */
export class LibraryNotFoundError extends A2avError {
  readonly library: string;
  readonly searched: string[];
  readonly overrideEnv: string;
  constructor(search: LibrarySearch, options?: { cause?: unknown }) {
    const named = search.overridden === undefined ? `set ${search.overrideEnv} to the library's path` : `correct ${search.overrideEnv}=${search.overridden} (it alone is tried), or unset it to search the usual places`;
    const ways = [search.instead && `use ${search.instead}`, named].filter(Boolean);
    const places = search.searched.map((p) => `  ${p}${p.includes('/') ? '' : " (the loader's search path)"}`);
    super('A2AV_LIBRARY_NOT_FOUND', `${search.library} not found: ${ways.join(', or ')}.\nsearched:\n${places.join('\n') || '  (nothing)'}`, options);
    this.library = search.library;
    this.searched = search.searched;
    this.overrideEnv = search.overrideEnv;
  }
}

/** The kernels/ folder (CUDA sources compiled at run time) is not next to the package. */
export class KernelSourcesNotFoundError extends A2avError {
  constructor(readonly searched: string[]) {
    super('A2AV_KERNELS_NOT_FOUND', `kernels/ (the CUDA sources) not found next to the package; searched:\n${searched.map((p) => `  ${p}`).join('\n')}`);
  }
}

/** A GPU lacks a capability a2av relies on (unified addressing). */
export class UnsupportedDeviceError extends A2avError {
  constructor(readonly device: number, readonly missing: string) {
    super('A2AV_UNSUPPORTED_DEVICE', `GPU ${device} lacks ${missing}, which a2av needs`);
  }
}

/** Two GPUs of one job cannot address each other's memory (no P2P path between them). */
export class PeerAccessError extends A2avError {
  constructor(readonly device: number, readonly peer: number) {
    super('A2AV_NO_PEER_ACCESS', `GPU ${device} cannot access GPU ${peer} (no P2P path); the nccl backend works without one`);
  }
}

/** A rank's worker thread ended (process.exit, a crash) without returning a result or an error. */
export class RankExitedError extends A2avError {
  constructor(readonly rank: number, readonly exitCode: number) {
    super('A2AV_RANK_EXITED', `thread exited with code ${exitCode} before returning`);
  }
}

/** A CUDA driver call returned an error. */
export class CudaError extends A2avError {
  constructor(readonly call: string, readonly status: number, readonly errorName: string, detail: string) {
    super('A2AV_CUDA', `${call} failed: ${errorName} (${status})${detail ? `: ${detail}` : ''}`);
  }
}

/** NVRTC failed; `log` holds the compiler's output. */
export class NvrtcError extends A2avError {
  constructor(readonly call: string, readonly status: number, readonly errorName: string, readonly log = '') {
    super('A2AV_NVRTC', `${call} failed: ${errorName} (${status})${log ? `\n${log}` : ''}`);
  }
}

/** An NCCL call returned an error. */
export class NcclError extends A2avError {
  constructor(readonly call: string, readonly status: number, readonly errorName: string, detail = '') {
    super('A2AV_NCCL', `${call} failed: ${errorName} (${status})${detail ? `: ${detail}` : ''}`);
  }
}

/** A cuBLAS call returned an error (the pipeline's dense layers), or its GEMM disagreed with the pipeline's own. */
export class CublasError extends A2avError {
  constructor(readonly call: string, readonly status: number, readonly errorName: string, detail = '') {
    super('A2AV_CUBLAS', `${call} failed: ${errorName} (${status})${detail ? `: ${detail}` : ''}`);
  }
}

/**
 * A shared-memory system call failed (cpu ranks as processes): `call` (shm_open, mmap, ...), the
 * errno and its name (ENOSPC: /dev/shm is full), and the shared-memory object's name if any.
 */
export class SharedMemoryError extends A2avError {
  constructor(readonly call: string, readonly errno: number, readonly errorName: string, readonly path: string, detail: string) {
    super('A2AV_SHM', `${call}${path ? ` ${path}` : ''} failed: ${errorName}${detail ? ` (${detail})` : ''}`);
  }
}

/**
 * The cpu backend could not get `bytes` of host memory for a buffer (V8 refused the allocation:
 * more than the machine will map). `what` is the call that asked, e.g. "alloc".
 */
export class HostMemoryError extends A2avError {
  constructor(readonly rank: number, readonly bytes: number, readonly what: string, options?: { cause?: unknown }) {
    const free = freemem();
    super('A2AV_HOST_MEMORY', `rank ${rank}: ${what}: could not allocate ${bytes} bytes of host memory (${free} bytes free on this machine)`, options);
  }
}

/** How a peer left for good: it closed its communicator, cleanly or after a failure of its own. */
export type PeerLeft = 'closed' | 'closed after a failure' | 'exited' | 'exited after a failure';

/** Whether a peer that left had failed first: then this rank was the late one, and the peer's own error says why. */
export function leftAfterFailure(how: PeerLeft): boolean {
  return how === 'closed after a failure' || how === 'exited after a failure';
}

/** What a timeout says of a peer that left (its TimeoutError's `what` ends with it). */
export function peerLeftNote(how: PeerLeft): string {
  if (how === 'exited') return 'its process exited without closing its communicator';
  if (how === 'exited after a failure') return 'its process exited with an error status, its communicator open (its own error says why)';
  return how === 'closed' ? 'it has closed its communicator' : 'it has closed its communicator after a failure of its own (its error says which)';
}

/**
 * A peer did not arrive within the timeout. `missingRank` is the first rank that was waited for, or
 * -1 where that is unknown (a wait on the device as a whole; NCCL, which does not say). Where the
 * backend sees that the peer has left (cpu: it closed its communicator without finishing the call),
 * the wait ends then, not at the timeout: `waitedMs` says how long it was (else undefined), and
 * `peerFailed` whether the peer had failed first (its own timeout: then this rank was the late one,
 * and the peer's error names the cause).
 */
export class TimeoutError extends A2avError {
  readonly waitedMs: number | undefined;
  readonly peerFailed: boolean;
  constructor(readonly rank: number, readonly missingRank: number, readonly timeoutMs: number, readonly what: string, left?: { waitedMs: number; peerFailed: boolean }) {
    const whom = missingRank >= 0 ? `rank ${missingRank}` : 'a peer';
    super(
      'A2AV_TIMEOUT',
      left === undefined
        ? `rank ${rank}: timed out after ${timeoutMs} ms waiting for ${whom} (${what})`
        : `rank ${rank}: stopped waiting for ${whom} after ${left.waitedMs} ms (timeout ${timeoutMs} ms): it will make no more calls (${what})`,
    );
    this.waitedMs = left?.waitedMs;
    this.peerFailed = left?.peerFailed ?? false;
  }
}

export type SplitsProblem = 'negative' | 'input-overflow' | 'output-overflow' | 'mismatch';

/**
 * What a mismatch found different between rank 0's call and another rank's, the first in the order
 * compared: the call's kind (allToAllV, allToAllV2d, allToAllV2dOffset on one lane), its row size,
 * its output buffer (symmetric buffer ids), its experts or alignment; an allReduce's count, dtype or op.
 */
export type MismatchField = 'kind' | 'rowBytes' | 'output' | 'expertsPerRank' | 'majorAlign' | 'count' | 'dtype' | 'op' | 'plan';

/** How a mismatch's values read in its message, per field: the codes records and kernels use, by name. */
const byCode = (codes: Record<string, number>, name: (key: string) => string = (key) => key): Record<string, string> =>
  Object.fromEntries(Object.entries(codes).map(([key, code]) => [String(code), name(key)]));
const KIND_OPS = { ...byCode(ExchangeKind, (kind) => OP_OF_KIND[kind as ExchangeKind]), [String(ALL_REDUCE_KIND)]: 'allReduce' };
const DTYPES = byCode(DTYPE_CODE);
const OPS = byCode(OP_CODE);

/**
 * What a mismatch found, as "rank 0 ..., rank `rank` ...": the two calls compared. The rule finds the
 * first rank whose call differs from rank 0's, which is all a kernel sees, so the odd one out may be
 * either (with W = 3, ranks 1 and 2 alike and rank 0 apart, rank 1 is named): neither is blamed.
 */
function mismatchText(field: MismatchField, rank: number, needed: bigint, available: bigint): string {
  const named = (names: Record<string, string>, v: bigint) => names[String(v)] ?? `code ${v}`;
  const both = (zero: string, mine: string) => `${zero} on rank 0, ${mine} on rank ${rank}`;
  switch (field) {
    case 'kind':
      // By the operation alone, as every rank sees both records: the same text on every rank. A
      // plan's exchange or move is its operation's kind; the reporting rank's own call closes the message.
      return `rank 0's call is an ${named(KIND_OPS, available)}, rank ${rank}'s an ${named(KIND_OPS, needed)} (a plan's exchange and moves are its operation's)`;
    case 'output':
      return `output symmetric buffer ${both(String(available), String(needed))}`;
    case 'dtype':
      return `dtype ${both(named(DTYPES, available), named(DTYPES, needed))}`;
    case 'op':
      return `op ${both(named(OPS, available), named(OPS, needed))}`;
    case 'plan': {
      // The record's plan word: 0 a direct call, -1 a plan's exchange, else a move of the plan whose exchange was that lane call.
      const made = (v: bigint) => (v === 0n ? 'a direct call' : v < 0n ? "an exchange plan's exchange" : `a move of the exchange plan made by call ${v} on the lane`);
      return `rank 0 made ${made(available)}, rank ${rank} ${made(needed)}`;
    }
    default:
      return `${field} ${both(String(available), String(needed))}`;
  }
}

/** How a mismatch's message names the reporting rank's call: a plan's exchange and a plan's move by what the program called. */
function callText(op: string, call: string | undefined): string {
  if (call === 'plan.move') return `plan.move of a plan${op[0].toUpperCase()}${op.slice(1)} plan`;
  return call ?? op;
}

const INT64_MAX = 0x7fffffffffffffffn;
/** Where a count passes 2^32: splits written as int32 read as one int64 per pair. */
const INT64_HINT = '; splits are read as int64 (BigInt64Array): int32 splits read two at a time';

/** What SplitsError carries: the problem and where it is. */
export interface SplitsFault {
  problem: SplitsProblem;
  /**
   * The rank whose splits or capacity are at fault. A mismatch: the first rank whose call differs
   * from rank 0's (the odd one out is that rank or rank 0: with W = 3, ranks 1 and 2 alike and rank 0
   * apart, it is 1).
   */
  rank: number;
  /** The peer involved; -1 where none is (the padding of an expert's block). */
  peer: number;
  /** The expert involved (MoE calls); -1 for the 1-D call. */
  expert?: number;
  /** Rows needed (INT64_MAX: the sum overflows int64), or the value that differs (mismatch). */
  needed: bigint;
  /** Rows available, or rank 0's value (mismatch). */
  available: bigint;
  /** The rank whose collective found it (every rank reports the same problem). */
  reportedBy: number;
  /** The operation refused (allToAllV, allToAllV2d, allToAllV2dOffset, allReduce), where known: a mismatch names what it compares. */
  op?: string;
  /**
   * The call the reporting rank made, where it is not `op` itself: `planAllToAllV2d` (and the
   * others' plans) for a plan's exchange, `plan.move` for a move of a plan of `op`.
   */
  call?: string;
  /** A mismatch: the first field found different (needed = rank `rank`'s value, available = rank 0's). */
  field?: MismatchField;
}

/**
 * Device-side validation of the split matrix failed; nothing was moved.
 * `rank` is the rank whose splits or capacity are at fault, `peer` the peer involved, `expert`
 * the expert (MoE calls; -1 otherwise), `needed` / `available` are in rows; `needed` is INT64_MAX
 * when the splits' sum overflows int64 (`overflow`).
 */
export class SplitsError extends A2avError implements SplitsFault {
  readonly problem: SplitsProblem;
  readonly rank: number;
  readonly peer: number;
  readonly expert: number;
  readonly needed: bigint;
  readonly available: bigint;
  readonly reportedBy: number;
  readonly op?: string;
  readonly call?: string;
  readonly field?: MismatchField;

  constructor(f: SplitsFault) {
    super('A2AV_SPLITS', SplitsError.describe({ ...f, expert: f.expert ?? -1, op: f.op ?? '' }));
    this.problem = f.problem;
    this.rank = f.rank;
    this.peer = f.peer;
    this.expert = f.expert ?? -1;
    this.needed = f.needed;
    this.available = f.available;
    this.reportedBy = f.reportedBy;
    if (f.op !== undefined) this.op = f.op;
    if (f.call !== undefined) this.call = f.call;
    if (f.field !== undefined) this.field = f.field;
  }

  /** The splits' sum does not fit int64 (`needed` is then INT64_MAX, not a row count). */
  get overflow(): boolean {
    return this.needed >= INT64_MAX;
  }

  private static describe(f: Required<Omit<SplitsFault, 'field' | 'call'>> & Pick<SplitsFault, 'field' | 'call'>): string {
    const { rank, needed, available } = f;
    const at = `(reported by rank ${f.reportedBy})`;
    const where = (f.peer >= 0 ? `peer ${f.peer}` : 'the padding') + (f.expert >= 0 ? `, expert ${f.expert}` : '');
    switch (f.problem) {
      case 'negative':
        return `rank ${rank}: negative split ${needed} for ${where} ${at}`;
      case 'input-overflow':
        // Counts are refused first when negative, so a negative `needed` is a combine's offset.
        if (needed < 0n) return `rank ${rank}: the chunk for ${where} starts at offset ${needed}, before the input (offsets count rows from its start) ${at}`;
        // A combine's chunk sits at its own offset: what passed is that chunk's end, not a sum of splits.
        if (f.op === 'allToAllV2dOffset') {
          const end = needed >= INT64_MAX ? 'ends past row 2^63-1 (its offset + rows overflow int64)' : `ends at row ${needed} (its offset + rows)`;
          return `rank ${rank}: the chunk for ${where} ${end}, past the input's ${available} rows (every chunk, an empty one too, must lie within the input) ${at}`;
        }
        return needed >= INT64_MAX
          ? `rank ${rank}: splits overflow int64 (their sum passes 2^63-1 rows); the input holds ${available} rows, passed at ${where} ${at}`
          : `rank ${rank}: splits need ${needed} input rows but the input holds ${available} (${where})${needed >= 2n ** 32n ? INT64_HINT : ''} ${at}`;
      case 'output-overflow':
        return needed >= INT64_MAX
          ? `rank ${rank}: rows to receive overflow int64 (their sum passes 2^63-1); the output holds ${available} rows, passed at ${where} ${at}`
          : `rank ${rank}: receives ${needed} row${needed === 1n ? '' : 's'} (passing the output at ${where}) but the output holds ${available} ${at}`;
      case 'mismatch': {
        // The op is the reporting rank's own call: rank `rank` may have made another (a kind mismatch).
        const pair = `rank 0 and rank ${rank} disagree`;
        const first = `(rank ${rank} is the first rank whose call differs from rank 0's; either may be the odd one out)`;
        const by = f.op ? `(reported by rank ${f.reportedBy}, in its ${callText(f.op, f.call)})` : at;
        if (f.field !== undefined) return `${pair}: ${mismatchText(f.field, rank, needed, available)} ${first} ${by}`;
        // No field named (a SplitsError made by hand, a code this build does not know): what is compared.
        const fields = f.op === 'allReduce' ? 'count, element type or output buffer' : 'call kind, row size, output buffer, experts or alignment';
        return `${pair} (${fields} differ: ${available} on rank 0, ${needed} on rank ${rank}) ${first} ${by}`;
      }
    }
  }
}

/** Host-side misuse: wrong sizes, wrong world, freed buffers, bad options. Thrown before anything runs. */
export class UsageError extends A2avError {
  constructor(message: string, options?: { cause?: unknown }) {
    super('A2AV_USAGE', message, options);
  }
}

/** A call on a communicator after its close(). A UsageError (code A2AV_USAGE): the caller's mistake. */
export class ClosedError extends UsageError {
  constructor(readonly rank: number) {
    super(`rank ${rank}: communicator is closed`);
  }
}

/**
 * A value as an argument check's "got X" shows it: what the check expects (a number, or a string of
 * a set) plainly, anything else with its type, so that rowBytes '16' does not read as the number 16.
 */
export function shown(value: unknown, expected: 'number' | 'string' = 'number'): string {
  if (typeof value === 'number' || value === undefined || value === null) return String(value);
  if (typeof value === 'string') return expected === 'string' ? `'${value}'` : `'${value}' (a string)`;
  if (typeof value === 'bigint') return `${value}n (a bigint)`;
  if (typeof value === 'boolean') return `${value} (a boolean)`;
  if (typeof value === 'symbol') return `${value.toString()} (a symbol)`;
  if (typeof value === 'function') return 'a function';
  return Array.isArray(value) ? 'an array' : 'an object';
}

/**
 * A call on a communicator that an earlier failure aborted. The message repeats that failure, and
 * `missingRank` the rank its TimeoutError waited for (-1 when it names none or was not a timeout),
 * so code that meets the abort in a later call, not the timeout itself, still learns who is gone.
 */
export class CommAbortedError extends A2avError {
  readonly missingRank: number;
  constructor(readonly rank: number, options?: { cause?: unknown }) {
    const cause = options?.cause;
    const why = cause instanceof Error ? `: ${cause.message.split('\n')[0]}` : '';
    super('A2AV_ABORTED', `rank ${rank}: communicator is aborted after an earlier failure${why}`, options);
    this.missingRank = cause instanceof TimeoutError ? cause.missingRank : -1;
  }
}

/** Why a rendezvous-store call failed; lets callers tell a slow peer from a dead server. */
export type StoreFailure = 'timeout' | 'disconnected' | 'unreachable' | 'rejected' | 'listen';

/**
 * A rendezvous-store call failed: `op` is the call ('connect', 'set', 'get', 'add', 'barrier',
 * 'serve'), `key` the key involved if any. Never carries the store's token.
 */
export class StoreError extends A2avError {
  constructor(
    readonly op: string,
    readonly key: string | undefined,
    readonly reason: StoreFailure,
    message: string,
    options?: { cause?: unknown },
  ) {
    super('A2AV_STORE', message, options);
  }
}
