// The MoE exchange (dispatch, combine) and exchange plans, with the splits kept on the device.
// src/collectives/exchange-rules.ts states the rules; these kernels reach the same verdict and
// layout from each rank's share of the split matrix, since with W ranks of E experts no rank can
// hold all of it (72 x 72 x 256 counts). Per call, one block:
//   x_exchange  round 1: every sender sends each receiver its counts for the receiver's experts
//               and its own verdict (negative split, input overrun: only it sees its whole row);
//               each receiver lays out its output and adds what only it sees (its output overrun,
//               a mismatch with rank 0's call); round 2: each receiver answers every sender with
//               its verdict and where the sender's chunks land. After round 2 every rank holds
//               every receiver's verdict, which folds in every sender's: all take the same one
//               (the least key: kernels/exchange.cuh), so all move data or none does.
//   x_check     a plan's move: every rank's row size and output buffer, checked against rank 0's
//               in one round, and the plan's own verdict.
//   x_copy      the data, along the plan left by x_exchange (a grid; does nothing when gated);
//               x_copy_slices the same as a grid of short-lived blocks, for ranks on one GPU.
//   x_done      completion: one signal to every peer, then wait for theirs (as a2av_done).
// A call is x_exchange + x_copy + x_done; building a plan x_exchange + x_done; a move
// x_check + x_copy + x_done. Every wait is bounded (the lane's abort record, as in a2av.cu).
#include "exchange.cuh"
#include "probe-clocks.cuh"

extern "C" __global__ void __launch_bounds__(1024) x_exchange(const XParams p) {
  __shared__ XBlockState st;
  const int W = p.world, E = p.experts, me = p.rank, tid = threadIdx.x, nt = blockDim.x;
  u8* lane = p.pad + p.laneOffset;
  LaneHeader* h = (LaneHeader*)lane;
  i64* const gate = p.scratch;
  i64* const xin = p.scratch + 8;
  i64* const starts = xin + (i64)W * A2AV_X1_WORDS;
  i64* const answers = starts + (i64)W * A2AV_MAX_EXPERTS;
  const PlanArrays plan = plan_arrays(p.plan, W);
  const i64 N = (i64)W * E;
  if (!x_begin(st, h, gate)) return;
  const i64 seq = st.seq;
  const int parity = (int)(seq & 1);
  const u32 flag = ll_flag(seq);

  // My row: counts, source rows, running sums; my own verdict (negative split, input overrun).
  for (i64 i = tid; i < N; i += nt) {
    const int r = (int)(i / E), e = (int)(i % E);
    plan.rows[i] = p.kind == X_COMBINE ? p.splits[(i64)e * W + r] : p.splits[i];
    if (p.kind == X_COMBINE) plan.src[i] = p.splits[N + (i64)e * W + r];
  }
  __syncthreads();
  const i64 sent = block_scan_sat(plan.rows, plan.cum, N, st.scan);
  for (i64 i = tid; i < N; i += nt) {
    const i64 c = plan.rows[i];
    if (c < 0) atomicMin(&st.at, (unsigned long long)i);
    if (p.kind != X_COMBINE) plan.src[i] = plan.cum[i];
  }
  __syncthreads();
  if (st.at != X_NONE) {
    if (tid == 0) {
      const i64 i = (i64)st.at;
      st.mine = XVerdict{x_key(X_PRIO_NEGATIVE, (i64)me * N + i), me, (int)(i / E), (int)(i % E), plan.rows[i], 0};
    }
  } else {
    for (i64 i = tid; i < N; i += nt) {
      const i64 c = plan.rows[i], s = plan.src[i];
      const bool out = p.kind == X_COMBINE ? (s < 0 || sat_add(s, c) > p.inRows) : c > p.inRows - plan.cum[i];
      if (out) atomicMin(&st.at, (unsigned long long)i);
    }
    __syncthreads();
    if (tid == 0 && st.at != X_NONE) {
      const i64 i = (i64)st.at, s = plan.src[i];
      const i64 needed = p.kind == X_COMBINE ? (s < 0 ? s : sat_add(s, plan.rows[i])) : sent;
      st.mine = XVerdict{x_key(X_PRIO_INPUT, (i64)me * N + i), me, (int)(i / E), (int)(i % E), needed, p.inRows};
    }
  }
  __syncthreads();

  // Round 1: to every receiver, my call, my verdict, my counts for its experts.
  for (i64 k = tid; k < (i64)W * (A2AV_X1_HEADER + E); k += nt) {
    const int r = (int)(k / (A2AV_X1_HEADER + E)), j = (int)(k % (A2AV_X1_HEADER + E));
    i64 v;
    if (j >= A2AV_X1_HEADER) v = plan.rows[(i64)r * E + (j - A2AV_X1_HEADER)];
    else if (j < 5) v = j == 0 ? p.kind : j == 1 ? p.rowBytes : j == 2 ? p.outId : j == 3 ? E : p.align;
    else v = verdict_word(st.mine, j - 5);
    ll_store(lane_x1(p.padPeers[r] + p.laneOffset, W, parity, me) + j, v, flag);
  }
  const XWait wait{h, flag, global_timer_ns() + (u64)p.timeoutNs, me, W, seq};
  // Headers first: a sender's count of experts says how many packets it sent.
  const auto round1 = [&](int src) { return lane_x1(lane, W, parity, src); };
  receive(st, wait, round1, XInbox{xin, A2AV_X1_WORDS, 0, A2AV_X1_HEADER, A2AV_WAIT_ROUND1});
  if (st.abort) return;
  receive(st, wait, round1, XInbox{xin, A2AV_X1_WORDS, A2AV_X1_HEADER, -1, A2AV_WAIT_ROUND1});
  if (st.abort) return;

  // As a receiver: rank 0's call against everyone's, every sender's verdict, my own layout.
  receiver_verdict(st, p, xin, starts);

  // Round 2: to every sender, my verdict and where its chunks land in my output.
  for (i64 k = tid; k < (i64)W * (A2AV_X2_HEADER + E); k += nt) {
    const int s = (int)(k / (A2AV_X2_HEADER + E)), j = (int)(k % (A2AV_X2_HEADER + E));
    const i64 v = j < A2AV_X2_HEADER ? verdict_word(st.mine, j) : starts[(i64)s * A2AV_MAX_EXPERTS + (j - A2AV_X2_HEADER)];
    ll_store(lane_x2(p.padPeers[s] + p.laneOffset, W, parity, me) + j, v, flag);
  }
  // Every receiver's verdict; then, if all accept, where my chunks land.
  const auto round2 = [&](int r) { return lane_x2(lane, W, parity, r); };
  receive(st, wait, round2, XInbox{answers, A2AV_X2_WORDS, 0, A2AV_X2_HEADER, A2AV_WAIT_ROUND2});
  if (st.abort) return;
  for (int r = tid; r < W; r += nt) atomicMin(&st.fin, (unsigned long long)answers[(i64)r * A2AV_X2_WORDS]);
  __syncthreads();
  for (int r = tid; r < W; r += nt)
    if ((unsigned long long)answers[(i64)r * A2AV_X2_WORDS] == st.fin) st.all = read_verdict(answers + (i64)r * A2AV_X2_WORDS);
  __syncthreads();
  if (st.all.key != X_NONE) {
    if (tid == 0) refuse(XCall{p, h, lane, gate, seq}, st.all, true);
    return;
  }
  receive(st, wait, round2, XInbox{answers, A2AV_X2_WORDS, A2AV_X2_HEADER, A2AV_X2_HEADER + E, A2AV_WAIT_ROUND2});
  if (st.abort) return;
  for (i64 i = tid; i < N; i += nt) plan.dst[i] = answers[(i / E) * A2AV_X2_WORDS + A2AV_X2_HEADER + (i % E)];
  accept(p, xin, starts, gate, sent);
}

