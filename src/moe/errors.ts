// The group's named errors. Its exchanges refuse a bad call on every rank with a SplitsError; the
// group's handles say what that means for tokens and experts. Every rank reads the same SplitsError,
// so every rank throws the same error, with no device read (which could stall behind a peer's
// spinning kernel), but for one: the rank whose device token count was refused reads that count
// back (8 bytes, through the communicator's read, which waits on no other stream) to name it.
import { A2avError, SplitsError, TimeoutError, UsageError } from '../errors.js';
import { BAD_TOKEN_COUNT } from './compute.js';
import type { MoeLayout } from './api.js';

/**
 * A dispatch would put more rows into a rank's recvX than it holds; nothing was written. `rank` is
 * the receiver, `expert` the (global) expert whose block passes the end (-1 in the compact layout,
 * where rows are tokens), `localExpert` its index on that rank, `needed` the rows the receiver's
 * layout takes in all (padding included) and `capacity` the rows its recvX holds. `cause`: the
 * exchange's SplitsError (`output-overflow`), in the exchange's terms: `peer` the source rank,
 * `expert` the local expert (-1 in the compact layout).
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
    // Expanded: the count is the whole layout's, each local expert's block padded to its alignment
    // (an empty one still takes its rows), not the rows that travel.
    const need = f.expert >= 0 ? `its layout takes ${f.needed} rows (every local expert's block, with the alignment padding)` : `the rank would receive ${f.needed} rows`;
    super('A2AV_MOE_CAPACITY', `MoE dispatch refused: ${what}: ${need}, recvX holds ${f.capacity} (reported by rank ${f.reportedBy}); nothing was written`, { cause });
    this.rank = f.rank;
    this.expert = f.expert;
    this.localExpert = f.localExpert;
    this.needed = f.needed;
    this.capacity = f.capacity;
    this.reportedBy = f.reportedBy;
  }
}

export type MoeRoutingProblem = 'expert-id' | 'token-count' | 'route-refused';

/** What bounds the tokens a dispatch with a device count can take: the group's maxTokensPerRank, or the rows of one of its buffers. */
export type TokenLimit = 'maxTokensPerRank' | 'x' | 'topkIdx' | 'topkWeights';

/** "maxTokensPerRank 64", "x holds 3 tokens": what bounds a dispatch's `capacity` tokens. */
export const limitText = (limit: TokenLimit, capacity: number | bigint): string =>
  limit === 'maxTokensPerRank' ? `maxTokensPerRank ${capacity}` : `${limit} holds ${capacity} ${BigInt(capacity) === 1n ? 'token' : 'tokens'}`;

/** What a MoeRoutingError is made from; the optional facts are those its problem has. */
export interface MoeRoutingFault {
  problem: MoeRoutingProblem;
  rank: number;
  token: number;
  k: number;
  reportedBy: number;
  /** expert-id: the experts of the job, for the ids allowed. */
  experts?: number;
  /** token-count, on the rank at fault: the count its numTokens holds, where it could be read back. */
  numTokens?: bigint;
  /** token-count, on the rank at fault: the tokens its call could take, and what bounds them. */
  capacity?: bigint;
  limit?: TokenLimit;
  /** token-count, on the other ranks: the group's maxTokensPerRank, the most any rank's call takes. */
  maxTokensPerRank?: number;
  /** route-refused: the call made along the refused route (default 'combine'). */
  along?: 'combine' | 'dispatch';
}

/**
 * A routing that cannot run, refused on every rank, nothing written. 'expert-id': rank `rank`'s
 * topkIdx[token][k] is neither -1 nor an expert of the job (the lowest such entry; the message says
 * the ids allowed, 0..experts-1, not the id found: only that rank holds it, on the device);
 * 'token-count': rank `rank`'s device token count is negative or past what its call's buffers hold
 * (on that rank, `numTokens` and `capacity` say both; its peers cannot see them: undefined there);
 * 'route-refused': a combine, or a dispatch passed `route`, along a route whose dispatch was
 * refused: `cause` is that dispatch's error where its handle can still say it, and `rank`, `token`
 * and `k` are that error's.
 * The first two have no `cause`: the exchange that carried the refusal saw only a stand-in split.
 */
