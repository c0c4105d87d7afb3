// All-to-all-v with device-resident splits, one launch per rank and call:
//   1. send: every rank writes, into every peer's pad, LL packets holding its header (splits,
//      capacities) and, for each peer it sends at most A2AV_INLINE_BYTES to, those rows too;
//   2. every block reads all headers (waiting for them is the arrival barrier) and validates the
//      whole split matrix: every rank reaches the same verdict, so either all move data or none;
//   3. data: larger sends are pushed straight into the receiver's output, this rank's blocks
//      sweeping its contiguous send bytes tile by tile whatever the skew between peers; inline rows
//      are copied from this rank's pad into its output;
//   4. only when some send was pushed: the last block raises done[me] = seq on every peer and waits
//      for all peers' done (a call with only inline rows needs no second exchange).
// Every wait is bounded by params.timeoutNs and ends in a status record naming the missing rank.
#include "config.cuh"
#include "copy.cuh"
#include "ll.cuh"
#include "signals.cuh"

// Mirrored by src/backends/cuda/kernel-params.ts (byte offsets in comments).
struct A2avParams {
  const u8* input;          // 0
  u64 inputBytes;           // 8
  u8* const* outPeers;      // 16: output base on every rank (device table [W])
  u64 outputBytes;          // 24
  const i64* inSplits;      // 32: [W]
  i64* outSplitsOffsets;    // 40: [2][W]
  u8* const* padPeers;      // 48: signal pad base on every rank (device table [W])
  u64 laneOffset;           // 56: this lane's byte offset inside every pad
  i64 rowBytes;             // 64
  i64 outId;                // 72: symmetric buffer id of the output (must match across ranks)
  i64 timeoutNs;            // 80
  int rank;                 // 88
  int world;                // 92
};

__device__ __forceinline__ i64 sat_add(i64 a, i64 b) { return a > 0x7fffffffffffffffLL - b ? 0x7fffffffffffffffLL : a + b; }

// A sender's row goes inline to a peer when its splits are sane (so it may read its input) and the
// bytes fit a slot. Both sides evaluate this from the sender's header and agree.
__device__ __forceinline__ bool row_readable(const i64* hdr, int W) {
  i64 sum = 0;
  for (int r = 0; r < W; ++r) {
    const i64 s = hdr[A2AV_PAYLOAD_HEADER + r];
    if (s < 0 || s > hdr[0] - sum) return false;
    sum += s;
  }
  return true;
}
__device__ __forceinline__ bool goes_inline(bool readable, i64 rows, i64 rowBytes) {
  return readable && rows <= A2AV_INLINE_BYTES / rowBytes;
}