// A plan's move: one round of (row size, output buffer) against rank 0's; the plan's own verdict.
extern "C" __global__ void __launch_bounds__(1024) x_check(const XParams p) {
  __shared__ XBlockState st;
  const int W = p.world, me = p.rank, tid = threadIdx.x, nt = blockDim.x;
  u8* lane = p.pad + p.laneOffset;
  LaneHeader* h = (LaneHeader*)lane;
  i64* const gate = p.scratch;
  i64* const got = p.scratch + 8;
  if (!x_begin(st, h, gate)) return;
  const i64 seq = st.seq;
  const int parity = (int)(seq & 1);
  const u32 flag = ll_flag(seq);
  for (int k = tid; k < 2 * W; k += nt)
    ll_store(lane_mv(p.padPeers[k / 2] + p.laneOffset, W, parity, me) + (k & 1), (k & 1) ? p.outId : p.rowBytes, flag);
  const XWait wait{h, flag, global_timer_ns() + (u64)p.timeoutNs, me, W, seq};
  receive(st, wait, [&](int src) { return lane_mv(lane, W, parity, src); }, XInbox{got, 2, 0, 2, A2AV_WAIT_MOVE});
  if (st.abort) return;
  for (int q = tid; q < W; q += nt)
    if (got[2 * q] != got[0] || got[2 * q + 1] != got[1]) atomicMin(&st.at, (unsigned long long)q);
  __syncthreads();
  if (tid != 0) return;
  if (p.plan[0] != A2AV_OK) {
    refuse(XCall{p, h, lane, gate, seq}, read_plan_verdict(p.plan), false);
  } else if (st.at != X_NONE) {
    const int q = (int)st.at;
    const bool rows = got[2 * q] != got[0];
    refuse(XCall{p, h, lane, gate, seq}, XVerdict{x_key(X_PRIO_MISMATCH, q), q, 0, -1, got[2 * q + (rows ? 0 : 1)], got[rows ? 0 : 1]}, false);
  } else {
    *gate = 0;
  }
}

// The data: block b takes tiles b, b + B, ... of this rank's send bytes, in plan order;
// x_copy_gather reads the rows through p.gatherRows (exchange.cuh copy_tile says why apart).
template <bool Gather>
__device__ __forceinline__ void x_copy_run(const XParams& p) {
  const u8* lane = p.pad + p.laneOffset;
  __shared__ int sSkip;
  if (threadIdx.x == 0) sSkip = ld_volatile(p.scratch) != 0 || ld_volatile(&((const LaneHeader*)lane)->abort.code) != A2AV_OK;
  __syncthreads();
  if (sSkip) return;
  const int W = p.world, E = (int)p.plan[9];
  const PlanArrays plan = plan_arrays(p.plan, W);
  const XChunks c{plan.rows, plan.src, plan.dst, plan.cum, p.outPeers, p.input, (i64)W * E, p.rowBytes, E};
  const bool aligned = chunks_aligned(p.outPeers, W, p.input, p.rowBytes);
  const i64 total = p.plan[8] * p.rowBytes;
#ifndef A2AV_PROBE_NO_COPY
  // Where each peer's bytes start, staged once by the block when it splits (W <= 160 < the array).
  __shared__ i64 sStart[XS_WINDOW + 1];
  const bool split = split_wanted(p.splitByPeer, total) && W <= XS_WINDOW;
  for (int k = threadIdx.x; split && k <= W; k += blockDim.x) sStart[k] = k >= W ? total : plan.cum[(i64)k * E] * p.rowBytes;
  __syncthreads();
  copy_send_bytes<Gather>(c, total, aligned, split ? p.splitByPeer : A2AV_SPLIT_NEVER, [&](int k) { return sStart[k]; }, blockIdx.x, p.gatherRows);
#endif
}
extern "C" __global__ void __launch_bounds__(A2AV_MAX_THREADS) x_copy(const XParams p) { x_copy_run<false>(p); }
extern "C" __global__ void __launch_bounds__(A2AV_MAX_THREADS) x_copy_gather(const XParams p) { x_copy_run<true>(p); }

// Grid mode for calls whose ranks share one GPU (moe.ts, A2AV_MOE_GRID): x_slice_index, then
// x_copy_slices. The copy is a2av_copy's shape, whose grid of short-lived blocks (256 threads, a
// 16-byte word each) reaches 0.98 of the copy engine on one GPU where resident sweeps stay at
// 0.85-0.92, provided a block lives about one memory round trip. A MoE call's send bytes run
// through up to W * E chunks, too many for every block to search (measured at W = 8 on one H200,
// 256 MiB: a lookup by every block, in shared memory, held the copy to 0.86-0.87 of the 1-D call).
// So x_slice_index writes where each span of the send bytes goes once (exchange.cuh
// xs_chunk_entries), and a block of x_copy_slices reads its spans' entries in the same round as
// its source words where it can (a dispatch's send bytes are its input in order, so those are read
// before the plan), then stores. A span whose bytes run across chunks (about one a chunk) takes the
// lookup, as does a span past the index.

