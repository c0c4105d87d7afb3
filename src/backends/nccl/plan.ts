// The host-side half of the nccl backend's allToAllV, kept free of NCCL and CUDA so it can be tested
// anywhere: what every rank publishes (its capacities and call shape, then its splits), the check
// of the gathered split matrix, and where each peer's bytes go.
//
// The check follows kernels/a2av.cu rule for rule, so every backend refuses the same calls with the
// same SplitsError: ranks disagreeing on row size or output buffer first (lowest rank), then the
// first negative split in row-major order, then the lowest rank whose splits pass its input, then
// the lowest rank that would receive past its output. Every rank checks the same gathered matrix,
// so all of them refuse a call, or none does.
import { satAdd, StatusCode, type StatusEntry } from '../../collectives/status.js';

/** Words before the splits in what every rank publishes (mirrors the kernel's payload header). */
export const Header = { inRows: 0, outRows: 1, rowBytes: 2, outId: 3 } as const;
export const HEADER_WORDS = 4;

/** int64 words one rank publishes: the header, then its W splits. */
export const payloadWords = (world: number): number => HEADER_WORDS + world;

/** One rank's share of a checked call: byte ranges per peer, and its outSplitsOffsets. */
export class SplitPlan {
  readonly world: number;
  /** Per peer r: where this rank's rows for r start in its input, and how many bytes. */
  readonly sendOffset: Float64Array;
  readonly sendBytes: Float64Array;
  /** Per source q: where q's rows land in this rank's output, and how many bytes. */
  readonly recvOffset: Float64Array;
  readonly recvBytes: Float64Array;
  /** int64[2][W]: rows received from each source, then where each starts (rows). */
  readonly splitsOffsets: BigInt64Array;

  constructor(world: number) {
    this.world = world;
    this.sendOffset = new Float64Array(world);
    this.sendBytes = new Float64Array(world);
    this.recvOffset = new Float64Array(world);
    this.recvBytes = new Float64Array(world);
    this.splitsOffsets = new BigInt64Array(2 * world);
  }

  /** Fills `payload` (int64[payloadWords]) with this rank's header; the splits follow it on the device. */
  static header(payload: BigInt64Array, h: { inputBytes: number; outputBytes: number; rowBytes: number; outId: number }): void {
    payload[Header.inRows] = BigInt(Math.floor(h.inputBytes / h.rowBytes));
    payload[Header.outRows] = BigInt(Math.floor(h.outputBytes / h.rowBytes));
    payload[Header.rowBytes] = BigInt(h.rowBytes);
    payload[Header.outId] = BigInt(h.outId);
  }

  /** The problem with the gathered payloads (W × payloadWords, rank order), or undefined when valid. */
  check(all: BigInt64Array, reportedBy: number): StatusEntry | undefined {
    const W = this.world;
    const PW = payloadWords(W);
    const at = (q: number, i: number): bigint => all[q * PW + i];
    const split = (q: number, r: number): bigint => all[q * PW + HEADER_WORDS + r];
    const entry = (code: StatusCode, rank: number, peer: number, needed: bigint, available: bigint): StatusEntry => ({
      code, rank, peer, needed, available, reportedBy, expert: -1,
    });

    for (let q = 0; q < W; q++) {
      const rows = at(q, Header.rowBytes) !== at(0, Header.rowBytes);
      if (rows || at(q, Header.outId) !== at(0, Header.outId)) {
        const field = rows ? Header.rowBytes : Header.outId;
        return entry(StatusCode.mismatch, q, 0, at(q, field), at(0, field));
      }
    }
    for (let q = 0; q < W; q++) {
      for (let r = 0; r < W; r++) if (split(q, r) < 0n) return entry(StatusCode.negative, q, r, split(q, r), 0n);
    }
    for (let q = 0; q < W; q++) {
      const found = firstPast(at(q, Header.inRows), W, (r) => split(q, r));
      if (found) return entry(StatusCode.inputOverflow, q, found.peer, found.total, at(q, Header.inRows));
    }
    for (let r = 0; r < W; r++) {
      const found = firstPast(at(r, Header.outRows), W, (q) => split(q, r));
      if (found) return entry(StatusCode.outputOverflow, r, found.peer, found.total, at(r, Header.outRows));
    }
    return undefined;
  }

  /** Fills the byte ranges and outSplitsOffsets of rank `me` from a matrix that passed check(). */
  layout(all: BigInt64Array, me: number, rowBytes: number): void {
    const W = this.world;
    const PW = payloadWords(W);
    let sent = 0;
    let received = 0;
    for (let k = 0; k < W; k++) {
      const out = Number(all[me * PW + HEADER_WORDS + k]);
      const inRows = all[k * PW + HEADER_WORDS + me];
      this.sendOffset[k] = sent * rowBytes;
      this.sendBytes[k] = out * rowBytes;
      sent += out;
      this.recvOffset[k] = received * rowBytes;
      this.recvBytes[k] = Number(inRows) * rowBytes;
      this.splitsOffsets[k] = inRows;
      this.splitsOffsets[W + k] = BigInt(received);
      received += Number(inRows);
    }
  }
}

/**
 * The first index whose value no longer fits `cap` on top of those before it (the peer a refusal
 * names), with the saturated sum of all values; undefined when everything fits. Values are >= 0.
 */
function firstPast(cap: bigint, n: number, value: (i: number) => bigint): { peer: number; total: bigint } | undefined {
  let sum = 0n;
  let total = 0n;
  let peer = -1;
  for (let i = 0; i < n; i++) {
    const v = value(i);
    total = satAdd(total, v);
    if (peer < 0 && v > cap - sum) peer = i;
    else if (peer < 0) sum += v;
  }
  return peer < 0 ? undefined : { peer, total };
}