export class MoeRoutingError extends A2avError {
  readonly problem: MoeRoutingProblem;
  readonly rank: number;
  readonly token: number;
  readonly k: number;
  readonly reportedBy: number;
  /** token-count, on rank `rank` only: the device count that was refused, where it could be read back. */
  readonly numTokens?: bigint;
  /** token-count, on rank `rank` only: the tokens its call could take. */
  readonly capacity?: bigint;
  constructor(f: MoeRoutingFault, cause?: unknown) {
    const by = `(reported by rank ${f.reportedBy}); nothing was written`;
    // A bad id or count is the named rank's dispatch: "rank R: MoE dispatch: ", as the group's host refusals read.
    const refusedRoute = f.along === 'dispatch' ? 'MoE dispatch along a route whose own dispatch was refused' : 'MoE combine of a route whose dispatch was refused';
    const text = f.problem === 'route-refused' ? `${refusedRoute} ${by}. ${refusedBecause(cause)}` : `rank ${f.rank}: MoE dispatch: ${routingText(f)} ${by}`;
    super('A2AV_MOE_ROUTING', text, cause === undefined ? undefined : { cause });
    this.problem = f.problem;
    this.rank = f.rank;
    this.token = f.token;
    this.k = f.k;
    this.reportedBy = f.reportedBy;
    if (f.numTokens !== undefined) this.numTokens = f.numTokens;
    if (f.capacity !== undefined) this.capacity = f.capacity;
  }
}

function routingText(f: MoeRoutingFault): string {
  if (f.problem === 'expert-id') {
    const ids = f.experts === undefined ? '' : ` (expected -1 or 0..${f.experts - 1})`;
    // The usual cause of a huge or odd id: int32 ids read as int64 (the default), which may also
    // misroute silently where an odd int32 is 0, so the hint is always given.
    return `topkIdx[${f.token}][${f.k}] is neither -1 nor an expert id of the job${ids}; ids are read as int64 unless dispatch is given topkIdxType: 'int32'`;
  }
  const count = 'the device token count (numTokens)';
  if (f.capacity !== undefined) {
    const takes = `its call takes 0..${f.capacity} tokens (${limitText(f.limit ?? 'maxTokensPerRank', f.capacity)})`;
    if (f.numTokens === undefined) return `${count} is negative or more than ${f.capacity}: ${takes}`;
    return `${count} is ${f.numTokens}, ${f.numTokens < 0n ? 'negative' : `more than ${f.capacity}`}: ${takes}`;
  }
  // A peer's count and buffers are on that peer: its own error names them.
  const most = f.maxTokensPerRank === undefined ? '' : ` (at most maxTokensPerRank, ${f.maxTokensPerRank})`;
  return `${count} is negative or more than its call takes${most}; rank ${f.rank}'s own error names the count and what its call takes`;
}

/** The second sentence of a route-refused message: the dispatch's own error, where its handle still said it. */
function refusedBecause(cause: unknown): string {
  if (cause instanceof Error) return `The dispatch's error: ${cause.name}: ${cause.message}`;
  return "That dispatch's handle (or, for a dispatch in a graph, its replay's) says why";
}

/** A dispatch's facts its refusal is told with, on this rank. */
export interface DispatchFacts {
  /** This rank. */
  rank: number;
  /** Whether the token count was a device buffer, and the tokens this call could take (what bounds them). */
  deviceCount: boolean;
  tokenCap: number;
  limit: TokenLimit;
  /** The count in the device buffer now (undefined where it cannot be read). */
  readCount(): bigint | undefined;
}

/** What the group's dispatch exchange's refusal means; other errors pass as they are. */
export function dispatchError(
  err: unknown,
  g: { layout: MoeLayout; experts: number; expertsPerRank: number; topk: number; tokenCap: number },
  call?: DispatchFacts,
): unknown {
  if (err instanceof TimeoutError) return moeTimeout(err, 'dispatch');
  if (!(err instanceof SplitsError)) return err;
  if (err.problem === 'negative' && err.peer === 0 && err.expert <= 0) {
    // The routing step's stand-ins for a bad count or id (compute.ts BAD_TOKEN_COUNT): not a split
    // the program passed, so the SplitsError is not the cause.
    const n = Number(err.needed);
    const f = { rank: err.rank, reportedBy: err.reportedBy };
    if (n === BAD_TOKEN_COUNT) return new MoeRoutingError({ ...f, problem: 'token-count', token: -1, k: -1, ...tokenCountFacts(err.rank, g.tokenCap, call) });
    const entry = -1 - n;
    return new MoeRoutingError({ ...f, problem: 'expert-id', token: Math.floor(entry / g.topk), k: entry % g.topk, experts: g.experts });
  }
  if (err.problem === 'output-overflow') {
    const expanded = g.layout === 'expanded';
    const local = expanded ? err.expert : -1;
    const expert = expanded ? err.rank * g.expertsPerRank + err.expert : -1;
    // The compact layout's exchange has one "expert" a rank (its tokens): its expert 0 is no expert of the job's.
    const cause = expanded ? err : new SplitsError({ ...err, expert: -1 });
    return new MoeCapacityError({ rank: err.rank, expert, localExpert: local, needed: err.needed, capacity: err.available, reportedBy: err.reportedBy }, cause);
  }
  return err;
}