#ifdef A2AV_PROBE_XS_LOOKUPS  // a probe's count of slices that took the lookup, printed by x_slice_index
#ifndef __CUDACC_RTC__
#include <cstdio>
#endif
__device__ unsigned long long xsLookups;
#endif

// x_copy_slices' index for this call: a warp a chunk (exchange.cuh xs_chunk_entries), and the
// bytes to copy (-1: none).
extern "C" __global__ void __launch_bounds__(XS_THREADS) x_slice_index(const XParams p) {
  __shared__ i64 sTotal;
  const int W = p.world;
  const u8* lane = p.pad + p.laneOffset;
  // Launched early (moe.ts): the exchange before has finished, so every rank's is past its waits
  // and x_copy_slices' blocks may take slots beside ours and read their first words.
  pdl_wait();
  pdl_release();
  if (threadIdx.x == 0) {
    const bool skip = ld_volatile(p.scratch) != 0 || ld_volatile(&((const LaneHeader*)lane)->abort.code) != A2AV_OK;
    sTotal = skip ? -1 : p.plan[8] * p.rowBytes;
  }
  __syncthreads();
  const i64 total = sTotal;
  i64* index = xs_index(p.scratch, W);
  if (blockIdx.x == 0 && threadIdx.x == 0) {
    index[0] = total;
#ifdef A2AV_PROBE_XS_LOOKUPS
    const unsigned long long looked = atomicExch(&xsLookups, 0ull);
    if (looked != 0) printf("x_copy_slices W=%d rank=%d: %llu slices looked up since the last index\n", W, p.rank, looked);
#endif
  }
  if (total <= 0) return;
  const int shift = p.sliceSpanLog2;
  const i64 n = (i64)W * p.experts, spans = (total + ((i64)1 << shift) - 1) >> shift;
  const i64 entries = spans < XS_INDEX_ENTRIES ? spans : XS_INDEX_ENTRIES;
  const PlanArrays plan = plan_arrays(p.plan, W);
  longlong2* out = xs_entries(index);
  const int lane32 = threadIdx.x & 31;
  for (i64 k = ((i64)blockIdx.x * blockDim.x + threadIdx.x) >> 5; k < n; k += ((i64)gridDim.x * blockDim.x) >> 5)
    xs_chunk_entries(plan, k, p.experts, p.rowBytes, total, shift, entries, p.outPeers, p.input, lane32, 32,
                     [&](i64 i, XsEntry e) { out[i] = make_longlong2(e.dst, e.src); });
}

// A span that runs across chunks (or lies past the index, or is unaligned): each thread finds its
// words' chunks. Where the plan has at most XS_WINDOW chunks the block reads them all at once
// into shared memory; else every stride-th running sum first, then XS_WINDOW chunks from the last
// that starts at or before the slice (exchange.cuh: xs_base, xs_find; a word past the window takes
// x_chunk_at). Kept out of line: x_copy_slices' usual path does not pay its registers.
__device__ __noinline__ void xs_copy_lookup(const u8* input, u8* const* outPeers, i64* planWords, int W, int E, i64 rb, i64 lo, i64 hi) {
  const int tid = threadIdx.x, nt = blockDim.x;
  __shared__ i64 sBase;
  __shared__ u8* sOut[XS_WINDOW];
  __shared__ i64 sCum[XS_WINDOW + 1], sSrc[XS_WINDOW], sDst[XS_WINDOW], sSample[XS_WINDOW];
  const PlanArrays plan = plan_arrays(planWords, W);
  const i64 n = (i64)W * E;
  const bool whole = n <= XS_WINDOW, tableShared = W <= XS_WINDOW;
  const i64 stride = xs_stride(n);
  // One round of independent loads.
  bool ok = (rb & 15) == 0 && ((u64)input & 15) == 0;
  for (int q = tid; q < W; q += nt) {
    u8* out = outPeers[q];
    ok = ok && ((u64)out & 15) == 0;
    if (tableShared) sOut[q] = out;
  }
  if (whole) {
    for (int i = tid; i < n; i += nt) {
      sCum[i] = __ldg(plan.cum + i);
      sSrc[i] = __ldg(plan.src + i);
      sDst[i] = __ldg(plan.dst + i);
    }
    if (tid == 0) sCum[n] = xs_sentinel(rb);
  } else {
    for (i64 j = tid; j * stride < n; j += nt) sSample[j] = __ldg(plan.cum + j * stride);
  }
  const bool aligned = __syncthreads_and(ok);
  if (!whole) {
    // The second round: the window of chunks from the slice's sample on.
    if (tid == 0) sBase = xs_base(sSample, n, rb, lo);
    __syncthreads();
    const i64 b = sBase;
    for (int i = tid; i <= XS_WINDOW; i += nt) {
      const i64 k = b + i;
      if (i < XS_WINDOW && k < n) {
        sCum[i] = __ldg(plan.cum + k);
        sSrc[i] = __ldg(plan.src + k);
        sDst[i] = __ldg(plan.dst + k);
      } else if (i == XS_WINDOW || k == n) {
        sCum[i] = k < n ? __ldg(plan.cum + k) : xs_sentinel(rb);
      }
    }
    __syncthreads();
  }
  const i64 base = whole ? 0 : sBase;
  const int count = (int)(whole ? n : (n - base < XS_WINDOW ? n - base : XS_WINDOW));
  // Chunk k's start, source and destination rows: from the window, or the plan past it.
  auto at = [&](i64 y, i64* src, i64* dst) -> i64 {
    const int i = xs_find(sCum, count, rb, y);
    if (i >= 0) {
      *src = sSrc[i];
      *dst = sDst[i];
      return base + i;
    }
    const i64 k = x_chunk_at(plan.cum, n, rb, y);
    *src = __ldg(plan.src + k);
    *dst = __ldg(plan.dst + k);
    return k;
  };
  auto startOf = [&](i64 k) { return k - base >= 0 && k - base < count ? sCum[k - base] : __ldg(plan.cum + k); };
  auto outOf = [&](i64 k) { return tableShared ? sOut[k / E] : outPeers[k / E]; };
  for (i64 x = lo + 16 * (i64)tid; x < hi; x += 16 * (i64)nt) {
    if (!aligned) {
      for (i64 y = x; y < x + 16 && y < hi; ++y) {
        i64 src, dst;
        const i64 k = at(y, &src, &dst);
        const i64 off = y - startOf(k) * rb;
        outOf(k)[dst * rb + off] = input[src * rb + off];
      }
    } else {
      i64 src, dst;
      const i64 k = at(x, &src, &dst);
      const i64 off = x - startOf(k) * rb;
      *(uint4*)(outOf(k) + dst * rb + off) = ld_stream((const uint4*)(input + src * rb + off));
    }
  }
  __syncthreads();  // the shared words are the next span's
}

