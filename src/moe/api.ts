// The token-level MoE group's public types: what createMoeGroup takes, what dispatch and combine
// take and return. Shapes are in rows of the group's sizes; every buffer is a DeviceBuffer of the
// group's communicator.
import type { DeviceBuffer, Handle, Lane, Stream } from '../backends/backend.js';

/**
 * expanded: every (token, k) is one row at its expert, rows grouped by expert (GEMM-ready);
 * compact: every token is one row at each rank that holds one of its experts.
 */
export type MoeLayout = 'expanded' | 'compact';
/** The element type of topkIdx (and of recvTopkIdx). */
export type TopkIdxType = 'int64' | 'int32';
/** The element type of combine's y, bias and out. */
export type CombineDtype = 'bf16' | 'f16' | 'f32';

export interface MoeGroupOptions {
  /** Experts of the whole job, numbered rank-major: expert g lives on rank g / E as its local expert g % E. A multiple of W, at most 256 a rank. */
  numExperts: number;
  /** K: expert ids per token. */
  topk: number;
  /** Tokens a rank dispatches at most: sizes every buffer of the group. */
  maxTokensPerRank: number;
  /** Bytes of one token's row in dispatch (x, recvX), any element type. */
  rowBytes: number;
  layout: MoeLayout;
  /** expanded: each expert's block of recvX starts at a multiple of this many rows (default 1); an expert that receives nothing still takes this many. */
  expertAlignment?: number;
  /** Bytes of one row of combine's y (default rowBytes): expert outputs may have another type than their inputs. */
  combineRowBytes?: number;
  /** The lane its exchanges run on (default lane 0). */
  lane?: Lane;
}

export interface MoeDispatchArgs {
  /** [T][rowBytes]: the tokens' rows. */
  x: DeviceBuffer;
  /** [T][K] of topkIdxType: each token's expert ids; -1 = none. */
  topkIdx: DeviceBuffer;
  /** Default 'int64'. */
  topkIdxType?: TopkIdxType;
  /** f32 [T][K]: read only to fill recvTopkWeights. */
  topkWeights?: DeviceBuffer;
  /**
   * T: a host number, or an int64[1] device buffer read when the call runs (so that a graph replay
   * can change it). Default: every row topkIdx holds, at most maxTokensPerRank.
   */
  numTokens?: number | DeviceBuffer;
  /**
   * Symmetric (peers write it). expanded: for each local expert, its rows from rank 0..W-1 in their
   * (token, k) order, each block aligned; compact: for each source rank, its tokens in order. The
   * group's recvRows rows never overflow it; a smaller one is refused when a call passes it
   * (MoeCapacityError).
   */
  recvX: DeviceBuffer;
  /** compact only: [rows][K] of topkIdxType: each received token's expert ids local to this rank, -1 for the others. */
  recvTopkIdx?: DeviceBuffer;
  /** f32. expanded: [rows], each row's weight (padding 0); compact: [rows][K], 0 where recvTopkIdx is -1. Needs topkWeights. */
  recvTopkWeights?: DeviceBuffer;
  /** int64[E]: rows received per local expert (expanded: without padding; compact: tokens that chose it, a token that repeats an id counted once per k). */
  expertCounts: DeviceBuffer;
  /** expanded only: int64[E], where each local expert's block starts in recvX (in rows). */
  expertOffsets?: DeviceBuffer;
  /**
   * int64[1]: the rows of recvX this dispatch wrote, from row 0 (compact: the tokens received;
   * expanded: to the end of the last expert's block, padding included). Rows past it keep what
   * they held, an earlier dispatch's rows too.
   */
  numRecvRows?: DeviceBuffer;
  /** The routing of an earlier dispatch of the same topkIdx: it is not worked out again. */
  route?: MoeRoute;
  /**
   * The caller's stream: the group's kernels run there, its exchanges on the group's lane after
   * them. A group's calls share its buffers: give them one stream (default: the lane's), or order
   * each after the one before it (done.waitOn). Inside comm.capture, the capture stream.
   */
  stream?: Stream;
}

/**
 * Where each (token, k) of a dispatch went, kept on the device by the group: later dispatches of
 * the same routing and the combine of its expert outputs reuse it. A group keeps one routing; a
 * dispatch without `route` replaces it, and the routes before it can no longer be used.
 */
export interface MoeRoute {
  readonly layout: MoeLayout;
}

export interface MoeDispatchResult {
  route: MoeRoute;
  /** Every step of the dispatch; wait() throws MoeCapacityError, MoeRoutingError or the exchange's own error. */
  done: Handle;
}

export interface MoeCombineArgs {
  /**
   * The expert outputs, rows of combineRowBytes in recvX's layout (padding rows are not read):
   * expanded, one per (token, k); compact, one per token, already weighted and summed over this
   * rank's experts. From `comm.allocSymmetric` on cuda with every rank on one GPU, it is read in
   * place by each token's rank (no copy back); any buffer gives the same bits.
   */
  y: DeviceBuffer;
  route: MoeRoute;
  /** [T][H] of dtype, H = combineRowBytes / element size: the reduced rows, on the tokens' own rank. */
  out: DeviceBuffer;
  /** expanded only: f32 [T][K], out[t] = sum over k of w[t][k] * y[t,k]. Without it: the plain sum. */
  topkWeights?: DeviceBuffer;
  dtype: CombineDtype;
  /** [T][H] of dtype, added last. */
  bias?: DeviceBuffer;
  /** As dispatch's. */
  stream?: Stream;
}

/** Made by createMoeGroup on every rank of a communicator. */
export interface MoeGroup {
  readonly layout: MoeLayout;
  readonly numExperts: number;
  /** E: experts per rank. */
  readonly expertsPerRank: number;
  readonly topk: number;
  readonly maxTokensPerRank: number;
  readonly rowBytes: number;
  readonly combineRowBytes: number;
  readonly expertAlignment: number;
  /** Rows of recvX (and of combine's y) that no routing can overflow: the worst case. */
  readonly recvRows: number;
  dispatch(args: MoeDispatchArgs): MoeDispatchResult;
  combine(args: MoeCombineArgs): Handle;
  /** Collective: frees the group's buffers once every rank's calls have run. */
  close(): Promise<void>;
}
