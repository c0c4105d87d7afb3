// The status record of one call: why a collective refused to move data or gave up waiting. Shared
// by every backend: the CUDA kernels write the int64[8] layout below into the lane's ring of call
// records (kernels/config.cuh), the cpu and nccl backends build the same entry on the host, and all
// decode it here so the errors are identical.
//
// Layout (int64 each):
//   [0] code        one of StatusCode; 0 = ok
//   [1] rank        the rank at fault (splits problems) or the rank that waited (timeout)
//   [2] peer        the peer involved (splits problems) or the rank that never arrived (timeout)
//   [3] needed      rows needed (splits problems; INT64_MAX: the sum overflows int64); the lane
//                   sequence number waited for (timeout)
//   [4] available   rows available (splits problems); the flag value last seen (timeout)
//   [5] reportedBy  the rank whose collective wrote the record
//   [6] seq         the call's sequence number on its lane (1, 2, ...): whose record this is
//   [7] expert      the expert involved (MoE calls), else -1; for a timeout, which wait ran out
//                   (WaitSite); for a mismatch, which field differs (MismatchCode)
import { planCallOf } from './call-names.js';
import { A2avError, SplitsError, TimeoutError, type MismatchField, type SplitsProblem } from '../errors.js';

export const STATUS_WORDS = 8;
export const STATUS_BYTES = STATUS_WORDS * 8;
export const INT64_MAX = 0x7fffffffffffffffn;

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
  seq: 6,
  expert: 7,
} as const;

/** The waits a timeout names (kernels/config.cuh A2AV_WAIT_*). */
/** The waits of the 1-D call (kernels/config.cuh A2AV_WAIT_ARRIVAL, A2AV_WAIT_DONE; the cpu lane's arrive and done words). */
export const WAIT_ARRIVAL = 1;
export const WAIT_DONE = 2;
/** A plan's move, and an allReduce's first and later rounds (A2AV_WAIT_MOVE, A2AV_WAIT_AR_HEADER, A2AV_WAIT_AR_DATA). */
export const WAIT_MOVE = 5;
export const WAIT_AR_HEADER = 6;
export const WAIT_AR_DATA = 7;

export const WaitSite: Record<number, string> = {
  1: "waiting for the peer's splits",
  2: "waiting for the peer's completion signals",
  3: "MoE exchange, round 1: waiting for the sender's counts",
  4: "MoE exchange, round 2: waiting for the receiver's answer",
  5: "a plan's move: waiting for the peer's row size and output",
  6: "allReduce: waiting for the peer's count, dtype, op and output",
  7: "allReduce: waiting for the peer's contribution",
  8: "allReduce: waiting for the peer to free its staging slot",
};

/** The fields a mismatch names (kernels/config.cuh A2AV_FIELD_*), in the expert word of its record. */
export const MismatchCode = { kind: 1, rowBytes: 2, output: 3, expertsPerRank: 4, majorAlign: 5, count: 6, dtype: 7, op: 8, plan: 9 } as const satisfies Record<MismatchField, number>;
const MISMATCH_FIELDS = Object.fromEntries(Object.entries(MismatchCode).map(([field, code]) => [code, field])) as Record<number, MismatchField | undefined>;

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
  /** The expert involved (MoE calls); -1 or absent otherwise. A timeout: its WaitSite; a mismatch: its MismatchCode. */
  expert?: number;
}

/** a + b for non-negative row counts, saturated at INT64_MAX as the kernel does (never wraps). */
export const satAdd = (a: bigint, b: bigint): bigint => (a > INT64_MAX - b ? INT64_MAX : a + b);

export function saturatingSum(xs: Iterable<bigint>): bigint {
  let sum = 0n;
  for (const x of xs) sum = satAdd(sum, x);
  return sum;
}

/** Decodes the record at word `at` of `words`; undefined for ok. */
export function readStatus(words: BigInt64Array, at = 0): StatusEntry | undefined {
  const code = Number(words[at + StatusField.code]) as StatusCode;
  if (code === StatusCode.ok) return undefined;
  return {
    code,
    rank: Number(words[at + StatusField.rank]),
    peer: Number(words[at + StatusField.peer]),
    needed: words[at + StatusField.needed],
    available: words[at + StatusField.available],
    reportedBy: Number(words[at + StatusField.reportedBy]),
    expert: Number(words[at + StatusField.expert]),
  };
}

/**
 * How far the missing peer got, as the wait says it: a peer whose splits never came did not start
 * the call (or died before it said so); one whose completion never came started it and stopped
 * inside it. Other waits know only the last call the peer's word showed.
 */
function peerProgress(e: StatusEntry): string {
  if (e.expert === WAIT_ARRIVAL) return e.available <= 0n ? 'the peer has started no call on this lane' : `the peer has not started it: the last it started is call ${e.available}`;
  if (e.expert === WAIT_DONE) return 'the peer started it but has not finished it (stopped or died inside the call, or is still in it: ranks sharing cores or a GPU can take longer than the timeout)';
  return `the peer got no further than call ${e.available}`;
}

/** The named error a status entry stands for; `peerNote` adds what else is known of a missing peer. */
export function entryError(e: StatusEntry, timeoutMs: number, what = 'allToAllV', peerNote?: string, left?: { waitedMs: number; peerFailed: boolean }): Error {
  if (e.code === StatusCode.timeout) {
    const site = WaitSite[e.expert ?? -1];
    return new TimeoutError(e.rank, e.peer, timeoutMs, `${what}: call ${e.needed} on the lane${site ? `, ${site}` : ''}; ${peerProgress(e)}${peerNote ? `; ${peerNote}` : ''}`, left);
  }
  const problem = problems[e.code];
  if (problem === undefined) {
    return new A2avError('A2AV_STATUS', `${what}: unknown status code ${e.code} reported by rank ${e.reportedBy} (corrupt status record)`);
  }
  const op = /allReduce|allToAllV2dOffset|allToAllV2d|allToAllV/.exec(what)?.[0];
  const at = { problem, rank: e.rank, peer: e.peer, needed: e.needed, available: e.available, reportedBy: e.reportedBy, op, call: op === undefined ? undefined : planCallOf(what, op) };
  if (e.code === StatusCode.mismatch) return new SplitsError({ ...at, expert: -1, field: MISMATCH_FIELDS[e.expert ?? -1] });
  return new SplitsError({ ...at, expert: e.expert ?? -1 });
}