// The slices of [lo, total) a grid's stride apart, from the index or the lookup: for the slices
// past a block's first (a grid sized from a low hint or a budget) and spans across chunks. Out of
// line, so that x_copy_slices' one-slice path keeps nothing live across a call (no spills).
__device__ __noinline__ void xs_copy_rest(const u8* input, u8* const* outPeers, i64* plan, int W, int E, i64 rb, int shift, const i64* index, i64 lo, i64 total) {
  const i64 slice = (i64)blockDim.x * 16, step = (i64)gridDim.x * slice;
  for (; lo < total; lo += step) {
    const longlong2 e = xs_entry_at(index, lo >> shift);
    if (e.x != XS_STRADDLES) {
      const i64 x = lo + 16 * (i64)threadIdx.x;
      if (x < total) *(uint4*)(e.x + x) = ld_stream((const uint4*)(e.y + x));
    } else {
#ifdef A2AV_PROBE_XS_LOOKUPS
      if (threadIdx.x == 0) atomicAdd(&xsLookups, 1ull);
#endif
      xs_copy_lookup(input, outPeers, plan, W, E, rb, lo, lo + slice < total ? lo + slice : total);
    }
  }
}

// Block b copies bytes [b * slice, (b + 1) * slice) of this rank's send bytes, a 16-byte word a
// thread, and the slice a grid's stride on in the same round when there is one (moe.ts launches
// a block for two slices: a combine's source is known only from the index, so its blocks live two
// memory round trips, and two words a thread keep twice the bytes in flight); slices further on
// (a grid sized from a low hint or a budget) one after another.
// The host launches it for 16-byte rows and an aligned input only (x_copy takes the others).
extern "C" __global__ void __launch_bounds__(XS_THREADS, 8) x_copy_slices(const XParams p) {
  const int tid = threadIdx.x;
  const i64 slice = (i64)blockDim.x * 16, step = (i64)gridDim.x * slice;
  const i64 first = (i64)blockIdx.x * slice, mine = first + 16 * (i64)tid, mine2 = mine + step;
  // A dispatch's send bytes are its input in order: its words can be read before the index, up to
  // the bytes the grid was sized for (a larger input may hold far more than is sent).
  const i64 readable = p.inRows * p.rowBytes < p.gridBytes ? p.inRows * p.rowBytes : p.gridBytes;
  const bool inOrder = p.kind == X_DISPATCH && ((u64)p.input & 15) == 0;
  const bool early = inOrder && mine + 16 <= readable, early2 = inOrder && mine2 + 16 <= readable;
  uint4 word, word2;
  if (early) word = ld_stream((const uint4*)(p.input + mine));
  if (early2) word2 = ld_stream((const uint4*)(p.input + mine2));
  pdl_wait();     // x_slice_index has finished
  pdl_release();  // x_done_open may wait in a slot beside us
  const i64* index = xs_index(p.scratch, p.world);
  // Written by x_slice_index, the kernel before this one: the read-only path serves every block.
  const int shift = p.sliceSpanLog2;
  const i64 total = __ldg(index);
  const longlong2 e = xs_entry_at(index, first >> shift), e2 = xs_entry_at(index, (first + step) >> shift);
#ifndef A2AV_PROBE_NO_COPY
  if (first >= total) return;
  // Both slices from the index in one round, or the first alone, or the lookup from the first.
  const bool one = e.x != XS_STRADDLES, two = one && first + step < total && e2.x != XS_STRADDLES;
  if (two) {
    const uint4 w = early ? word : ld_stream((const uint4*)(e.y + mine));
    const uint4 w2 = mine2 >= total ? w : early2 ? word2 : ld_stream((const uint4*)(e2.y + mine2));
    *(uint4*)(e.x + mine) = w;  // first + slice <= first + step < total
    if (mine2 < total) *(uint4*)(e2.x + mine2) = w2;
  } else if (one && mine < total) {
    *(uint4*)(e.x + mine) = early ? word : ld_stream((const uint4*)(e.y + mine));
  }
  const i64 next = two ? first + 2 * step : one ? first + step : first;
  if (next < total) xs_copy_rest(p.input, p.outPeers, p.plan, p.world, p.experts, p.rowBytes, shift, index, next, total);
#endif
}

// Completion, as a2av_done: every rank sends each peer one signal per call.
__device__ __forceinline__ void x_complete(const XParams& p) {
  complete_call(CallLane{p.pad, p.padPeers, p.laneOffset, p.world, p.rank, p.timeoutNs}, [](int, i64) { return (i64)1; });
}
extern "C" __global__ void __launch_bounds__(A2AV_MAX_THREADS) x_done(const XParams p) { x_complete(p); }
// The same, launched early behind x_copy_slices, letting the next call's exchange (one block: the
// host launches nothing larger early behind it, CudaStream.heldOpen) wait in a slot beside it.
extern "C" __global__ void __launch_bounds__(A2AV_MAX_THREADS) x_done_open(const XParams p) {
  pdl_wait();
  pdl_release();
  x_complete(p);
}

// ---------------------------------------------------------------------------------------------
// x_fused: a whole dispatch or combine in one launch, for routings small enough that every rank
// can hold the whole split matrix (x_fused_fits). One round instead of two: every rank sends every
// peer its whole row of counts (round-1 slots, after the same 11 header words as x_exchange), so
// block 0 lays out every receiver's output itself and reaches the rules' verdict with no answer
// round; it leaves this rank's chunks in the lane's scratch and raises a flag there (the call's
// sequence number), for which the other blocks wait (one word each, not the W * W * E packets:
// 8 ranks on one GPU were measured slower with every block polling every packet); then every
// block copies its tiles and signals, as a2av_1d. The grid is sized so that every rank's blocks
// are resident at once (moe.ts), so block 0 always runs.
// The choice depends only on W and E, which every rank shares unless the call is refused for a
// mismatch; so a rank here may meet peers in x_exchange only when the headers differ: it then
// answers them as x_exchange's receivers do (a round-2 verdict) and completes with one signal.
// Shared memory (i64 words): hdr[W][XF_HDR], cnt[W][N] (sender's row), glen[W][G] (per receiver:
// group lengths, then starts), my rows, source rows, running sums, destination rows, where each
// source lands in my output [N each], outAt[W], total[W], output bases[W], companion bases[W],
// then the biased chunks of the payload being copied (start, dst, src [N each]).
#define XF_HDR (A2AV_X1_HEADER + A2AV_XF_EXTRA)
// The header's words: XF_AGREE that every rank's call must match (kind, row bytes, output, E,
// alignment), then the sender's own verdict (verdict_word).
#define XF_AGREE 5
#define XF_VERDICT_WORDS (A2AV_X1_HEADER - XF_AGREE)
__host__ __device__ __forceinline__ bool x_fused_fits(int W, int E) {
  return (i64)W * E <= A2AV_MAX_EXPERTS && (i64)W * W * E <= A2AV_XF_MAX_MATRIX;
}

