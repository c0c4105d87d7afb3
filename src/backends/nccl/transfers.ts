// The host-side half of the nccl backend, kept free of NCCL and CUDA so it can be tested anywhere:
// how many words each rank's record takes in the split exchange's ncclAllGather, and how one
// rank's routing (collectives/exchange-routing.ts) becomes device copies and one group of
// ncclSend/ncclRecv.
//
// One send and one receive per peer pair, of all the rows between them: NCCL runs a group of
// point-to-point calls as one kernel, NCCL documents at most 2048 calls per group, and a group of
// many calls per peer pair is split into several kernels (NVIDIA/nccl#1768), so one call per chunk
// (W·E of them) would not scale with E. Where one side's chunks are not contiguous, they go
// through a scratch buffer: the sender gathers its chunks for a peer into it (combine: its expert
// blocks), or the receiver receives into it and places each chunk with a device copy (dispatch:
// one block per expert). This is what NCCL users do around an all-to-all today (a permute before,
// an unpermute after); where the rows are contiguous (the 1-D call, a single chunk) they go
// straight from the input or into the output. Rows for itself a rank copies, chunk by chunk.
import { MAX_EXPERTS_PER_RANK } from '../backend.js';
import { RECORD_HEADER_WORDS } from '../../collectives/exchange-rules.js';
import type { Routing } from '../../collectives/exchange-routing.js';

/**
 * Experts whose counts fit the first ncclAllGather of a MoE call (combine's counts and offsets for
 * 16 experts, dispatch's counts for 32). Every rank gathers the same number of words whatever its
 * E, so a rank that disagrees on E (or on the kind of call) is refused as a mismatch rather than
 * left in a hang; a call with more experts gathers its counts in a second round once the headers
 * agree.
 */
export const INLINE_EXPERTS = 16;

/** int64 words of each rank's record in the first gather: the 1-D call's whole record, a MoE call's header and inline counts, a move's header. */
export function firstGatherWords(kind: '1d' | 'moe' | 'move', world: number): number {
  if (kind === 'move') return RECORD_HEADER_WORDS;
  return RECORD_HEADER_WORDS + (kind === '1d' ? world : 2 * world * INLINE_EXPERTS);
}

/** int64 words of the largest record (combine with the most experts). */
export const maxRecordWords = (world: number): number => RECORD_HEADER_WORDS + 2 * world * MAX_EXPERTS_PER_RANK;

/** `bytes` from offset `src` to offset `dst`. */
export interface Copy {
  dst: number;
  src: number;
  bytes: number;
}

/** One ncclSend or ncclRecv: `bytes` at `offset` of the input/output, or of the scratch buffer. */
export interface PeerTransfer {
  peer: number;
  bytes: number;
  offset: number;
  scratch: boolean;
}

export interface TransferPlan {
  /** Before the group: input -> scratch (chunks a peer receives contiguous but this rank holds apart). */
  gather: Copy[];
  /** Input -> output: this rank's rows for itself. */
  local: Copy[];
  /** One per peer with rows, in peer order. */
  sends: PeerTransfer[];
  recvs: PeerTransfer[];
  /** After the group: scratch -> output (chunks that arrive contiguous but land apart). */
  scatter: Copy[];
  scratchBytes: number;
}

/** The copies and transfers that move `rowBytes`-byte rows as `t` says. */
export function transfers(t: Routing, rowBytes: number): TransferPlan {
  const plan: TransferPlan = { gather: [], local: [], sends: [], recvs: [], scatter: [], scratchBytes: 0 };
  const me = t.rank;
  // Send side: this rank's chunks, in (peer, expert) order: a peer's are consecutive.
  for (let k = 0; k < t.chunks; ) {
    const peer = t.peer[k];
    let end = k + 1;
    let contiguous = true;
    for (; end < t.chunks && t.peer[end] === peer; end++) contiguous &&= t.srcRow[end] === t.srcRow[end - 1] + t.rows[end - 1];
    if (peer === me) {
      for (let j = k; j < end; j++) plan.local.push({ dst: t.dstRow[j] * rowBytes, src: t.srcRow[j] * rowBytes, bytes: t.rows[j] * rowBytes });
    } else if (contiguous) {
      let bytes = 0;
      for (let j = k; j < end; j++) bytes += t.rows[j] * rowBytes;
      plan.sends.push({ peer, bytes, offset: t.srcRow[k] * rowBytes, scratch: false });
    } else {
      const at = plan.scratchBytes;
      for (let j = k; j < end; j++) {
        const bytes = t.rows[j] * rowBytes;
        plan.gather.push({ dst: plan.scratchBytes, src: t.srcRow[j] * rowBytes, bytes });
        plan.scratchBytes += bytes;
      }
      plan.sends.push({ peer, bytes: plan.scratchBytes - at, offset: at, scratch: true });
    }
    k = end;
  }
  // Receive side: each source's chunks arrive in the order it sends them (by expert).
  const W = t.world;
  const E = t.experts;
  for (let src = 0; src < W; src++) {
    if (src === me) continue;
    let first = -1;
    let bytes = 0;
    let contiguous = true;
    let next = 0;
    for (let e = 0; e < E; e++) {
      const i = t.kind === 'dispatch' ? e * W + src : src * E + e;
      const rows = t.outCounts[i];
      if (rows === 0) continue;
      if (first < 0) first = t.outStarts[i];
      else contiguous &&= t.outStarts[i] === next;
      next = t.outStarts[i] + rows;
      bytes += rows * rowBytes;
    }
    if (bytes === 0) continue;
    if (contiguous) {
      plan.recvs.push({ peer: src, bytes, offset: first * rowBytes, scratch: false });
      continue;
    }
    const at = plan.scratchBytes;
    plan.recvs.push({ peer: src, bytes, offset: at, scratch: true });
    for (let e = 0; e < E; e++) {
      const i = t.kind === 'dispatch' ? e * W + src : src * E + e;
      const chunk = t.outCounts[i] * rowBytes;
      if (chunk === 0) continue;
      plan.scatter.push({ dst: t.outStarts[i] * rowBytes, src: plan.scratchBytes, bytes: chunk });
      plan.scratchBytes += chunk;
    }
  }
  return plan;
}
