// All-to-all-v with device-resident splits, one launch per rank and call:
//   1. publish: block 0 writes this rank's payload (splits, capacities) into every peer's pad and
//      raises arrive[me] = seq there;
//   2. every block waits for all arrivals, then validates the whole split matrix (every rank reaches
//      the same verdict, so either all move data or none does);
//   3. data: this rank's send bytes are contiguous in its input, so blocks take equal slices of
//      them whatever the skew between peers, and push each slice into the owning peer's output;
//   4. the last block to finish raises done[me] = seq on every peer and waits for all peers' done.
// Every wait is bounded by params.timeoutNs and ends in a status record naming the missing rank.
#include "config.cuh"
#include "copy.cuh"
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

extern "C" __global__ void __launch_bounds__(A2AV_MAX_THREADS) a2av_1d(const A2avParams p) {
  extern __shared__ i64 smem[];  // sendLen[W], srcOff[W], dstOff[W] (bytes)
  i64* sendLen = smem;
  i64* srcOff = smem + p.world;
  i64* dstOff = smem + 2 * p.world;
  __shared__ i64 sSeq;
  __shared__ int sAbort, sLast, sMismatch, sNegative, sInOver, sOutOver;

  const int W = p.world, me = p.rank, tid = threadIdx.x, nt = blockDim.x;
  u8* lane = p.padPeers[me] + p.laneOffset;
  LaneHeader* h = (LaneHeader*)lane;
  const i64 inRows = (i64)(p.inputBytes / (u64)p.rowBytes);
  const i64 outRows = (i64)(p.outputBytes / (u64)p.rowBytes);

  if (tid == 0) {
    sSeq = ld_volatile(&h->seq) + 1;
    sAbort = 0;
    sMismatch = sNegative = sInOver = sOutOver = 0x7fffffff;
  }
  __syncthreads();
  const i64 seq = sSeq;
  const int parity = (int)(seq & 1);
  const int PW = A2AV_PAYLOAD_HEADER + W;

  // 1. publish
  if (blockIdx.x == 0) {
    for (int i = tid; i < W * PW; i += nt) {
      const int peer = i / PW, w = i % PW;
      const i64 v = w == 0 ? inRows : w == 1 ? outRows : w == 2 ? p.rowBytes : w == 3 ? p.outId : p.inSplits[w - 4];
      st_volatile(lane_payload(p.padPeers[peer] + p.laneOffset, W, parity, me) + w, v);
    }
    __threadfence_system();
    __syncthreads();
    for (int peer = tid; peer < W; peer += nt) st_release_sys(lane_arrive(p.padPeers[peer] + p.laneOffset) + me, seq);
  }

  // 2. wait for every rank's payload
  {
    const u64 deadline = global_timer_ns() + (u64)p.timeoutNs;
    for (int q = tid; q < W; q += nt) {
      if (!wait_at_least(lane_arrive(lane) + q, seq, deadline)) {
        record_status(h, A2AV_ERR_TIMEOUT, me, q, seq, ld_acquire_sys(lane_arrive(lane) + q), me);
        sAbort = 1;
      }
    }
  }
  __syncthreads();
  if (sAbort) return;  // the host marks this communicator aborted

  // Validation: each category keeps its first offender (lowest index), then priority decides.
  const i64* pay0 = lane_payload(lane, W, parity, 0);
  for (int q = tid; q < W; q += nt) {
    const i64* pq = lane_payload(lane, W, parity, q);
    if (ld_volatile(pq + 2) != ld_volatile(pay0 + 2) || ld_volatile(pq + 3) != ld_volatile(pay0 + 3))
      atomicMin(&sMismatch, q);
    const i64 cap = ld_volatile(pq + 0);
    i64 sum = 0;
    bool over = false;
    for (int r = 0; r < W; ++r) {
      const i64 s = ld_volatile(pq + 4 + r);
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
    const i64 cap = ld_volatile(lane_payload(lane, W, parity, r) + 1);
    i64 sum = 0;
    for (int q = 0; q < W; ++q) {
      const i64 s = ld_volatile(lane_payload(lane, W, parity, q) + 4 + r);
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
      const i64* pq = lane_payload(lane, W, parity, sMismatch);
      const bool rows = ld_volatile(pq + 2) != ld_volatile(pay0 + 2);
      record_status(h, A2AV_ERR_MISMATCH, sMismatch, 0, ld_volatile(pq + (rows ? 2 : 3)), ld_volatile(pay0 + (rows ? 2 : 3)), me);
    } else if (sNegative != 0x7fffffff) {
      const int q = sNegative / W, r = sNegative % W;
      record_status(h, A2AV_ERR_NEGATIVE, q, r, ld_volatile(lane_payload(lane, W, parity, q) + 4 + r), 0, me);
    } else if (sInOver != 0x7fffffff) {
      const i64* pq = lane_payload(lane, W, parity, sInOver);
      const i64 cap = ld_volatile(pq + 0);
      i64 sum = 0, total = 0;
      int peer = -1;
      for (int r = 0; r < W; ++r) {
        const i64 s = ld_volatile(pq + 4 + r);
        total = sat_add(total, s);
        if (peer < 0 && s > cap - sum) peer = r;
        else if (peer < 0) sum += s;
      }
      record_status(h, A2AV_ERR_INPUT_OVERFLOW, sInOver, peer, total, cap, me);
    } else {
      const int r = sOutOver;
      const i64 cap = ld_volatile(lane_payload(lane, W, parity, r) + 1);
      i64 sum = 0, total = 0;
      int peer = -1;
      for (int q = 0; q < W; ++q) {
        const i64 s = ld_volatile(lane_payload(lane, W, parity, q) + 4 + r);
        total = sat_add(total, s);
        if (peer < 0 && s > cap - sum) peer = q;
        else if (peer < 0) sum += s;
      }
      record_status(h, A2AV_ERR_OUTPUT_OVERFLOW, r, peer, total, cap, me);
    }
  }

  // 3. data (skipped on any validation failure: nothing is written)
  if (!bad) {
    const i64* mine = lane_payload(lane, W, parity, me) + 4;
    for (int r = tid; r < W; r += nt) {
      i64 src = 0, dst = 0;
      for (int q = 0; q < r; ++q) src += ld_volatile(mine + q);
      for (int q = 0; q < me; ++q) dst += ld_volatile(lane_payload(lane, W, parity, q) + 4 + r);
      sendLen[r] = ld_volatile(mine + r) * p.rowBytes;
      srcOff[r] = src * p.rowBytes;
      dstOff[r] = dst * p.rowBytes;
    }
    if (blockIdx.x == 0) {
      for (int q = tid; q < W; q += nt) {
        i64 off = 0;
        for (int k = 0; k < q; ++k) off += ld_volatile(lane_payload(lane, W, parity, k) + 4 + me);
        p.outSplitsOffsets[q] = ld_volatile(lane_payload(lane, W, parity, q) + 4 + me);
        p.outSplitsOffsets[W + q] = off;
      }
    }
    __syncthreads();
    const i64 total = srcOff[W - 1] + sendLen[W - 1];
    const i64 chunk = ((total + gridDim.x - 1) / gridDim.x + 15) & ~15LL;
    const i64 lo = chunk * blockIdx.x;
    const i64 hi = lo + chunk < total ? lo + chunk : total;
    for (int r = 0; r < W && lo < hi; ++r) {
      const i64 a = srcOff[r] > lo ? srcOff[r] : lo;
      const i64 segEnd = srcOff[r] + sendLen[r];
      const i64 b = segEnd < hi ? segEnd : hi;
      if (a < b) copy_bytes(p.outPeers[r] + dstOff[r] + (a - srcOff[r]), p.input + a, (u64)(b - a));
    }
  }

  // 4. completion
  __syncthreads();
  if (tid == 0) {
    __threadfence_system();
    sLast = atomicAdd(&h->blocksDone, 1u) == gridDim.x - 1;
  }
  __syncthreads();
  if (!sLast) return;
  if (tid == 0) h->blocksDone = 0;  // only the last block touches it; the next call is stream-ordered
  __threadfence_system();
  __syncthreads();
  for (int peer = tid; peer < W; peer += nt) st_release_sys(lane_done(p.padPeers[peer] + p.laneOffset, W) + me, seq);
  {
    const u64 deadline = global_timer_ns() + (u64)p.timeoutNs;
    for (int q = tid; q < W; q += nt) {
      if (!wait_at_least(lane_done(lane, W) + q, seq, deadline)) {
        record_status(h, A2AV_ERR_TIMEOUT, me, q, seq, ld_acquire_sys(lane_done(lane, W) + q), me);
        sAbort = 1;
      }
    }
  }
  __syncthreads();
  if (tid == 0 && !sAbort) st_volatile(&h->seq, seq);
}