struct XFusedState {
  i64 seq;
  int abort;
  unsigned long long at, mis, fin;
  XVerdict v;
  i64 scan[33];
};

// Exclusive running sums of a[0, n) in place (saturating), by one warp; returns the total.
__device__ __forceinline__ i64 warp_scan_sat(i64* a, int n) {
  const int lane = threadIdx.x & 31;
  i64 carry = 0;
  for (int base = 0; base < n; base += 32) {
    const int i = base + lane;
    const i64 x = i < n ? a[i] : 0;
    i64 v = x;
    for (int d = 1; d < 32; d <<= 1) {
      const i64 t = __shfl_up_sync(0xffffffffu, v, d);
      if (lane >= d) v = sat_add(v, t);
    }
    const i64 before = __shfl_up_sync(0xffffffffu, v, 1);
    if (i < n) a[i] = sat_add(carry, lane == 0 ? 0 : before);
    carry = sat_add(carry, __shfl_sync(0xffffffffu, v, 31));
  }
  return carry;
}

// Inclusive running sums across a warp (saturating; every lane takes part).
__device__ __forceinline__ i64 warp_incl_scan_sat(i64 v) {
  const int lane = threadIdx.x & 31;
  for (int d = 1; d < 32; d <<= 1) {
    const i64 t = __shfl_up_sync(0xffffffffu, v, d);
    if (lane >= d) v = sat_add(v, t);
  }
  return v;
}

// The warp's total of non-negative values (saturating, so the order does not matter), on every lane.
__device__ __forceinline__ i64 warp_sum_sat(i64 v) {
  for (int d = 16; d > 0; d >>= 1) v = sat_add(v, __shfl_xor_sync(0xffffffffu, v, d));
  return v;
}

// This rank's send rows (`sent` of them) along the chunks c, then the companion payload's (the
// same chunks, its own row size and buffers) where there is one.
template <bool Gather>
__device__ __forceinline__ void copy_payloads(const XParams& p, XChunks c, u8* const* out2, i64 sent, const BiasedChunks& biased) {
  const int W = p.world;
  // One call site: the copy inlined once keeps x_fused within its registers (the companion is
  // never gathered: a null table).
  for (int k = 0; k < (p.input2 ? 2 : 1); ++k) {
    if (k == 1) {
      __syncthreads();  // the shared words (for_each_tile's, the biased chunks) are the block's again
      c.out = out2, c.input = p.input2, c.rb = p.rowBytes2;
    }
    const i64 bytes = sent * c.rb;
    const bool aligned = chunks_aligned(c.out, W, c.input, c.rb);
    const int* gather = k == 0 ? p.gatherRows : nullptr;
    const auto startOf = [&](int q) { return q >= W ? bytes : c.cum[(i64)q * c.E] * c.rb; };
    const i64 block = k == 0 ? (i64)blockIdx.x : (i64)gridDim.x - 1 - blockIdx.x;
    // (x_fused_gather keeps copy_tile alone: the biased path beside it made it spill 200 bytes.)
    const bool useBiased = !Gather && aligned;
    if (useBiased) bias_chunks(biased, c);
    __syncthreads();
    for_each_tile(bytes, W, p.splitByPeer, startOf, block, [&](i64 lo, i64 hi) {
      if (useBiased) copy_tile_biased(biased, lo, hi);
      else copy_tile<Gather>(c, gather, lo, hi, aligned);
    });
  }
}

// Up to this many members a group is walked by one thread; past it, by a warp.
#define XF_THREAD_MEMBERS 8

