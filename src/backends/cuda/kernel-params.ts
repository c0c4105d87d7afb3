// Writes struct A2avParams (kernels/a2av.cu) into a launcher's parameter block.
export const A2AV_PARAMS_BYTES = 112;

export interface A2avParams {
  input: bigint;
  inputBytes: number;
  outPeers: bigint;
  outputBytes: number;
  inSplits: bigint;
  outSplitsOffsets: bigint;
  padPeers: bigint;
  laneOffset: number;
  rowBytes: number;
  outId: number;
  timeoutNs: bigint;
  rank: number;
  world: number;
  /** This rank's own signal pad. */
  pad: bigint;
  /** Grid mode: a2av_1d only synchronises; a2av_copy and a2av_done follow. */
  gridCopy: boolean;
  /** PeerSplitMode (src/tune/plan.ts): whether each destination gets its own blocks (kernels/copy.cuh). */
  splitByPeer: number;
}

export function writeA2avParams(v: DataView, p: A2avParams): void {
  v.setBigUint64(0, p.input, true);
  v.setBigUint64(8, BigInt(p.inputBytes), true);
  v.setBigUint64(16, p.outPeers, true);
  v.setBigUint64(24, BigInt(p.outputBytes), true);
  v.setBigUint64(32, p.inSplits, true);
  v.setBigUint64(40, p.outSplitsOffsets, true);
  v.setBigUint64(48, p.padPeers, true);
  v.setBigUint64(56, BigInt(p.laneOffset), true);
  v.setBigInt64(64, BigInt(p.rowBytes), true);
  v.setBigInt64(72, BigInt(p.outId), true);
  v.setBigInt64(80, p.timeoutNs, true);
  v.setInt32(88, p.rank, true);
  v.setInt32(92, p.world, true);
  v.setBigUint64(96, p.pad, true);
  v.setInt32(104, p.gridCopy ? 1 : 0, true);
  v.setInt32(108, p.splitByPeer, true);
}

// Writes struct XParams (kernels/exchange.cuh).
export const X_PARAMS_BYTES = 240;

export interface XParams {
  input: bigint;
  outPeers: bigint;
  /** 1d, dispatch: inSplits; combine: inSplitsOffsets. */
  splits: bigint;
  outSplitsOffsets: bigint;
  padPeers: bigint;
  pad: bigint;
  plan: bigint;
  scratch: bigint;
  laneOffset: number;
  rowBytes: number;
  outId: number;
  inRows: number;
  outRows: number;
  timeoutNs: bigint;
  align: number;
  /** ExchangeKind's number. */
  kind: number;
  experts: number;
  rank: number;
  world: number;
  /** PeerSplitMode (src/tune/plan.ts): whether each destination gets its own blocks (kernels/copy.cuh). */
  splitByPeer: number;
  /** x_fused's companion payload (backend.ts COMPANION): its input, output table and row size; 0n: none. */
  input2?: bigint;
  outPeers2?: bigint;
  rowBytes2?: number;
  /** int32 [send rows]: each send row's input row (backend.ts GATHER); 0n: the input in send order. */
  gatherRows?: bigint;
  /** x_copy_slices' index: each entry covers 2 ** this many send bytes (moe.ts sliceSpanLog2). */
  sliceSpanLog2?: number;
  /** x_copy_slices: the send bytes its grid was sized for (a dispatch reads its words early up to there). */
  gridBytes?: number;
  /** With gatherRows: the rows the input holds (x_copy_slices_gather reads early only below them). */
  gatherInputRows?: number;
  /** The call's plan agreement word (kernels/config.cuh, round 1's header): 0 a direct call (the default), -1 a plan's exchange; a move's comes from its plan. */
  callPlan?: number;
  /** x_scatter_index and x_copy_scatter (backend.ts SCATTER): int32 [scatterRows][scatterTopk], each (row, k)'s send row; 0n: none. */
  scatterSlots?: bigint;
  /** u64 [scatterRows][scatterTopk]: where each (row, k)'s send row lands (x_scatter_index writes it). */
  scatterDests?: bigint;
  /** int64 [1]: the input rows the call sends from, read when it runs. */
  scatterTokens?: bigint;
  scatterTopk?: number;
  /** The rows the slots and the input both hold. */
  scatterRows?: number;
}

