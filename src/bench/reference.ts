// The sweep's same-run reference, chosen once from where the ranks run.
// cpu: every rank at once copies the bytes it sends, in its own thread, a copy per peer's chunk as
// the exchange makes them (`rank-copy`): the ranks run on the host's cores, as the exchange itself
// does, so one thread copying every rank's bytes would make the exchange look W times faster than a copy.
// Ranks on one device: that device's own copy of the bytes all its ranks send, timed on its lowest
// rank while the others wait (`copy`). Ranks on several GPUs: a one-GPU copy says nothing about
// NVLink (it read 0.30 on 2 H200s), so every rank at once copies what it sends to ranks on other
// GPUs straight into their output buffers with the copy engine (`peer-copy`): the traffic an
// exchange must carry between GPUs, at the rate the copy engines carry it. Backends whose buffers
// peers cannot address (nccl) have no reference across GPUs (`none`).
import { hostname } from 'node:os';
import type { Comm, DeviceBuffer, Stream } from '../backends/backend.js';
import type { Agreement } from '../collectives/agree.js';
import type { Splits } from './splits.js';
import type { RefKind } from './table.js';

/** The copy reference copies in chunks of at most this, so its buffers stay small next to the sweep's. */
const MAX_COPY_BYTES = 1 << 30;

export interface ReferencePlan {
  kind: RefKind;
  /** Per rank, the lowest rank on its device: ranks with the same value share a device. */
  deviceOf: number[];
  /** `copy`: this rank times its device's copy (it is the lowest rank there); `rank-copy`: every rank. */
  timesCopy: boolean;
  /**
   * Lead-in calls before each timed loop (measure.ts): none for `peer-copy` where ranks share a
   * device, whose copies one engine takes in queued order (with one, two ranks a GPU on two H200s
   * read 780 GB/s a direction, more than the link carries: each clock had timed one rank alone).
   */
  leadIn: number;
}

/**
 * Collective. Ranks are matched by host and device name: which rank lands on which device is the
 * backend's and the launcher's business.
 */
export function planReference(comm: Comm, agree: Agreement): ReferencePlan {
  const keys = agree.gather([deviceKey(comm.deviceName)]).map(([key]) => key);
  const deviceOf = keys.map((key) => keys.indexOf(key));
  const oneDevice = deviceOf.every((d) => d === 0);
  const kind: RefKind = oneDevice ? (comm.backend === 'cpu' ? 'rank-copy' : 'copy') : comm.copyToPeer ? 'peer-copy' : 'none';
  const shared = new Set(deviceOf).size < deviceOf.length;
  const timesCopy = kind === 'rank-copy' || (kind === 'copy' && deviceOf[comm.rank] === comm.rank);
  return { kind, deviceOf, timesCopy, leadIn: kind === 'peer-copy' && shared ? 0 : 1 };
}

/** Bytes of the copy reference's source and of its destination on a rank that times it. */
export function copyBytes(kind: RefKind, inputBytes: number, ranksOnDevice: number): number {
  if (kind === 'rank-copy') return Math.min(inputBytes, MAX_COPY_BYTES);
  return kind === 'copy' ? Math.min(ranksOnDevice * inputBytes, MAX_COPY_BYTES) : 0;
}

/** Ranks on a device that hold a copy reference's pair of buffers. */
export function copyPairs(kind: RefKind, ranksOnDevice: number): number {
  return kind === 'rank-copy' ? ranksOnDevice : kind === 'copy' ? 1 : 0;
}

/** The buffers the reference reads and writes. */
export interface ReferenceBuffers {
  /** The sweep's input and (symmetric) output: the peer copies move input rows into peers' outputs. */
  input: DeviceBuffer;
  output: DeviceBuffer;
  /** `copy` on the rank that times it: a source and a destination of `copyBytes` bytes. */
  copy?: { src: DeviceBuffer; dst: DeviceBuffer };
}

/**
 * The work one iteration of the reference queues on `stream` for this size; undefined where this
 * rank times nothing. For `peer-copy` and `rank-copy` every rank gets one (maybe empty): every rank
 * times it, at once.
 */
export function referenceWork(comm: Comm, plan: ReferencePlan, buffers: ReferenceBuffers, splits: Splits, rowBytes: number, stream: Stream): (() => void) | undefined {
  if (plan.kind === 'rank-copy') {
    const { src, dst } = buffers.copy!;
    const pieces = sendPieces(splits.rows[comm.rank], rowBytes, src.bytes);
    return () => {
      for (const p of pieces) comm.copy(dst, src, p.bytes, stream, { dstOffset: p.offset, srcOffset: p.offset });
    };
  }
  if (plan.kind === 'copy' && plan.timesCopy) {
    const { src, dst } = buffers.copy!;
    const total = comm.ranksOnDevice * splits.rowsPerRank * rowBytes;
    return () => {
      for (let done = 0; done < total; done += src.bytes) comm.copy(dst, src, Math.min(src.bytes, total - done), stream);
    };
  }
  if (plan.kind !== 'peer-copy') return undefined;
  const copies = peerCopies(comm.rank, plan.deviceOf, splits, rowBytes);
  const copyToPeer = comm.copyToPeer!.bind(comm);
  return () => {
    for (const c of copies) copyToPeer({ dst: buffers.output, dstOffset: c.dstOffset, peer: c.peer, src: buffers.input, srcOffset: c.srcOffset, bytes: c.bytes, stream });
  };
}

/**
 * rank-copy's copies: the bytes a rank sends, one copy per peer's chunk as the exchange makes them
 * (a host memcpy can take one large copy at nearly twice the rate of two halves: 11 against 6.5 GB/s
 * here from 192 MiB up), each at its place in a buffer of `bufferBytes`, wrapping round it past its end.
 */
export function sendPieces(rows: readonly number[], rowBytes: number, bufferBytes: number): { offset: number; bytes: number }[] {
  const pieces: { offset: number; bytes: number }[] = [];
  let at = 0;
  for (const n of rows) {
    for (let left = n * rowBytes; left > 0; ) {
      const offset = at % bufferBytes;
      const bytes = Math.min(left, bufferBytes - offset);
      pieces.push({ offset, bytes });
      at += bytes;
      left -= bytes;
    }
  }
  return pieces;
}

/** One rank's rows for one peer: where they sit in its input and where they land in the peer's output. */
export interface PeerCopy {
  peer: number;
  srcOffset: number;
  dstOffset: number;
  bytes: number;
}

/** What rank `me` sends to ranks on other devices, laid out as the exchange lays it out; empty sends left out. */
export function peerCopies(me: number, deviceOf: readonly number[], splits: Splits, rowBytes: number): PeerCopy[] {
  const { rows } = splits;
  const copies: PeerCopy[] = [];
  let sent = 0;
  for (let peer = 0; peer < rows.length; peer++) {
    const n = rows[me][peer];
    if (n > 0 && deviceOf[peer] !== deviceOf[me]) {
      // The peer's output holds the rows of sources 0..me-1 before ours.
      let before = 0;
      for (let src = 0; src < me; src++) before += rows[src][peer];
      copies.push({ peer, srcOffset: sent * rowBytes, dstOffset: before * rowBytes, bytes: n * rowBytes });
    }
    sent += n;
  }
  return copies;
}

/** FNV-1a of host and device name: equal on ranks that share a device, distinct otherwise (but for 2^-32 odds). */
function deviceKey(deviceName: string): number {
  let h = 0x811c9dc5;
  for (const c of `${hostname()}/${deviceName}`) h = Math.imul(h ^ c.codePointAt(0)!, 0x01000193);
  return h >>> 0;
}