// How block 0 decided a call, for the other blocks.
#define XF_ACCEPTED 1
#define XF_REFUSED 2
#define XF_MISMATCH 3
__device__ __forceinline__ i64 ld_acquire_gpu(const i64* p) {
  i64 v;
  asm volatile("ld.acquire.gpu.global.s64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
}
// By one thread, after its block's writes and a __syncthreads (cumulativity makes them visible
// to whoever acquires the flag).
__device__ __forceinline__ void announce(i64* ready, i64 seq, i64 how) {
  st_volatile(ready + 1, how);
  __threadfence();
  asm volatile("st.release.gpu.global.s64 [%0], %1;" ::"l"(ready), "l"(seq) : "memory");
}


#ifdef A2AV_PROBE_CLOCKS
__device__ unsigned xf_launches;
#endif

// x_fused_gather: the same, the rows read through p.gatherRows (exchange.cuh copy_tile says why apart).
template <bool Gather>
__device__ __forceinline__ void x_fused_run(const XParams& p) {
  extern __shared__ i64 sm[];
  __shared__ XFusedState st;
  const int W = p.world, E = p.experts, me = p.rank, tid = threadIdx.x, nt = blockDim.x;
  const i64 N = (i64)W * E;
  const bool byExpert = p.kind == X_DISPATCH;
  const int G = byExpert ? E : W, M = byExpert ? W : E;
  i64* hdr = sm;
  i64* cnt = hdr + W * XF_HDR;
  i64* glen = cnt + W * N;
  i64* rows = glen + (i64)W * G;
  i64* srcRow = rows + N;
  i64* cum = srcRow + N;
  i64* dst = cum + N;
  i64* startsMe = dst + N;
  unsigned long long* outAt = (unsigned long long*)(startsMe + N);
  i64* total = (i64*)(outAt + W);
  u8** outBase = (u8**)(total + W);
  u8** outBase2 = outBase + W;
  const BiasedChunks biased{(i64*)(outBase2 + W), (i64*)(outBase2 + W) + N, (i64*)(outBase2 + W) + 2 * N, N};
  PROBE_CLOCKS;
  PROBE_CLOCK(0);
  // Launched early (programmatic dependent launch) when the host found room: as a2av_1d.
  pdl_wait();
  pdl_release();
  PROBE_CLOCK(1);
  u8* lane = p.pad + p.laneOffset;
  LaneHeader* h = (LaneHeader*)lane;
  if (tid == 0) {
    st.abort = ld_volatile(&h->abort.code) != A2AV_OK;
    st.seq = ld_volatile(&h->seq) + 1;
    st.at = st.mis = st.fin = X_NONE;
    st.v = XVerdict{(i64)X_NONE, 0, 0, 0, 0, 0};
  }
  for (int r = tid; r < W; r += nt) {
    outAt[r] = X_NONE;
    outBase[r] = p.outPeers[r];
    outBase2[r] = p.input2 ? p.outPeers2[r] : nullptr;
  }
  // My row: counts, source rows, running sums.
  for (i64 i = tid; i < N; i += nt) {
    const int r = (int)(i / E), e = (int)(i % E);
    rows[i] = byExpert ? p.splits[i] : p.splits[(i64)e * W + r];
    if (!byExpert) srcRow[i] = p.splits[N + (i64)e * W + r];
  }
  __syncthreads();
  PROBE_CLOCK(2);
  if (st.abort) return;
  const i64 seq = st.seq;
  const int parity = (int)(seq & 1);
  const u32 flag = ll_flag(seq);
#ifdef A2AV_PROBE_XF_BLOCK0_POLL
  i64* const ready = p.scratch + 1;  // [0] the call block 0 has decided, [1] how (XF_*)
  const PlanArrays left = plan_arrays(p.plan, W);
#endif
  // Every block polls every packet and lays out the call itself: no flag hop from block 0 (about
  // 2 µs faster across GPUs, no slower on one: docs/perf.md). A2AV_PROBE_XF_BLOCK0_POLL (a probe's
  // define) brings back block 0 polling alone and the others waiting on its flag.
#ifdef A2AV_PROBE_XF_BLOCK0_POLL
  if (blockIdx.x != 0) {
    if (tid == 0) {
      // Block 0 records any timeout (its own wait may start later: this one is twice as long).
      const u64 deadline = global_timer_ns() + 2 * (u64)p.timeoutNs;
      int spins = 0;
      while (ld_acquire_gpu(ready) != seq) {
        if (++spins == 64) {
          spins = 0;
          if (ld_volatile(&h->abort.code) != A2AV_OK || global_timer_ns() > deadline) {
            st.abort = 1;
            break;
          }
        }
      }
      if (!st.abort) st.fin = (unsigned long long)__ldcg(ready + 1);
    }
    __syncthreads();
    if (st.abort || st.fin == XF_MISMATCH) return;
    if (st.fin == XF_ACCEPTED) {
      for (i64 i = tid; i < N; i += nt) {
        const i64 k = (i / E) * A2AV_MAX_EXPERTS + i % E;
        rows[i] = __ldcg(left.rows + k);
        srcRow[i] = __ldcg(left.src + k);
        dst[i] = __ldcg(left.dst + k);
        cum[i] = __ldcg(left.cum + k);
      }
      __syncthreads();
#ifndef A2AV_PROBE_NO_COPY
      copy_payloads<Gather>(p, XChunks{rows, srcRow, dst, cum, outBase, p.input, N, p.rowBytes, E}, outBase2, cum[N - 1] + rows[N - 1], biased);
#endif
    }
    __syncthreads();
    for (int q = tid; q < W; q += nt) red_release_add_peer(lane_done(p.padPeers[q] + p.laneOffset, W) + me, 1);
    return;
  }
#endif
  // Round 1 before this rank's own verdict, so that its peers wait less for it (about 2,000 cycles
  // at W = 8: docs/perf.md): to every peer the header's agreement words, my whole row, my output
  // rows and how many completion signals this rank sends (its blocks); the verdict words follow.
  const int words = A2AV_X1_HEADER + (int)N + A2AV_XF_EXTRA;
  for (i64 k = tid; blockIdx.x == 0 && k < (i64)W * words; k += nt) {
    const int r = (int)(k / words), j = (int)(k % words);
    if (j >= XF_AGREE && j < A2AV_X1_HEADER) continue;
    i64 v;
    if (j < XF_AGREE) v = j == 0 ? p.kind : j == 1 ? p.rowBytes : j == 2 ? p.outId : j == 3 ? E : p.align;
    else if (j < A2AV_X1_HEADER + N) v = rows[j - A2AV_X1_HEADER];
    else v = j == A2AV_X1_HEADER + N ? p.outRows : (i64)gridDim.x;
    ll_store(lane_x1(p.padPeers[r] + p.laneOffset, W, parity, me) + j, v, flag);
  }
  const i64 sent = block_scan_sat(rows, cum, N, st.scan);
  for (i64 i = tid; i < N; i += nt) {
    if (rows[i] < 0) atomicMin(&st.at, (unsigned long long)i);
    if (byExpert) srcRow[i] = cum[i];
  }
  __syncthreads();
  // My own verdict, as x_exchange's (negative split, then input overrun).
  if (st.at != X_NONE) {
    if (tid == 0) {
      const i64 i = (i64)st.at;
      st.v = XVerdict{x_key(X_PRIO_NEGATIVE, (i64)me * N + i), me, (int)(i / E), (int)(i % E), rows[i], 0};
    }
  } else {
    for (i64 i = tid; i < N; i += nt) {
      const i64 c = rows[i], s = srcRow[i];
      const bool out = !byExpert ? (s < 0 || sat_add(s, c) > p.inRows) : c > p.inRows - cum[i];
      if (out) atomicMin(&st.at, (unsigned long long)i);
    }
    __syncthreads();
    if (tid == 0 && st.at != X_NONE) {
      const i64 i = (i64)st.at, s = srcRow[i];
      const i64 needed = !byExpert ? (s < 0 ? s : sat_add(s, rows[i])) : sent;
      st.v = XVerdict{x_key(X_PRIO_INPUT, (i64)me * N + i), me, (int)(i / E), (int)(i % E), needed, p.inRows};
    }
  }
  __syncthreads();
  PROBE_CLOCK(3);

  for (int k = tid; blockIdx.x == 0 && k < W * XF_VERDICT_WORDS; k += nt)
    ll_store(lane_x1(p.padPeers[k / XF_VERDICT_WORDS] + p.laneOffset, W, parity, me) + XF_AGREE + k % XF_VERDICT_WORDS, verdict_word(st.v, k % XF_VERDICT_WORDS), flag);
  const u64 deadline = global_timer_ns() + (u64)p.timeoutNs;
  // Header words [from, from + count) of every sender into hdr (a timeout recorded).
  const auto awaitHeader = [&](int from, int count) {
    for (int k = tid; k < W * count; k += nt) {
      const int q = k / count, j = from + k % count;
      if (!ll_wait(lane_x1(lane, W, parity, q) + j, flag, deadline, &hdr[q * XF_HDR + j])) {
        record_abort(h, StatusRecord{A2AV_ERR_TIMEOUT, me, q, seq, hdr[q * XF_HDR + j], me, seq, A2AV_WAIT_ROUND1});
        st.abort = 1;
        break;
      }
    }
  };
  // First the agreement words (every kind of exchange sends them) ...
  awaitHeader(0, XF_AGREE);
  __syncthreads();
  PROBE_CLOCK(4);
  if (st.abort) return;
  for (int q = tid; q < W; q += nt) {
    const i64* a = hdr + q * XF_HDR;
    if (a[0] != hdr[0] || a[1] != hdr[1] || a[2] != hdr[2] || a[3] != hdr[3] || a[4] != hdr[4]) atomicMin(&st.mis, (unsigned long long)q);
  }
  __syncthreads();
  if (st.mis != X_NONE) {
    // The calls differ (peers may even be in x_exchange): x_exchange's receivers' verdict, sent as
    // their round-2 answer, then completion with one signal, as x_done; the other blocks leave.
    if (blockIdx.x != 0) return;
#ifdef A2AV_PROBE_XF_BLOCK0_POLL
    if (tid == 0) announce(ready, seq, XF_MISMATCH);
#endif
    if (tid == 0) {
      const int q = (int)st.mis;
      int j = 0;
      while (hdr[q * XF_HDR + j] == hdr[j]) ++j;
      st.v = XVerdict{x_key(X_PRIO_MISMATCH, q), q, 0, -1, hdr[q * XF_HDR + j], hdr[j]};
    }
    __syncthreads();
    for (int k = tid; k < W * A2AV_X2_HEADER; k += nt)
      ll_store(lane_x2(p.padPeers[k / A2AV_X2_HEADER] + p.laneOffset, W, parity, me) + k % A2AV_X2_HEADER, verdict_word(st.v, k % A2AV_X2_HEADER), flag);
    if (tid == 0) record_refusal(h, StatusRecord{A2AV_ERR_MISMATCH, st.v.rank, st.v.peer, st.v.needed, st.v.available, me, seq, st.v.expert});
    __syncthreads();
    complete_call(CallLane{p.pad, p.padPeers, p.laneOffset, W, me, p.timeoutNs}, [](int, i64) { return (i64)1; });
    return;
  }
  // ... then, the calls matching, every sender's row and extras (the verdicts after the layout).
  // (32-bit indices: 300 cycles less than 64-bit ones at W = 8; reading data already there took
  // 2,400 cycles, the first pass 3,600: docs/perf.md.)
  const int per = (int)N + A2AV_XF_EXTRA;
  for (int k = tid; k < W * per; k += nt) {
    const int q = k / per, j = k % per;
    i64* to = j < N ? &cnt[(i64)q * N + j] : &hdr[q * XF_HDR + A2AV_X1_HEADER + (j - (int)N)];
    if (!ll_wait(lane_x1(lane, W, parity, q) + A2AV_X1_HEADER + j, flag, deadline, to)) {
      record_abort(h, StatusRecord{A2AV_ERR_TIMEOUT, me, q, seq, *to, me, seq, A2AV_WAIT_ROUND1});
      st.abort = 1;
      break;
    }
  }
  __syncthreads();
  PROBE_CLOCK(5);
  if (st.abort) return;

  // Every receiver's layout, as receiver_verdict lays out its own: block lengths per group ...
  const auto count = [&](int src, int r, int e) { return clamp0(cnt[(i64)src * N + (i64)r * E + e]); };
  const auto member = [&](int r, int g, int m) { return m < M ? (byExpert ? count(m, r, g) : count(g, r, m)) : (i64)0; };
  // A group has M members (dispatch: W sources of an expert; combine: E experts of a source). A
  // thread walks them where they are few; where they are many (a combine with E = 128 took 12 µs
  // walking them), a warp takes a group, 32 members a step.
  const bool byWarp = M > XF_THREAD_MEMBERS;
  const int lane32 = tid & 31;
  const i64 pairs = (i64)W * G, pairStep = byWarp ? nt >> 5 : nt;
  for (i64 t = byWarp ? tid >> 5 : tid; t < pairs; t += pairStep) {
    const int r = (int)(t / G), g = (int)(t % G);
    i64 len = 0;
    if (byWarp) {
      for (int m0 = 0; m0 < M; m0 += 32) len = sat_add(len, member(r, g, m0 + lane32));
      len = warp_sum_sat(len);
    } else {
      for (int m = 0; m < M; ++m) len = sat_add(len, member(r, g, m));
    }
    if (!byWarp || lane32 == 0) glen[t] = !byExpert ? len : len == 0 ? p.align : sat_add(len, (p.align - len % p.align) % p.align);
  }
  __syncthreads();
  PROBE_CLOCK(9);
  // ... where each group starts (one warp per receiver) ...
  for (int r = tid >> 5; r < W; r += nt >> 5) {
    const i64 t = warp_scan_sat(glen + (i64)r * G, G);
    if ((tid & 31) == 0) total[r] = t;
  }
  __syncthreads();
  PROBE_CLOCK(10);
  // ... where each chunk lands, and each receiver's first overrun.
  // (A group's verdict keys grow with its members, so the least key of every overrun is its first.)
  for (i64 t = byWarp ? tid >> 5 : tid; t < pairs; t += pairStep) {
    const int r = (int)(t / G), g = (int)(t % G);
    const i64 cap = hdr[r * XF_HDR + A2AV_X1_HEADER];
    i64 pos = glen[t], at = (i64)X_NONE;
    const auto place = [&](int m, i64 c, i64 at_) {
      const int src = byExpert ? m : g, e = byExpert ? g : m;
      if (at == (i64)X_NONE && c > cap - at_) at = byExpert ? (i64)e * (W + 1) + src : (i64)src * E + e;
      if (src == me) dst[(i64)r * E + e] = at_;
      if (r == me) startsMe[(i64)src * E + e] = at_;
    };
    if (byWarp) {
      for (int m0 = 0; m0 < M; m0 += 32) {
        const int m = m0 + lane32;
        const i64 c = member(r, g, m), upTo = warp_incl_scan_sat(c);
        const i64 before = __shfl_up_sync(0xffffffffu, upTo, 1);
        if (m < M) place(m, c, sat_add(pos, lane32 == 0 ? 0 : before));
        pos = sat_add(pos, __shfl_sync(0xffffffffu, upTo, 31));
      }
    } else {
      for (int m = 0; m < M; ++m) {
        const i64 c = member(r, g, m);
        place(m, c, pos);
        pos = sat_add(pos, c);
      }
    }
    const i64 end = g + 1 < G ? glen[t + 1] : total[r];
    if (byExpert && at == (i64)X_NONE && end > cap) at = (i64)g * (W + 1) + W;  // the padding passes
    if (at != (i64)X_NONE) atomicMin(&outAt[r], (unsigned long long)at);
  }
  // Every sender's verdict words, sent after its row (they have most likely arrived meanwhile).
  awaitHeader(XF_AGREE, XF_VERDICT_WORDS);
  __syncthreads();
  PROBE_CLOCK(11);
  if (st.abort) return;
  if (tid == 0) {
    i64 key = (i64)X_NONE;
    int who = -1;
    for (int q = 0; q < W; ++q)
      if (hdr[q * XF_HDR + XF_AGREE] < key) key = hdr[q * XF_HDR + XF_AGREE], who = q;
    st.fin = who < 0 ? X_NONE : (unsigned long long)who;
  }
  if (tid == 0) {
    // The least verdict: any sender's own, else the lowest receiver's overrun.
    if (st.fin != X_NONE) {
      st.v = read_verdict(hdr + (int)st.fin * XF_HDR + XF_AGREE);
    } else {
      st.v = XVerdict{(i64)X_NONE, 0, 0, 0, 0, 0};
      for (int r = 0; r < W; ++r) {
        if (outAt[r] == X_NONE) continue;
        const i64 at = (i64)outAt[r];
        const int peer = byExpert ? (int)(at % (W + 1)) : (int)(at / E), e = byExpert ? (int)(at / (W + 1)) : (int)(at % E);
        st.v = XVerdict{x_key(X_PRIO_OUTPUT, r), r, peer == W && byExpert ? -1 : peer, e, total[r], hdr[r * XF_HDR + A2AV_X1_HEADER]};
        break;
      }
    }
  }
  __syncthreads();
  PROBE_CLOCK(6);
  const bool refused = st.v.key != (i64)X_NONE;
  if (refused) {
    if (blockIdx.x == 0 && tid == 0) {
      const int prio = (int)(st.v.key >> 56);
      const i64 code = prio == X_PRIO_NEGATIVE ? A2AV_ERR_NEGATIVE : prio == X_PRIO_INPUT ? A2AV_ERR_INPUT_OVERFLOW : A2AV_ERR_OUTPUT_OVERFLOW;
      record_refusal(h, StatusRecord{code, st.v.rank, st.v.peer, st.v.needed, st.v.available, me, seq, st.v.expert});
#ifdef A2AV_PROBE_XF_BLOCK0_POLL
      announce(ready, seq, XF_REFUSED);
#endif
    }
  } else {
#ifdef A2AV_PROBE_XF_BLOCK0_POLL
    // My chunks for the other blocks, then the flag (they wait on it instead of laying out the call).
    for (i64 i = tid; blockIdx.x == 0 && i < N; i += nt) {
      const i64 k = (i / E) * A2AV_MAX_EXPERTS + i % E;
      left.rows[k] = rows[i];
      left.src[k] = srcRow[i];
      left.dst[k] = dst[i];
      left.cum[k] = cum[i];
    }
    __syncthreads();
    if (blockIdx.x == 0 && tid == 0) announce(ready, seq, XF_ACCEPTED);
#endif
    // outSplitsOffsets, then my tiles.
    for (i64 k = tid; blockIdx.x == 0 && k < N; k += nt) {
      const int src = byExpert ? (int)(k % W) : (int)(k / E), e = byExpert ? (int)(k / W) : (int)(k % E);
      p.outSplitsOffsets[k] = cnt[(i64)src * N + (i64)me * E + e];
      p.outSplitsOffsets[N + k] = startsMe[(i64)src * E + e];
    }
#ifndef A2AV_PROBE_NO_COPY
    copy_payloads<Gather>(p, XChunks{rows, srcRow, dst, cum, outBase, p.input, N, p.rowBytes, E}, outBase2, sent, biased);
#endif
  }

  // Completion, as a2av_1d: every block tells every peer it has finished (the others above);
  // block 0 waits for the blocks every peer announced.
  __syncthreads();
  PROBE_CLOCK(7);
  for (int q = tid; q < W; q += nt) red_release_add_peer(lane_done(p.padPeers[q] + p.laneOffset, W) + me, 1);
  if (blockIdx.x != 0) return;  // with A2AV_PROBE_XF_BLOCK0_POLL the others left above
  const bool ok = await_done(h, lane, W, me, seq, p.timeoutNs, [&](int q) { return hdr[q * XF_HDR + A2AV_X1_HEADER + 1]; });
  if (__syncthreads_and(ok) && tid == 0) st_volatile(&h->seq, seq);
  PROBE_CLOCK(8);
#ifdef A2AV_PROBE_CLOCKS
  if (PROBE_CLOCKS_DUE(xf_launches))
    printf("x_fused%s kind=%d W=%d E=%d rank=%d blocks=%d cycles: pdl-wait %lld row %lld verdict %lld headers %lld rows %lld layout %lld (lengths %lld starts %lld places %lld verdict %lld) copy %lld completion %lld\n",
           Gather ? "_gather" : "", (int)p.kind, W, E, me, (int)gridDim.x, PROBE_CYCLES(1), PROBE_CYCLES(2), PROBE_CYCLES(3), PROBE_CYCLES(4),
           PROBE_CYCLES(5), PROBE_CYCLES(6), probeClocks[9] - probeClocks[5], probeClocks[10] - probeClocks[9], probeClocks[11] - probeClocks[10],
           probeClocks[6] - probeClocks[11], PROBE_CYCLES(7), PROBE_CYCLES(8));
#endif
}
extern "C" __global__ void __launch_bounds__(A2AV_MAX_THREADS) x_fused(const XParams p) { x_fused_run<false>(p); }
extern "C" __global__ void __launch_bounds__(A2AV_MAX_THREADS) x_fused_gather(const XParams p) { x_fused_run<true>(p); }