extern "C" __global__ void __launch_bounds__(A2AV_MAX_THREADS) a2av_1d(const A2avParams p) {
  // Dynamic shared memory: every rank's header, then this rank's send and receive plan in bytes.
  extern __shared__ i64 smem[];
  const int W = p.world, me = p.rank, tid = threadIdx.x, nt = blockDim.x;
  const int PW = A2AV_PAYLOAD_HEADER + W;
  i64* pay = smem;  // [W][PW]
  i64* sendLen = smem + W * PW;
  i64* srcOff = sendLen + W;
  i64* dstOff = srcOff + W;
  i64* recvOff = dstOff + W;
  __shared__ int sAbort, sLast, sMismatch, sNegative, sInOver, sOutOver, sPushed, sReadable;

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  // Launched early (programmatic dependent launch): wait here for the previous kernel on this
  // stream, then let the next call's kernel get scheduled while this one runs. No-ops otherwise.
  asm volatile("griddepcontrol.wait;" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;");
#endif
  u8* lane = p.padPeers[me] + p.laneOffset;
  LaneHeader* h = (LaneHeader*)lane;
  const i64 seq = ld_volatile(&h->seq) + 1;
  const u32 flag = (u32)seq;
  const int parity = (int)(seq & 1);
  const i64 rowBytes = p.rowBytes;
  const u64 gtid = (u64)blockIdx.x * nt + tid, gthreads = (u64)gridDim.x * nt;

  // My own header, in shared memory (row `me` of the matrix), and my send plan's source offsets.
  i64* mine = pay + me * PW;
  for (int i = tid; i < PW; i += nt)
    mine[i] = i == 0 ? (i64)(p.inputBytes / (u64)rowBytes)
            : i == 1 ? (i64)(p.outputBytes / (u64)rowBytes)
            : i == 2 ? rowBytes
            : i == 3 ? p.outId
            : p.inSplits[i - A2AV_PAYLOAD_HEADER];
  if (tid == 0) {
    sAbort = 0;
    sMismatch = sNegative = sInOver = sOutOver = 0x7fffffff;
  }
  __syncthreads();
  if (tid == 0) sReadable = row_readable(mine, W);
  for (int r = tid; r < W; r += nt) {
    i64 src = 0;
    for (int q = 0; q < r; ++q) src = sat_add(src, mine[A2AV_PAYLOAD_HEADER + q]);
    srcOff[r] = src;  // rows, for now
  }
  __syncthreads();

  // 1. send headers and inline rows to every peer (all blocks share the packets)
  for (int r = 0; r < W; ++r) {
    const i64 rows = mine[A2AV_PAYLOAD_HEADER + r];
    const bool inl = goes_inline(sReadable, rows, rowBytes);
    const u64 bytes = inl ? (u64)(rows * rowBytes) : 0;
    const u64 packets = PW + (bytes + 7) / 8;
    uint4* slot = lane_slot(p.padPeers[r] + p.laneOffset, W, parity, me);
    const u8* src = p.input + (inl ? srcOff[r] * rowBytes : 0);
    for (u64 j = gtid; j < packets; j += gthreads) {
      if (j < (u64)PW) {
        ll_store(slot + j, (u64)mine[j], flag);
      } else {
        const u64 at = 8 * (j - PW);
        const u32 n = bytes - at < 8 ? (u32)(bytes - at) : 8u;
        ll_store(slot + j, load_bytes(src + at, n), flag);
      }
    }
  }

  // 2. every rank's header; waiting for them is the arrival barrier
  {
    const u64 deadline = global_timer_ns() + (u64)p.timeoutNs;
    for (int i = tid; i < W * PW; i += nt) {
      const int q = i / PW, j = i % PW;
      if (q == me) continue;
      u64 v;
      if (!ll_load(lane_slot(lane, W, parity, q) + j, flag, deadline, v)) {
        record_status(h, A2AV_ERR_TIMEOUT, me, q, seq, 0, me);
        sAbort = 1;
      } else {
        pay[i] = (i64)v;
      }
    }
  }
  __syncthreads();
  if (sAbort) return;  // the host marks this communicator aborted

  // Validation: each category keeps its first offender (lowest index), then priority decides.
  const i64* pay0 = pay;
  for (int q = tid; q < W; q += nt) {
    const i64* pq = pay + q * PW;
    if (pq[2] != pay0[2] || pq[3] != pay0[3]) atomicMin(&sMismatch, q);
    const i64 cap = pq[0];
    i64 sum = 0;
    bool over = false;
    for (int r = 0; r < W; ++r) {
      const i64 s = pq[4 + r];
      if (s < 0) {
        atomicMin(&sNegative, q * W + r);
        break;
      }
      if (s > cap - sum) over = true;
      else sum += s;
    }
    if (over) atomicMin(&sInOver, q);
  }
  for (int r = tid; r < W; r += nt) {
    const i64 cap = pay[r * PW + 1];
    i64 sum = 0;
    for (int q = 0; q < W; ++q) {
      const i64 s = pay[q * PW + 4 + r];
      if (s < 0) break;  // reported as negative
      if (s > cap - sum) {
        atomicMin(&sOutOver, r);
        break;
      }
      sum += s;
    }
  }
  __syncthreads();
  const bool bad = sMismatch != 0x7fffffff || sNegative != 0x7fffffff || sInOver != 0x7fffffff || sOutOver != 0x7fffffff;
  if (bad && blockIdx.x == 0 && tid == 0) {
    if (sMismatch != 0x7fffffff) {
      const i64* pq = pay + sMismatch * PW;
      const bool rows = pq[2] != pay0[2];
      record_status(h, A2AV_ERR_MISMATCH, sMismatch, 0, pq[rows ? 2 : 3], pay0[rows ? 2 : 3], me);
    } else if (sNegative != 0x7fffffff) {
      const int q = sNegative / W, r = sNegative % W;
      record_status(h, A2AV_ERR_NEGATIVE, q, r, pay[q * PW + 4 + r], 0, me);
    } else if (sInOver != 0x7fffffff) {
      const i64* pq = pay + sInOver * PW;
      const i64 cap = pq[0];
      i64 sum = 0, total = 0;
      int peer = -1;
      for (int r = 0; r < W; ++r) {
        const i64 s = pq[4 + r];
        total = sat_add(total, s);
        if (peer < 0 && s > cap - sum) peer = r;
        else if (peer < 0) sum += s;
      }
      record_status(h, A2AV_ERR_INPUT_OVERFLOW, sInOver, peer, total, cap, me);
    } else {
      const int r = sOutOver;
      const i64 cap = pay[r * PW + 1];
      i64 sum = 0, total = 0;
      int peer = -1;
      for (int q = 0; q < W; ++q) {
        const i64 s = pay[q * PW + 4 + r];
        total = sat_add(total, s);
        if (peer < 0 && s > cap - sum) peer = q;
        else if (peer < 0) sum += s;
      }
      record_status(h, A2AV_ERR_OUTPUT_OVERFLOW, r, peer, total, cap, me);
    }
  }

  // 3. data (skipped on any validation failure: nothing is written). The matrix is valid, so every
  // row is readable and inline-ness depends on the split alone.
  if (tid == 0) sPushed = 0;
  __syncthreads();
  if (!bad) {
    for (int r = tid; r < W; r += nt) {
      i64 dst = 0, recv = 0;
      for (int q = 0; q < me; ++q) dst += pay[q * PW + 4 + r];
      for (int q = 0; q < r; ++q) recv += pay[q * PW + 4 + me];
      const i64 rows = mine[4 + r];
      sendLen[r] = goes_inline(true, rows, rowBytes) ? 0 : rows * rowBytes;  // pushed bytes only
      srcOff[r] *= rowBytes;
      dstOff[r] = dst * rowBytes;
      recvOff[r] = recv * rowBytes;
    }
    for (int i = tid; i < W * W; i += nt)
      if (!goes_inline(true, pay[(i / W) * PW + 4 + i % W], rowBytes)) sPushed = 1;
    if (blockIdx.x == 0) {
      for (int q = tid; q < W; q += nt) {
        p.outSplitsOffsets[q] = pay[q * PW + 4 + me];
        p.outSplitsOffsets[W + q] = recvOff[q] / rowBytes;
      }
    }
    __syncthreads();

    // Pushed sends: blocks sweep the send bytes together, tile by tile (block b takes tiles b,
    // b+B, ...), so at any moment a rank reads one contiguous window and writes few: DRAM pages
    // stay open. Giving each block one long contiguous slice instead was measured 25-35% slower.
    const i64 total = srcOff[W - 1] + mine[4 + W - 1] * rowBytes;
    const i64 tile = (i64)nt * 16 * A2AV_COPY_UNROLL;
    int r = 0;
    for (i64 lo = (i64)blockIdx.x * tile; lo < total; lo += (i64)gridDim.x * tile) {
      const i64 hi = lo + tile < total ? lo + tile : total;
      while (srcOff[r] + mine[4 + r] * rowBytes <= lo) ++r;  // segments ascend, so r only moves forward
      for (int k = r; k < W && srcOff[k] < hi; ++k) {
        if (sendLen[k] == 0) continue;  // inline or empty
        const i64 a = srcOff[k] > lo ? srcOff[k] : lo;
        const i64 segEnd = srcOff[k] + sendLen[k];
        const i64 b = segEnd < hi ? segEnd : hi;
        if (a < b) copy_bytes(p.outPeers[k] + dstOff[k] + (a - srcOff[k]), p.input + a, (u64)(b - a));
      }
    }

    // Inline receives: from this rank's pad into its output.
    const u64 deadline = global_timer_ns() + (u64)p.timeoutNs;
    u8* out = p.outPeers[me];
    for (int q = 0; q < W; ++q) {
      const i64 rows = pay[q * PW + 4 + me];
      if (rows == 0 || !goes_inline(true, rows, rowBytes)) continue;
      const u64 bytes = (u64)(rows * rowBytes);
      const uint4* slot = lane_slot(lane, W, parity, q) + PW;
      for (u64 j = gtid; j < (bytes + 7) / 8; j += gthreads) {
        u64 v;
        if (!ll_load(slot + j, flag, deadline, v)) {
          record_status(h, A2AV_ERR_TIMEOUT, me, q, seq, 0, me);
          break;
        }
        const u64 at = 8 * j;
        store_bytes(out + recvOff[q] + at, v, bytes - at < 8 ? (u32)(bytes - at) : 8u);
      }
    }
  }

  // 4. completion
  __syncthreads();
  if (tid == 0) {
    fence_peers();
    sLast = atomicAdd(&h->blocksDone, 1u) == gridDim.x - 1;
  }
  __syncthreads();
  if (!sLast) return;
  if (tid == 0) h->blocksDone = 0;  // only the last block touches it; the next call is stream-ordered
  if (sPushed) {
    fence_peers();
    __syncthreads();
    for (int peer = tid; peer < W; peer += nt) st_release_peer(lane_done(p.padPeers[peer] + p.laneOffset) + me, seq);
    const u64 deadline = global_timer_ns() + (u64)p.timeoutNs;
    for (int q = tid; q < W; q += nt) {
      if (!wait_at_least(lane_done(lane) + q, seq, deadline)) {
        record_status(h, A2AV_ERR_TIMEOUT, me, q, seq, ld_acquire_peer(lane_done(lane) + q), me);
        sAbort = 1;
      }
    }
  }
  __syncthreads();
  if (tid == 0 && !sAbort) st_volatile(&h->seq, seq);
}
