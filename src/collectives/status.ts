// The per-lane status record that a collective fills when it refuses to move data or gives up
// waiting. Shared by every backend: the CUDA kernels write the same int64[8] layout into host-mapped
// memory, the CPU backend into a BigInt64Array, and both decode it here so the errors are identical.
//
// Layout (int64 each):
//   [0] code        one of StatusCode; 0 = ok
//   [1] rank        the rank at fault (splits problems) or the rank that waited (timeout)
//   [2] peer        the peer involved (splits problems) or the rank that never arrived (timeout)
//   [3] needed      rows needed (splits problems); the lane sequence number waited for (timeout)
//   [4] available   rows available (splits problems); the flag value last seen (timeout)
//   [5] reportedBy  the rank whose collective wrote the record
//   [6], [7]        reserved, 0
//
// The first error sticks: a record is only written while its code is 0, and it stays until the
// host reads it (clearStatus), so a later successful call cannot hide an earlier failure.
import { A2avError, SplitsError, TimeoutError, type SplitsProblem } from '../errors.js';

export const STATUS_WORDS = 8;
export const STATUS_BYTES = STATUS_WORDS * 8;

export const StatusCode = {
  ok: 0,
  negative: 1,
  inputOverflow: 2,
  outputOverflow: 3,
  mismatch: 4,
  timeout: 5,
} as const;
export type StatusCode = (typeof StatusCode)[keyof typeof StatusCode];

export const StatusField = {
  code: 0,
  rank: 1,
  peer: 2,
  needed: 3,
  available: 4,
  reportedBy: 5,
} as const;

const problems: Record<number, SplitsProblem> = {
  [StatusCode.negative]: 'negative',
  [StatusCode.inputOverflow]: 'input-overflow',
  [StatusCode.outputOverflow]: 'output-overflow',
  [StatusCode.mismatch]: 'mismatch',
};

export interface StatusEntry {
  code: StatusCode;
  rank: number;
  peer: number;
  needed: bigint;
  available: bigint;
  reportedBy: number;
}

/** Writes `entry` unless the record already holds an unread error (first error wins). */
export function recordStatus(record: BigInt64Array, entry: StatusEntry): void {
  if (record[StatusField.code] !== 0n) return;
  record[StatusField.rank] = BigInt(entry.rank);
  record[StatusField.peer] = BigInt(entry.peer);
  record[StatusField.needed] = entry.needed;
  record[StatusField.available] = entry.available;
  record[StatusField.reportedBy] = BigInt(entry.reportedBy);
  record[StatusField.code] = BigInt(entry.code);
}

/** Marks the record read, so the next error can be recorded. */
export function clearStatus(record: BigInt64Array): void {
  record.fill(0n, 0, STATUS_WORDS);
}

/** Decodes a record; undefined for ok. */
export function readStatus(record: BigInt64Array): StatusEntry | undefined {
  const code = Number(record[StatusField.code]) as StatusCode;
  if (code === StatusCode.ok) return undefined;
  return {
    code,
    rank: Number(record[StatusField.rank]),
    peer: Number(record[StatusField.peer]),
    needed: record[StatusField.needed],
    available: record[StatusField.available],
    reportedBy: Number(record[StatusField.reportedBy]),
  };
}

/** The named error a status entry stands for. */
export function entryError(e: StatusEntry, timeoutMs: number, what = 'allToAllV'): Error {
  if (e.code === StatusCode.timeout) {
    return new TimeoutError(e.rank, e.peer, timeoutMs, `${what}: call ${e.needed} on the lane; the peer got no further than call ${e.available}`);
  }
  const problem = problems[e.code];
  if (problem === undefined) {
    return new A2avError('A2AV_STATUS', `${what}: unknown status code ${e.code} reported by rank ${e.reportedBy} (corrupt status record)`);
  }
  return new SplitsError(problem, e.rank, e.peer, e.needed, e.available, e.reportedBy);
}

/** The error a non-zero record stands for, or undefined for ok. */
export function statusError(record: BigInt64Array, timeoutMs: number, what = 'allToAllV'): Error | undefined {
  const entry = readStatus(record);
  return entry === undefined ? undefined : entryError(entry, timeoutMs, what);
}

/** Throws the SplitsError / TimeoutError a non-zero record stands for; returns for ok. */
export function throwIfStatus(record: BigInt64Array, timeoutMs: number, what = 'allToAllV'): void {
  const err = statusError(record, timeoutMs, what);
  if (err !== undefined) throw err;
}

/** Reads the record, clears it if it held an error, and returns that error (what Handle.wait throws). */
export function takeStatus(record: BigInt64Array, timeoutMs: number, what = 'allToAllV'): Error | undefined {
  const err = statusError(record, timeoutMs, what);
  if (err !== undefined) clearStatus(record);
  return err;
}
