// All-to-all-v with device-resident splits; per rank and call, one launch (three in grid mode):
//   1. publish: block 0 writes this rank's payload (splits, capacities) into every peer's pad as LL
//      packets (each carries the call's flag: no fence, no separate arrival flag);
//   2. every block waits for all payloads, then validates the whole split matrix (every rank reaches
//      the same verdict, so either all move data or none does);
//   3. data: this rank's send bytes are contiguous in its input, so blocks share them tile by tile
//      whatever the skew between peers, and push each tile into the owning peer's output;
//   4. every block adds one to done[me] on every peer; block 0 waits until each peer's count has
//      grown by the number of blocks that peer announced in its payload.
// Every wait is bounded by params.timeoutNs and ends in a status record naming the missing rank.
//
// Grid mode (large calls, params.gridCopy): a2av_1d stops after step 2 and leaves the send plan in
// the lane; a2av_copy moves the bytes with a grid of short-lived blocks, one small slice each, and
// a2av_done runs step 4. Blocks that retire and are replaced in order keep the DRAM streams
// sequential: on an H200 such a copy reaches 0.98 of the copy engine against 0.92 for a resident
// grid sweeping the range (scripts/probe/copy-ceiling.cu). A resident grid is still needed for the
// waits, which is why the call is split in three.
#include "config.cuh"
#include "copy.cuh"
#include "signals.cuh"
#include "exchange.cuh"  // sat_add: the rules of the splits exchange
#include "probe-clocks.cuh"

// A probe's define (src/backends/cuda/setup.ts): time the exchange and completion without the data.
#ifdef A2AV_PROBE_NO_COPY
#define A2AV_COPYING false
#else
#define A2AV_COPYING true
#endif

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
  u8* pad;                  // 96: this rank's own signal pad (padPeers[rank], without the table load)
  int gridCopy;             // 104: 1: grid mode (see above)
  int splitByPeer;          // 108: A2AV_SPLIT_*: step 3 gives each destination its own blocks (copy.cuh)
};
// The offsets kernel-params.ts writes; tests/kernel-layout.test.ts reads these lines.
A2AV_LAYOUT_CHECK(__builtin_offsetof(A2avParams, inputBytes) == 8, "A2avParams.inputBytes");
A2AV_LAYOUT_CHECK(__builtin_offsetof(A2avParams, outPeers) == 16, "A2avParams.outPeers");
A2AV_LAYOUT_CHECK(__builtin_offsetof(A2avParams, outputBytes) == 24, "A2avParams.outputBytes");
A2AV_LAYOUT_CHECK(__builtin_offsetof(A2avParams, inSplits) == 32, "A2avParams.inSplits");
A2AV_LAYOUT_CHECK(__builtin_offsetof(A2avParams, outSplitsOffsets) == 40, "A2avParams.outSplitsOffsets");
A2AV_LAYOUT_CHECK(__builtin_offsetof(A2avParams, padPeers) == 48, "A2avParams.padPeers");
A2AV_LAYOUT_CHECK(__builtin_offsetof(A2avParams, laneOffset) == 56, "A2avParams.laneOffset");
A2AV_LAYOUT_CHECK(__builtin_offsetof(A2avParams, rowBytes) == 64, "A2avParams.rowBytes");
A2AV_LAYOUT_CHECK(__builtin_offsetof(A2avParams, outId) == 72, "A2avParams.outId");
A2AV_LAYOUT_CHECK(__builtin_offsetof(A2avParams, timeoutNs) == 80, "A2avParams.timeoutNs");
A2AV_LAYOUT_CHECK(__builtin_offsetof(A2avParams, rank) == 88, "A2avParams.rank");
A2AV_LAYOUT_CHECK(__builtin_offsetof(A2avParams, world) == 92, "A2avParams.world");
A2AV_LAYOUT_CHECK(__builtin_offsetof(A2avParams, pad) == 96, "A2avParams.pad");
A2AV_LAYOUT_CHECK(__builtin_offsetof(A2avParams, gridCopy) == 104, "A2avParams.gridCopy");
A2AV_LAYOUT_CHECK(__builtin_offsetof(A2avParams, splitByPeer) == 108, "A2avParams.splitByPeer");
A2AV_LAYOUT_CHECK(sizeof(A2avParams) == 112, "A2avParams: A2AV_PARAMS_BYTES");


