// One base class with a stable `code`; one subclass per failure, with typed fields.

export class A2avError extends Error {
  readonly code: string;
  constructor(code: string, message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.code = code;
    this.name = new.target.name;
  }
}

/** A native library (libcuda, NVRTC, NCCL) could not be found or loaded. */
export class LibraryNotFoundError extends A2avError {
  constructor(readonly library: string, readonly searched: string[], options?: { cause?: unknown }) {
    super('A2AV_LIBRARY_NOT_FOUND', `${library} not found; searched: ${searched.join(', ') || '(nothing)'}`, options);
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
 * A peer did not arrive within the timeout. `missingRank` is the first rank that was waited for, or
 * -1 where that is unknown (a wait on the device as a whole; NCCL, which does not say).
 */
export class TimeoutError extends A2avError {
  constructor(readonly rank: number, readonly missingRank: number, readonly timeoutMs: number, readonly what: string) {
    const whom = missingRank >= 0 ? `rank ${missingRank}` : 'a peer';
    super('A2AV_TIMEOUT', `rank ${rank}: timed out after ${timeoutMs} ms waiting for ${whom} (${what})`);
  }
}

export type SplitsProblem = 'negative' | 'input-overflow' | 'output-overflow' | 'mismatch';

/**
 * Device-side validation of the split matrix failed; nothing was moved.
 * `rank` is the rank whose splits or capacity are at fault, `peer` the peer involved,
 * `needed` / `available` are in rows.
 */
export class SplitsError extends A2avError {
  constructor(
    readonly problem: SplitsProblem,
    readonly rank: number,
    readonly peer: number,
    readonly needed: bigint,
    readonly available: bigint,
    readonly reportedBy: number,
  ) {
    super('A2AV_SPLITS', SplitsError.describe(problem, rank, peer, needed, available, reportedBy));
  }

  private static describe(p: SplitsProblem, rank: number, peer: number, needed: bigint, available: bigint, by: number): string {
    const at = `(reported by rank ${by})`;
    switch (p) {
      case 'negative':
        return `rank ${rank}: negative split ${needed} for peer ${peer} ${at}`;
      case 'input-overflow':
        return `rank ${rank}: splits need ${needed} input rows but the input holds ${available} (peer ${peer}) ${at}`;
      case 'output-overflow':
        return `rank ${rank}: receives ${needed} rows (last from peer ${peer}) but the output holds ${available} ${at}`;
      case 'mismatch':
        return `rank ${rank}: call does not match peer ${peer} (row size or output buffer differ: ${needed} vs ${available}) ${at}`;
    }
  }
}

/** Host-side misuse: wrong sizes, wrong world, freed buffers, bad options. Thrown before anything runs. */
export class UsageError extends A2avError {
  constructor(message: string) {
    super('A2AV_USAGE', message);
  }
}

/** The communicator is unusable after an earlier failure (timeout, aborted peer). */
export class CommAbortedError extends A2avError {
  constructor(readonly rank: number, options?: { cause?: unknown }) {
    super('A2AV_ABORTED', `rank ${rank}: communicator is aborted after an earlier failure`, options);
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