/** A refused device count's facts: on the rank at fault, its count (read back) and capacity; elsewhere the group's bound. */
function tokenCountFacts(rank: number, maxTokensPerRank: number, call: DispatchFacts | undefined): Partial<MoeRoutingFault> {
  if (call === undefined || call.rank !== rank || !call.deviceCount) return { maxTokensPerRank };
  const cap = BigInt(call.tokenCap);
  const n = call.readCount();
  // A count that is in range now was changed since the call (or is not the one it read): not named.
  const refused = n !== undefined && (n < 0n || n > cap);
  return { capacity: cap, limit: call.limit, ...(refused ? { numTokens: n } : {}) };
}

/**
 * What the group's combine exchange's refusal means: a negative count is a refused dispatch's route.
 * `dispatched` returns that dispatch's error (undefined where its handle cannot say).
 */
export function combineError(err: unknown, dispatched: () => unknown = () => undefined): unknown {
  if (err instanceof TimeoutError) return moeTimeout(err, 'combine');
  // The group's combines agree on all else by construction (its shape, its buffers): only y can
  // differ, read in place on some ranks (symmetric, ranks on one GPU) and moved back on others.
  // A rank that made another call here (its own combine refused on the host, then the next call)
  // is refused the same way, and on cpu (y never read in place) it is the only cause. The rule
  // names the first rank that differs from rank 0: either of the two may be the odd one out.
  if (err instanceof SplitsError && err.problem === 'mismatch') {
    return new UsageError(`rank 0 and rank ${err.rank} made different combines: pass y of the same kind on every rank (from one comm.allocSymmetric on every rank, or a local buffer on every rank) and the same A2AV_MOE_PULL, and make the same calls in the same order on every rank (a rank whose own combine was refused, or that called something else here, differs too) (${err.message})`);
  }
  if (!(err instanceof SplitsError) || err.problem !== 'negative') return err;
  return routeRefused(err, dispatched, 'combine');
}

/**
 * A timeout inside a group's call, said as that call's: the exchange it waited in (one of the
 * dispatch's two on cpu and nccl, its lane call count) reads as the group's internals otherwise.
 */
function moeTimeout(err: TimeoutError, op: 'dispatch' | 'combine'): TimeoutError {
  if (err.what.startsWith('MoE ')) return err;
  const left = err.waitedMs === undefined ? undefined : { waitedMs: err.waitedMs, peerFailed: err.peerFailed };
  return new TimeoutError(err.rank, err.missingRank, err.timeoutMs, `MoE ${op}, in its exchange: ${err.what}`, left);
}

/**
 * A refusal of a dispatch passed `route`: its routing is that route's, worked out by the dispatch
 * that made it, so a stand-in count it carries is that dispatch's refusal, not this call's (whose
 * topkIdx and count were never read).
 */
export function reusedRouteError(err: unknown, routed: () => unknown, g: Parameters<typeof dispatchError>[1], call?: DispatchFacts): unknown {
  if (err instanceof SplitsError && err.problem === 'negative') return routeRefused(err, routed, 'dispatch');
  return dispatchError(err, g, call);
}

/**
 * Every rank's route of a refused dispatch holds -1 counts (compute.ts routeOso), so the exchange
 * names rank 0's: the dispatch's own error says whose call was at fault and why.
 */
function routeRefused(err: SplitsError, dispatched: () => unknown, along: 'combine' | 'dispatch'): MoeRoutingError {
  const why = dispatched();
  const known = why instanceof MoeRoutingError || why instanceof MoeCapacityError || why instanceof SplitsError ? why : undefined;
  const at = known instanceof MoeRoutingError ? { token: known.token, k: known.k } : { token: -1, k: -1 };
  return new MoeRoutingError({ problem: 'route-refused', rank: known?.rank ?? -1, ...at, reportedBy: err.reportedBy, along }, known);
}