#ifdef A2AV_PROBE_CLOCKS
__device__ unsigned a2av_1d_launches;
#endif

// Three warp totals at once (exchange.cuh warp_sum_sat), their shuffles side by side.
__device__ __forceinline__ void warp_sum3_sat(i64& a, i64& b, i64& c) {
  for (int d = 16; d > 0; d >>= 1) {
    const i64 x = __shfl_xor_sync(0xffffffffu, a, d), y = __shfl_xor_sync(0xffffffffu, b, d), z = __shfl_xor_sync(0xffffffffu, c, d);
    a = sat_add(a, x);
    b = sat_add(b, y);
    c = sat_add(c, z);
  }
}

extern "C" __global__ void __launch_bounds__(A2AV_MAX_THREADS) a2av_1d(const A2avParams p) {
  // Dynamic shared memory: every rank's payload, this rank's send plan in bytes, its splits and the
  // lane in every peer's pad. Everything from global memory is read once, in parallel, into here:
  // a chain of dependent loads costs a round trip each, and small calls are made of round trips.
  extern __shared__ i64 smem[];
  const int PW = A2AV_PAYLOAD_HEADER + p.world;
  i64* pay = smem;  // [W][PW]
  i64* sendLen = smem + p.world * PW;
  i64* srcOff = sendLen + p.world;
  i64* dstAt = srcOff + p.world;  // destination address of each peer's segment
  i64* splits = dstAt + p.world;
  u8** peerLane = (u8**)(splits + p.world);
  __shared__ i64 sSeq;
  __shared__ int sAbort, sMismatch, sNegative, sInOver, sOutOver;

  const int W = p.world, me = p.rank, tid = threadIdx.x, nt = blockDim.x;
  PROBE_CLOCKS;
  PROBE_CLOCK(0);
  // Launched early (programmatic dependent launch): wait here for the previous kernel on this
  // stream, then let the next call's kernel get scheduled while this one runs. No-ops otherwise.
  pdl_wait();
  PROBE_STAMP_BEGIN(me, 1);
  // In grid mode the dependent is the copy grid, which may fill the GPU: it must not be scheduled
  // before every rank's a2av_1d is resident, i.e. before the arrival wait below.
  if (!p.gridCopy) pdl_release();
  PROBE_CLOCK(1);
  u8* lane = p.pad + p.laneOffset;
  LaneHeader* h = (LaneHeader*)lane;
  const i64 inRows = (i64)(p.inputBytes / (u64)p.rowBytes);
  const i64 outRows = (i64)(p.outputBytes / (u64)p.rowBytes);

  if (tid == 0) {
    sSeq = ld_volatile(&h->seq) + 1;
    sAbort = 0;
    sMismatch = sNegative = sInOver = sOutOver = A2AV_NONE;
  }
  // The peers' outputs too, though needed only after validation: read there, the table cost a
  // round trip of its own on every call.
  for (int i = tid; i < W; i += nt) {
    peerLane[i] = p.padPeers[i] + p.laneOffset;
    splits[i] = p.inSplits[i];
    dstAt[i] = (i64)p.outPeers[i];
  }
  __syncthreads();
  PROBE_CLOCK(2);
  const i64 seq = sSeq;
  const int parity = (int)(seq & 1);

  // 1. publish: one LL packet per value and peer, written straight into the peers' pads (no fence,
  // no flag to raise after it: each packet carries its own). Two parities suffice: a rank writes
  // call seq + 2 into a peer's slot of parity seq & 1 only after completing call seq + 1, which
  // needs that peer's done signals of seq + 1, sent after the peer has read all its payloads of seq.
  const u32 flag = ll_flag(seq);
  if (blockIdx.x == 0) {
    for (int i = tid; i < W * PW; i += nt) {
      const int peer = i / PW, j = i - peer * PW;
      const i64 v = j >= A2AV_PAYLOAD_HEADER ? splits[j - A2AV_PAYLOAD_HEADER]
                    : j == 0                ? inRows
                    : j == 1                ? outRows
                    : j == 2                ? p.rowBytes
                    : j == 3                ? p.outId
                                            : (i64)(p.gridCopy ? 1 : gridDim.x);  // A2AV_PAY_SIGNALS
      ll_store(lane_payload(peerLane[peer], W, parity, me) + j, v, flag);
    }
  }

  // 2. every rank's payload, each packet waited for by its own thread
  {
    const u64 deadline = global_timer_ns() + (u64)p.timeoutNs;
    for (int i = tid; i < W * PW; i += nt) {
      const int q = i / PW;
      if (!ll_wait(lane_payload(lane, W, parity, q) + (i - q * PW), flag, deadline, &pay[i])) {
        record_abort(h, StatusRecord{A2AV_ERR_TIMEOUT, me, q, seq, pay[i], me, seq, A2AV_WAIT_ARRIVAL});
        sAbort = 1;
      }
    }
  }
  __syncthreads();
  PROBE_CLOCK(3);
  if (sAbort) return;  // the host marks this communicator aborted
  if (p.gridCopy) pdl_release();

  // Validation, and this rank's offsets with it, as sums across warps: one thread walking a
  // row of W values cost about 130 SM cycles a value (a chain of dependent 64-bit steps; a
  // shared-memory load alone is 34), at W = 8 most of a small call (docs/perf.md). Warp task
  // t < W sums rank t's row (what it sends), its column (what it receives) and the part of its
  // column from the ranks before this one (where this rank's rows land in t's output), the three
  // sums side by side; task W places this rank's sends in its input. Each category keeps its
  // first offender (lowest index), then priority decides; a negative split outranks an overflow,
  // so totals of the splits clamped at 0 decide overflow. The offsets are garbage in a refused
  // call and unused.
  const i64* pay0 = pay;
  const i64* mine = pay + me * PW + A2AV_PAYLOAD_HEADER;
  const int lid = tid & 31;
  for (int t = tid >> 5; t <= W; t += nt >> 5) {
    if (t < W) {
      const i64* pt = pay + t * PW;
      i64 sent = 0, got = 0, before = 0;
      for (int k = lid; k < W; k += 32) {
        const i64 out = pt[A2AV_PAYLOAD_HEADER + k], in = pay[k * PW + A2AV_PAYLOAD_HEADER + t];
        if (out < 0) atomicMin(&sNegative, t * W + k);
        sent = sat_add(sent, clamp0(out));
        got = sat_add(got, clamp0(in));
        if (k < me) before = sat_add(before, clamp0(in));
      }
      warp_sum3_sat(sent, got, before);
      if (lid == 0) {
        if (pt[2] != pay0[2] || pt[3] != pay0[3]) atomicMin(&sMismatch, t);
        if (sent > pt[0]) atomicMin(&sInOver, t);
        if (got > pt[1]) atomicMin(&sOutOver, t);
        sendLen[t] = mine[t] * p.rowBytes;
        dstAt[t] += before * p.rowBytes;
      }
    } else {
      warp_scan_each(W, [&](int r) { return clamp0(mine[r]); }, [&](int r, i64 before) { srcOff[r] = before * p.rowBytes; });
    }
  }
  PROBE_CLOCK(4);
  __syncthreads();
  PROBE_CLOCK(5);
  const bool bad = sMismatch != A2AV_NONE || sNegative != A2AV_NONE || sInOver != A2AV_NONE || sOutOver != A2AV_NONE;
  if (bad && blockIdx.x == 0 && tid == 0) {
    StatusRecord rec{A2AV_OK, 0, 0, 0, 0, me, seq, -1};
    if (sMismatch != A2AV_NONE) {
      const i64* pq = pay + sMismatch * PW;
      const bool rows = pq[2] != pay0[2];
      rec.code = A2AV_ERR_MISMATCH;
      rec.rank = sMismatch;
      rec.needed = pq[rows ? 2 : 3];
      rec.available = pay0[rows ? 2 : 3];
      rec.expert = rows ? A2AV_FIELD_ROW_BYTES : A2AV_FIELD_OUTPUT;
    } else if (sNegative != A2AV_NONE) {
      const int q = sNegative / W, r = sNegative % W;
      rec.code = A2AV_ERR_NEGATIVE;
      rec.rank = q;
      rec.peer = r;
      rec.needed = pay[q * PW + A2AV_PAYLOAD_HEADER + r];
    } else if (sInOver != A2AV_NONE) {
      const i64* pq = pay + sInOver * PW;
      const i64 cap = pq[0];
      i64 sum = 0, total = 0;
      int peer = -1;
      for (int r = 0; r < W; ++r) {
        const i64 s = pq[A2AV_PAYLOAD_HEADER + r];
        total = sat_add(total, s);
        if (peer < 0 && s > cap - sum) peer = r;
        else if (peer < 0) sum += s;
      }
      rec = StatusRecord{A2AV_ERR_INPUT_OVERFLOW, sInOver, peer, total, cap, me, seq, -1};
    } else {
      const int r = sOutOver;
      const i64 cap = pay[r * PW + 1];
      i64 sum = 0, total = 0;
      int peer = -1;
      for (int q = 0; q < W; ++q) {
        const i64 s = pay[q * PW + A2AV_PAYLOAD_HEADER + r];
        total = sat_add(total, s);
        if (peer < 0 && s > cap - sum) peer = q;
        else if (peer < 0) sum += s;
      }
      rec = StatusRecord{A2AV_ERR_OUTPUT_OVERFLOW, r, peer, total, cap, me, seq, -1};
    }
    record_refusal(h, rec);
  }

  // 3. data (skipped on any validation failure: nothing is written)
  // Aligned: every segment starts and ends on 16 bytes at both ends, so a tile's words can be
  // loaded together whatever segments they fall in.
  bool aligned = (p.rowBytes & 15) == 0 && ((u64)p.input & 15) == 0;
  if (!bad) {
    for (int r = tid; r < W; r += nt)
      if (dstAt[r] & 15) aligned = false;
    if (blockIdx.x == 0 && tid < 32) {
      // What this rank receives from each source, and where it starts (running sums by warp 0).
      warp_scan_each(W, [&](int q) { return pay[q * PW + A2AV_PAYLOAD_HEADER + me]; }, [&](int q, i64 before) {
        p.outSplitsOffsets[q] = pay[q * PW + A2AV_PAYLOAD_HEADER + me];
        p.outSplitsOffsets[W + q] = before;
      });
    }
    aligned = __syncthreads_and(aligned);
  }
  PROBE_CLOCK(6);
  if (p.gridCopy) {
    // Leave the send plan for a2av_copy: nothing to send when validation failed.
    if (blockIdx.x == 0) {
      i64* plan = lane_send_plan(lane, W);
      for (int r = tid; r < W; r += nt) {
        plan[3 * r] = bad ? 0 : srcOff[r];
        plan[3 * r + 1] = bad ? 0 : dstAt[r];
        plan[3 * r + 2] = bad ? 0 : sendLen[r];
      }
    }
    PROBE_STAMP(me, 1);
    return;
  }
  if (!bad && A2AV_COPYING) {
    // Blocks sweep the send bytes together, tile by tile (block b takes tiles b, b+B, ...), so at
    // any moment a rank reads one contiguous window and writes few: DRAM pages stay open. Giving
    // each block one long contiguous slice instead was measured 25-35% slower at 256 MiB.
    i64 total = srcOff[W - 1] + sendLen[W - 1];
    const i64 tile = (i64)nt * 16 * A2AV_COPY_UNROLL;
    int r = 0;
    i64 start = (i64)blockIdx.x * tile, step = (i64)gridDim.x * tile;
    // Across GPUs (params.splitByPeer, large calls) the shared sweep would copy the local share, then the peer's:
    // one link direction busy at a time. Each destination gets its own blocks instead, in
    // proportion to its bytes, so every segment is written at once.
    __shared__ int sSplit, sSeg;
    __shared__ i64 sFirst, sQuota;
    if (tid == 0) sSplit = split_wanted(p.splitByPeer, total) && total > 0 && split_by_peer(W, sendLen, total, gridDim.x, blockIdx.x, &sSeg, &sFirst, &sQuota);
    __syncthreads();
    if (sSplit) {
      // This block's group sweeps segment sSeg alone: its tiles from the segment's start.
      r = sSeg;
      start = srcOff[r] + ((i64)blockIdx.x - sFirst) * tile;
      step = sQuota * tile;
      total = srcOff[r] + sendLen[r];
    }
    for (i64 lo = start; lo < total; lo += step) {
      const i64 hi = lo + tile < total ? lo + tile : total;
      while (srcOff[r] + sendLen[r] <= lo) ++r;  // segments ascend, so r only moves forward
      if (aligned) {
        // All loads of the tile first, then all stores: one memory round trip per tile even when
        // the tile spans many peers (small calls: 8 peers in a 32 KiB tile).
        uint4 v[A2AV_COPY_UNROLL];
        u8* d[A2AV_COPY_UNROLL];
        int k = r;
#pragma unroll
        for (int u = 0; u < A2AV_COPY_UNROLL; ++u) {
          const i64 x = lo + ((i64)u * nt + tid) * 16;
          d[u] = nullptr;
          if (x < total) {
            while (srcOff[k] + sendLen[k] <= x) ++k;
            d[u] = (u8*)dstAt[k] + (x - srcOff[k]);
            v[u] = ld_stream((const uint4*)(p.input + x));
          }
        }
#pragma unroll
        for (int u = 0; u < A2AV_COPY_UNROLL; ++u)
          if (d[u]) *(uint4*)d[u] = v[u];
        continue;
      }
      for (int k = r; k < W && srcOff[k] < hi; ++k) {
        const i64 a = srcOff[k] > lo ? srcOff[k] : lo;
        const i64 segEnd = srcOff[k] + sendLen[k];
        const i64 b = segEnd < hi ? segEnd : hi;
        if (a < b) copy_bytes((u8*)dstAt[k] + (a - srcOff[k]), p.input + a, (u64)(b - a));
      }
    }
  }

  // 4. completion: every block tells every peer it has finished (a count, so no block has to find
  // out it is the last), and block 0 waits until every peer's blocks have told this rank.
  __syncthreads();
  PROBE_CLOCK(7);
  for (int peer = tid; peer < W; peer += nt) red_release_add_peer(lane_done(peerLane[peer], W) + me, 1);
  if (blockIdx.x != 0) return;
  const bool ok = await_done(h, lane, W, me, seq, p.timeoutNs, [&](int q) { return pay[q * PW + A2AV_PAY_SIGNALS]; });
  if (!ok) sAbort = 1;
  __syncthreads();
  if (tid == 0 && !sAbort) st_volatile(&h->seq, seq);
  PROBE_CLOCK(8);
  PROBE_STAMP(me, 1);
#ifdef A2AV_PROBE_CLOCKS
  if (PROBE_CLOCKS_DUE(a2av_1d_launches)) {
    printf("a2av_1d W=%d rank=%d blocks=%d grid=%d cycles: pdl-wait %lld splits %lld payloads %lld checks %lld (own tasks %lld, the rest %lld) offsets %lld copy %lld completion %lld\n", W, me,
           (int)gridDim.x, (int)p.gridCopy, PROBE_CYCLES(1), PROBE_CYCLES(2), PROBE_CYCLES(3), PROBE_CYCLES(4) + PROBE_CYCLES(5), PROBE_CYCLES(4), PROBE_CYCLES(5),
           PROBE_CYCLES(6), PROBE_CYCLES(7), PROBE_CYCLES(8));
#ifdef A2AV_PROBE_SMEM_CHAIN
    // Probe: sixteen shared-memory loads, each address from the last (the payload's values are
    // small, so the shift gives 0): the latency one link of the checks' chains pays.
    int at = 0;
    const long long c0 = clock64();
    for (int k = 0; k < 16; ++k) at = (int)((u64)pay[at] >> 62) + (k & 1);
    const long long c1 = clock64();
    printf("a2av_1d W=%d rank=%d shared-load chain: %lld cycles for 16 (%d)\n", W, me, c1 - c0, at);
#endif
  }
#endif
}

