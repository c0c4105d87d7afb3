// The few libc calls behind CPU ranks that are processes: POSIX shared memory (shm_open, mmap) and
// futex waits on it. Every call goes through a check that reads errno at once and throws
// SharedMemoryError with the errno's name. Linux only (the CPU backend's processes share /dev/shm).
import { getSystemErrorMap } from 'node:util';
import koffi from 'koffi';
import { SharedMemoryError } from '../errors.js';
import { SHM_DIR } from '../world/shm-files.js';
import { loadLibrary } from './find-library.js';

const signatures = {
  shm_open: 'int shm_open(const char *name, int oflag, uint32_t mode)',
  shm_unlink: 'int shm_unlink(const char *name)',
  ftruncate: 'int ftruncate(int fd, int64_t length)',
  posix_fallocate: 'int posix_fallocate(int fd, int64_t offset, int64_t length)',
  mmap: 'void *mmap(void *addr, size_t length, int prot, int flags, int fd, int64_t offset)',
  munmap: 'int munmap(void *addr, size_t length)',
  close: 'int close(int fd)',
  // syscall(2) is variadic; with integer and pointer arguments only, the fixed prototype passes them
  // the same way on Linux x86-64 and arm64 and saves koffi parsing types on every call.
  futex: 'long syscall(long nr, intptr_t addr, int op, int val, const a2av_timespec *timeout, intptr_t addr2, int val3)',
} as const;

type Fn = (...args: any[]) => any;
type Libc = { [K in keyof typeof signatures]: Fn };

const O_RDWR = 0o2;
const O_CREAT = 0o100;
const O_EXCL = 0o200;
const O_CLOEXEC = 0o2000000;
const PROT_READ = 1;
const PROT_WRITE = 2;
const MAP_SHARED = 1;
/** Fault the pages in now, at set-up, rather than on first touch inside a timed call. */
const MAP_POPULATE = 0x8000;
const MAP_FAILED = 0xffffffffffffffffn;
/** Not FUTEX_PRIVATE: the word is shared between processes. */
const FUTEX_WAIT = 0;
const FUTEX_WAKE = 1;
const SYS_FUTEX: Partial<Record<string, number>> = { x64: 202, arm64: 98 };
const EAGAIN = 11;
const EINTR = 4;
const ETIMEDOUT = 110;
const ENOSPC = 28;
const ENOENT = 2;

let libc: Libc | undefined;

function lib(): Libc {
  if (libc) return libc;
  if (process.platform !== 'linux') throw new SharedMemoryError('load', 0, 'ENOTSUP', '', `cpu ranks as processes need Linux (POSIX shared memory under /dev/shm), not ${process.platform}`);
  // Named for koffi's global type registry; prefixed so another binding's 'timespec' cannot clash.
  koffi.struct('a2av_timespec', { tv_sec: 'int64_t', tv_nsec: 'int64_t' });
  const c = loadLibrary({ name: 'libc', files: ['libc.so.6'], folders: [], overrideEnv: 'A2AV_LIBC' });
  const l = {} as Libc;
  for (const [key, sig] of Object.entries(signatures)) (l as Record<string, Fn>)[key] = c.func(sig) as Fn;
  libc = l;
  return l;
}

/** Throws SharedMemoryError for a call that returned -1, with errno read before anything else runs. */
function check<T extends number | bigint>(call: string, path: string, result: T, failed: T = -1 as T): T {
  if (result === failed) fail(call, path, koffi.errno());
  return result;
}

function fail(call: string, path: string, errno: number): never {
  const [name, text] = getSystemErrorMap().get(-errno) ?? [`errno ${errno}`, 'unknown error'];
  const hint = errno === ENOSPC ? ` — ${SHM_DIR} cannot hold it; in a container, raise --shm-size` : '';
  throw new SharedMemoryError(call, errno, name, path, text + hint);
}

/** A mapping of a shared-memory object: its address and an ArrayBuffer over it (no copy). */
export interface Mapping {
  readonly address: bigint;
  readonly bytes: number;
  readonly buffer: ArrayBuffer;
}

/**
 * Creates the shared-memory object `name` (exclusively, owner read/write only), reserves `bytes`
 * of /dev/shm for it (so a full /dev/shm fails here with ENOSPC, not later with SIGBUS on first
 * touch) and maps it. On failure nothing is left behind.
 */
export function createShared(name: string, bytes: number): Mapping {
  const c = lib();
  const fd = check('shm_open', name, c.shm_open(name, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0o600) as number);
  try {
    check('ftruncate', name, c.ftruncate(fd, bytes) as number);
    const err = c.posix_fallocate(fd, 0, bytes) as number; // returns the error number itself
    if (err !== 0) fail('posix_fallocate', name, err);
    return map(c, fd, name, bytes);
  } catch (err) {
    c.shm_unlink(name);
    throw err;
  } finally {
    c.close(fd);
  }
}

/** Maps the existing shared-memory object `name` (a peer's), `bytes` long. */
export function openShared(name: string, bytes: number): Mapping {
  const c = lib();
  const fd = check('shm_open', name, c.shm_open(name, O_RDWR | O_CLOEXEC, 0) as number);
  try {
    return map(c, fd, name, bytes);
  } finally {
    c.close(fd);
  }
}

function map(c: Libc, fd: number, name: string, bytes: number): Mapping {
  const address = check('mmap', name, BigInt(c.mmap(null, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0)), MAP_FAILED);
  return { address, bytes, buffer: koffi.view(address, bytes) };
}

/** Unmaps a mapping; every view of its buffer must be dropped first (touching one would crash). */
export function unmap(m: Mapping): void {
  check('munmap', '', lib().munmap(m.address, m.bytes) as number);
}

/** Removes the name; the memory lives on while any process has it mapped. ENOENT is not an error. */
export function unlinkShared(name: string): void {
  const c = lib();
  if (c.shm_unlink(name) === -1) {
    const errno = koffi.errno();
    if (errno !== ENOENT) fail('shm_unlink', name, errno);
  }
}

/** True when futex waits are available here (else callers poll). */
export function hasFutex(): boolean {
  return SYS_FUTEX[process.arch] !== undefined;
}

/**
 * Sleeps while the int32 at `address` holds `value`, at most `timeoutMs`; a futexWake on the same
 * word by any process ends it early. Returns at once when the word already differs.
 */
export function futexWait(address: number, value: number, timeoutMs: number): void {
  const ms = Math.max(0, timeoutMs);
  const timeout = { tv_sec: Math.floor(ms / 1000), tv_nsec: Math.floor((ms % 1000) * 1e6) };
  const r = Number(lib().futex(SYS_FUTEX[process.arch]!, address, FUTEX_WAIT, value, timeout, 0, 0));
  if (r === -1) {
    const errno = koffi.errno();
    if (errno !== EAGAIN && errno !== EINTR && errno !== ETIMEDOUT) fail('futex wait', '', errno);
  }
}

/** Wakes every process sleeping in futexWait on the int32 at `address`. */
export function futexWake(address: number): void {
  check('futex wake', '', Number(lib().futex(SYS_FUTEX[process.arch]!, address, FUTEX_WAKE, 0x7fffffff, null, 0, 0)));
}