export function writeXParams(v: DataView, p: XParams): void {
  v.setBigUint64(0, p.input, true);
  v.setBigUint64(8, p.outPeers, true);
  v.setBigUint64(16, p.splits, true);
  v.setBigUint64(24, p.outSplitsOffsets, true);
  v.setBigUint64(32, p.padPeers, true);
  v.setBigUint64(40, p.pad, true);
  v.setBigUint64(48, p.plan, true);
  v.setBigUint64(56, p.scratch, true);
  v.setBigUint64(64, BigInt(p.laneOffset), true);
  v.setBigInt64(72, BigInt(p.rowBytes), true);
  v.setBigInt64(80, BigInt(p.outId), true);
  v.setBigInt64(88, BigInt(p.inRows), true);
  v.setBigInt64(96, BigInt(p.outRows), true);
  v.setBigInt64(104, p.timeoutNs, true);
  v.setBigInt64(112, BigInt(p.align), true);
  v.setInt32(120, p.kind, true);
  v.setInt32(124, p.experts, true);
  v.setInt32(128, p.rank, true);
  v.setInt32(132, p.world, true);
  v.setInt32(136, p.splitByPeer, true);
  v.setInt32(140, p.sliceSpanLog2 ?? 0, true);
  v.setBigUint64(144, p.input2 ?? 0n, true);
  v.setBigUint64(152, p.outPeers2 ?? 0n, true);
  v.setBigInt64(160, BigInt(p.rowBytes2 ?? 0), true);
  v.setBigUint64(168, p.gatherRows ?? 0n, true);
  v.setBigInt64(176, BigInt(p.gridBytes ?? 0), true);
  v.setBigInt64(184, BigInt(p.gatherInputRows ?? 0), true);
  v.setBigInt64(192, BigInt(p.callPlan ?? 0), true);
  v.setBigUint64(200, p.scatterSlots ?? 0n, true);
  v.setBigUint64(208, p.scatterDests ?? 0n, true);
  v.setBigUint64(216, p.scatterTokens ?? 0n, true);
  v.setBigInt64(224, BigInt(p.scatterTopk ?? 0), true);
  v.setBigInt64(232, BigInt(p.scatterRows ?? 0), true);
}

// Writes struct ArParams (kernels/all-reduce.cuh).
export const AR_PARAMS_BYTES = 96;
/** Element types and ops as the allReduce kernels number them (AR_F32, AR_BF16, AR_SUM). */
export { DTYPE_CODE as ArDtype, OP_CODE as ArOp } from '../../codes.js';

export interface ArParams {
  input: bigint;
  outPeers: bigint;
  padPeers: bigint;
  pad: bigint;
  stagePeers: bigint;
  laneOffset: number;
  stageOffset: number;
  count: number;
  outId: number;
  timeoutNs: bigint;
  dtype: number;
  op: number;
  rank: number;
  world: number;
}

export function writeArParams(v: DataView, p: ArParams): void {
  v.setBigUint64(0, p.input, true);
  v.setBigUint64(8, p.outPeers, true);
  v.setBigUint64(16, p.padPeers, true);
  v.setBigUint64(24, p.pad, true);
  v.setBigUint64(32, p.stagePeers, true);
  v.setBigUint64(40, BigInt(p.laneOffset), true);
  v.setBigUint64(48, BigInt(p.stageOffset), true);
  v.setBigInt64(56, BigInt(p.count), true);
  v.setBigInt64(64, BigInt(p.outId), true);
  v.setBigInt64(72, p.timeoutNs, true);
  v.setInt32(80, p.dtype, true);
  v.setInt32(84, p.op, true);
  v.setInt32(88, p.rank, true);
  v.setInt32(92, p.world, true);
}