// Grid mode, step 3: block b copies bytes [b * slice, (b + 1) * slice) of this rank's send bytes, and
// the slices gridDim.x further on when the grid was sized from a low hint. Such a block lives about
// one memory round trip and moves 16 bytes a thread, so every instruction and register counts:
//   - it reads its source word before the plan arrives (the send bytes start at input offset 0
//     whatever the plan), so the two round trips overlap;
//   - the usual slice (inside one peer's segment, 16-byte aligned on both sides) takes a short path;
//     everything else goes to a separate, non-inlined function whose registers the short path does
//     not pay for (a2av_copy runs at full occupancy: 32 registers).
// Measured alone on an H200 (scripts/probe/copy-ceiling.cu) this shape reaches 0.98 of the copy
// engine, against 0.92 for a resident grid sweeping the range.
__device__ __noinline__ void copy_slices(const u8* input, const int W, const i64* plan, i64 lo, const i64 total) {
  const i64 slice = (i64)blockDim.x * 16;
  for (; lo < total; lo += (i64)gridDim.x * slice) {
    const i64 hi = lo + slice < total ? lo + slice : total;
    for (int k = 0; k < W && plan[3 * k] < hi; ++k) {
      const i64 ks = plan[3 * k], ke = ks + plan[3 * k + 2];
      const i64 x = ks > lo ? ks : lo, y = ke < hi ? ke : hi;
      if (x < y) copy_bytes<1>((u8*)plan[3 * k + 1] + (x - ks), input + x, (u64)(y - x));
    }
  }
}

