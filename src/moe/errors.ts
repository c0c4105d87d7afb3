// The group's named errors. Its exchanges refuse a bad call on every rank with a SplitsError; the
// group's handles say what that means for tokens and experts. Every rank reads the same SplitsError,
// so every rank throws the same error, with no device read (which could stall behind a peer's
// spinning kernel).
import { A2avError, SplitsError, UsageError } from '../errors.js';
import { BAD_TOKEN_COUNT } from './compute.js';
import type { MoeLayout } from './api.js';

/**
 * A dispatch would put more rows into a rank's recvX than it holds; nothing was written. `rank` is
 * the receiver, `expert` the (global) expert whose block passes the end (-1 in the compact layout,
 * where rows are tokens), `localExpert` its index on that rank, `needed` the rows the receiver's
 * layout takes in all (padding included) and `capacity` the rows its recvX holds.
 */
export class MoeCapacityError extends A2avError {
  readonly rank: number;
  readonly expert: number;
  readonly localExpert: number;
  readonly needed: bigint;
  readonly capacity: bigint;
  readonly reportedBy: number;
  constructor(f: { rank: number; expert: number; localExpert: number; needed: bigint; capacity: bigint; reportedBy: number }, cause: SplitsError) {
    const what = f.expert >= 0 ? `expert ${f.expert} (local expert ${f.localExpert} of rank ${f.rank}) passes the end of its recvX` : `rank ${f.rank}'s tokens pass the end of its recvX`;
    super('A2AV_MOE_CAPACITY', `MoE dispatch refused: ${what}: the rank would receive ${f.needed} rows, recvX holds ${f.capacity} (reported by rank ${f.reportedBy}); nothing was written`, { cause });
    this.rank = f.rank;
    this.expert = f.expert;
    this.localExpert = f.localExpert;
    this.needed = f.needed;
    this.capacity = f.capacity;
    this.reportedBy = f.reportedBy;
  }
}

export type MoeRoutingProblem = 'expert-id' | 'token-count' | 'route-refused';

/**
 * A routing that cannot run, refused on every rank, nothing written. 'expert-id': rank `rank`'s
 * topkIdx[token][k] is neither -1 nor an expert of the job (the lowest such entry; the message says
 * the ids allowed, 0..experts-1, not the id found: only that rank holds it, on the device); 'token-count':
 * rank `rank`'s device token count is negative or past what its buffers hold; 'route-refused': a
 * combine of a route whose dispatch was refused.
 */
export class MoeRoutingError extends A2avError {
  readonly problem: MoeRoutingProblem;
  readonly rank: number;
  readonly token: number;
  readonly k: number;
  readonly reportedBy: number;
  constructor(f: { problem: MoeRoutingProblem; rank: number; token: number; k: number; reportedBy: number; experts?: number }, cause: SplitsError) {
    const ids = f.experts === undefined ? '' : ` (expected -1 or 0..${f.experts - 1})`;
    const what = {
      // The usual cause of a huge or odd id: int32 ids read as int64 (the default), which may also
      // misroute silently where an odd int32 is 0, so the hint is always given.
      'expert-id': `rank ${f.rank}: topkIdx[${f.token}][${f.k}] is neither -1 nor an expert id of the job${ids}; ids are read as int64 unless dispatch is given topkIdxType: 'int32'`,
      'token-count': `rank ${f.rank}: the device token count is negative or more than its buffers hold`,
      'route-refused': 'combine of a route whose dispatch was refused',
    }[f.problem];
    super('A2AV_MOE_ROUTING', `MoE ${what} (reported by rank ${f.reportedBy}); nothing was written`, { cause });
    this.problem = f.problem;
    this.rank = f.rank;
    this.token = f.token;
    this.k = f.k;
    this.reportedBy = f.reportedBy;
  }
}

/** What the group's dispatch exchange's refusal means; other errors pass as they are. */
export function dispatchError(err: unknown, g: { layout: MoeLayout; experts: number; expertsPerRank: number; topk: number }): unknown {
  if (!(err instanceof SplitsError)) return err;
  if (err.problem === 'negative' && err.peer === 0 && err.expert <= 0) {
    const n = Number(err.needed);
    const f = { rank: err.rank, reportedBy: err.reportedBy };
    if (n === BAD_TOKEN_COUNT) return new MoeRoutingError({ ...f, problem: 'token-count', token: -1, k: -1 }, err);
    const entry = -1 - n;
    return new MoeRoutingError({ ...f, problem: 'expert-id', token: Math.floor(entry / g.topk), k: entry % g.topk, experts: g.experts }, err);
  }
  if (err.problem === 'output-overflow') {
    const expanded = g.layout === 'expanded';
    const local = expanded ? err.expert : -1;
    const expert = expanded ? err.rank * g.expertsPerRank + err.expert : -1;
    return new MoeCapacityError({ rank: err.rank, expert, localExpert: local, needed: err.needed, capacity: err.available, reportedBy: err.reportedBy }, err);
  }
  return err;
}

/** What the group's combine exchange's refusal means: a negative count is a refused dispatch's route. */
export function combineError(err: unknown): unknown {
  // The group's combines agree on all else by construction (its shape, its buffers): only y can
  // differ, read in place on some ranks (symmetric, ranks on one GPU) and moved back on others.
  // A rank that made another call here (its own combine refused on the host, then the next call)
  // is refused the same way, and on cpu (y never read in place) it is the only cause. The rule
  // names the first rank that differs from rank 0: either of the two may be the odd one out.
  if (err instanceof SplitsError && err.problem === 'mismatch') {
    return new UsageError(`rank 0 and rank ${err.rank} made different combines: pass y of the same kind on every rank (from one comm.allocSymmetric on every rank, or a local buffer on every rank) and the same A2AV_MOE_PULL, and make the same calls in the same order on every rank (a rank whose own combine was refused, or that called something else here, differs too) (${err.message})`);
  }
  if (!(err instanceof SplitsError) || err.problem !== 'negative') return err;
  return new MoeRoutingError({ problem: 'route-refused', rank: err.rank, token: -1, k: -1, reportedBy: err.reportedBy }, err);
}