extern "C" __global__ void __launch_bounds__(A2AV_MAX_THREADS, 2) a2av_copy(const A2avParams p) {
  extern __shared__ i64 smem[];
  i64* plan = smem;  // [W][3]: source offset, destination address, bytes
  const int W = p.world, tid = threadIdx.x;
  const i64 slice = (i64)blockDim.x * 16;
  const i64 first = (i64)blockIdx.x * slice;
  const u64 mine = (u64)first + 16u * tid;
  const bool early = ((u64)p.input & 15) == 0 && mine + 16 <= p.inputBytes;
  uint4 word;
  if (early) word = ld_stream((const uint4*)(p.input + mine));
  pdl_wait();
  pdl_release();
  PROBE_STAMP(p.rank, 3);
  const u8* lane = p.pad + p.laneOffset;
  __shared__ int sAbort;
  // Every block reads the same few words: through the read-only path, so each SM's L1 serves them
  // instead of one L2 line taking a request from every block. a2av_1d wrote them before this grid.
  if (tid == 0) sAbort = __ldg(&((const LaneHeader*)lane)->abort.code) != A2AV_OK;  // no plan was left
  const i64* src = lane_send_plan((u8*)lane, W);
  for (int i = tid; i < 3 * W; i += blockDim.x) plan[i] = __ldg(src + i);
  __syncthreads();
  if (sAbort || !A2AV_COPYING) return;
  const i64 total = plan[3 * (W - 1)] + plan[3 * (W - 1) + 2];
  if (first >= total) return;
  int a = 0, b = W - 1;  // the segment holding byte `first` (segments ascend)
  while (a < b) {
    const int m = (a + b) >> 1;
    if (plan[3 * m] + plan[3 * m + 2] > first) b = m;
    else a = m + 1;
  }
  const i64 so = plan[3 * a];
  u8* dst = (u8*)plan[3 * a + 1];
  if (early && first + slice <= so + plan[3 * a + 2] && ((u64)(dst - so) & 15) == 0) {
    *(uint4*)(dst + (mine - so)) = word;
    const i64 next = first + (i64)gridDim.x * slice;
    if (next < total) copy_slices(p.input, W, plan, next, total);
    return;
  }
  copy_slices(p.input, W, plan, first, total);
}

// Grid mode, step 4: one block signals every peer and waits for their signals.
extern "C" __global__ void __launch_bounds__(A2AV_MAX_THREADS) a2av_done(const A2avParams p) {
  pdl_wait();
  pdl_release();
  PROBE_STAMP(p.rank, 4);
  u8* lane = p.pad + p.laneOffset;
  // a2av_1d of this call has waited for every packet's flag (it finished before this kernel:
  // pdl_wait), and no peer can overwrite the slot before this call completes (see the
  // parities in a2av_1d), so each peer's announced count can be read here without its flag.
  complete_call(CallLane{p.pad, p.padPeers, p.laneOffset, p.world, p.rank, p.timeoutNs}, [&](int q, i64 seq) {
    return ll_value(ll_load(lane_payload(lane, p.world, (int)(seq & 1), q) + A2AV_PAY_SIGNALS));
  });
  PROBE_STAMP(p.rank, 5);
}
