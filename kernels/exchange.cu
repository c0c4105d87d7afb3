// The MoE exchange (dispatch, combine) and exchange plans, with the splits kept on the device.
// src/collectives/exchange-rules.ts states the rules; these kernels reach the same verdict and
// layout from each rank's share of the split matrix, since with W ranks of E experts no rank can
// hold all of it (72 x 72 x 256 counts). Per call, one block:
//   x_exchange  round 1: every sender sends each receiver its call's agreement words (kind, plan,
//               row size, output, E, align), its own verdict (negative split, input overrun: only
//               it sees its whole row) and its counts for the receiver's experts. A call that
//               differs from rank 0's is refused by every rank from the agreement words alone
//               (agree_verdict). Else each receiver lays out its output and adds what only it sees
//               (its output overrun); round 2: each receiver answers every sender with its verdict
//               and where the sender's chunks land. After round 2 every rank holds every
//               receiver's verdict, which folds in every sender's: all take the same one (the
//               least key: kernels/exchange.cuh), so all move data or none does.
//   x_check     a plan's move: its agreement words in the round-1 slots (so a peer's direct call
//               or other plan is refused as a mismatch, whatever kernel it runs), then the plan's
//               own verdict.
//   x_copy      the data, along the plan left by x_exchange (a grid; does nothing when gated);
//               x_copy_slices the same as a grid of short-lived blocks, for ranks on one GPU
//               (exchange-slices.cuh).
//   x_done      completion: one signal to every peer, then wait for theirs (as a2av_done).
// A call is x_exchange + x_copy + x_done; building a plan x_exchange + x_done; a move
// x_check + x_copy + x_done. Every wait is bounded (the lane's abort record, as in a2av.cu).
// Small routings take all of it in one launch instead, x_fused (exchange-fused.cuh).
#include "exchange.cuh"
#include "probe-clocks.cuh"

#ifdef A2AV_PROBE_WAIT_PRINT
// When each rank's exchange kernels ran (globaltimer ns), for the timeout prints: a rank whose
// packets went unseen, late or not? [rank][0: x_exchange entered, 1: its round 1 stored, 2: x_done
// ended, 3: that x_done's call]. Ranks of one process share the module. (It told the one-GPU stall
// of docs/perf.md: the unseen rank entered x_exchange 3 ms after its peers had timed out.)
__device__ unsigned long long g_x_when[1024][4];
__device__ __forceinline__ void note_done(const XParams& p) {
  if (threadIdx.x == 0) {
    g_x_when[p.rank][3] = (u64)ld_volatile(&((LaneHeader*)(p.pad + p.laneOffset))->seq);
    g_x_when[p.rank][2] = global_timer_ns();
  }
}
#endif

#ifdef A2AV_PROBE_CLOCKS
__device__ unsigned xx_launches;
#endif

extern "C" __global__ void __launch_bounds__(1024) x_exchange(const XParams p) {
  __shared__ XBlockState st;
  PROBE_CLOCKS;
  PROBE_CLOCK(0);
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
  PROBE_STAMP_BEGIN(me, p.kind);
  PROBE_CLOCK(1);
  const i64 seq = st.seq;
  const int parity = (int)(seq & 1);
  const u32 flag = ll_flag(seq);
#ifdef A2AV_PROBE_WAIT_PRINT
  const u64 entered = global_timer_ns();
  if (tid == 0) g_x_when[me][0] = entered;
#endif

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
  PROBE_CLOCK(2);

  // Round 1: to every receiver, my call, my verdict, my counts for its experts.
  for (i64 k = tid; k < (i64)W * (A2AV_X1_HEADER + E); k += nt) {
    const int r = (int)(k / (A2AV_X1_HEADER + E)), j = (int)(k % (A2AV_X1_HEADER + E));
    i64 v;
    if (j >= A2AV_X1_HEADER) v = plan.rows[(i64)r * E + (j - A2AV_X1_HEADER)];
    else if (j < A2AV_X1_AGREE) v = agree_word(p, j, p.callPlan);
    else v = verdict_word(st.mine, j - A2AV_X1_AGREE);
    ll_store(lane_x1(p.padPeers[r] + p.laneOffset, W, parity, me) + j, v, flag);
  }
  PROBE_CLOCK(3);
  const XWait wait{h, flag, global_timer_ns() + (u64)p.timeoutNs, me, W, seq};
#ifdef A2AV_PROBE_WAIT_PRINT
  if (tid == 0) g_x_when[me][1] = wait.deadline - (u64)p.timeoutNs;
#endif
  // The agreement words first (a peer's x_check sends no more); then its verdict and counts, as
  // many as its count of experts says.
  const auto round1 = [&](int src) { return lane_x1(lane, W, parity, src); };
  receive(st, wait, round1, XInbox{xin, A2AV_X1_WORDS, 0, A2AV_X1_AGREE, A2AV_WAIT_ROUND1});
  if (st.abort) return;
  const XVerdict mismatch = agree_verdict(xin, A2AV_X1_WORDS, W, st.mis);
  if (mismatch.key != (i64)X_NONE) {
    if (tid == 0) refuse(XCall{p, h, lane, gate, seq}, mismatch, true);
    return;
  }
  receive(st, wait, round1, XInbox{xin, A2AV_X1_WORDS, A2AV_X1_AGREE, -1, A2AV_WAIT_ROUND1});
  if (st.abort) return;

  PROBE_CLOCK(4);
  // As a receiver: every sender's verdict, my own layout.
  receiver_verdict(st, p, xin, starts);
  PROBE_CLOCK(5);

  // Round 2: to every sender, my verdict and where its chunks land in my output.
  for (i64 k = tid; k < (i64)W * (A2AV_X2_HEADER + E); k += nt) {
    const int s = (int)(k / (A2AV_X2_HEADER + E)), j = (int)(k % (A2AV_X2_HEADER + E));
    const i64 v = j < A2AV_X2_HEADER ? verdict_word(st.mine, j) : starts[(i64)s * A2AV_MAX_EXPERTS + (j - A2AV_X2_HEADER)];
    ll_store(lane_x2(p.padPeers[s] + p.laneOffset, W, parity, me) + j, v, flag);
  }
  PROBE_CLOCK(6);
  // Every receiver's verdict; then, if all accept, where my chunks land.
  const auto round2 = [&](int r) { return lane_x2(lane, W, parity, r); };
  receive(st, wait, round2, XInbox{answers, A2AV_X2_WORDS, 0, A2AV_X2_HEADER, A2AV_WAIT_ROUND2});
#ifdef A2AV_PROBE_WAIT_PRINT
  // A round-2 timeout: are this rank's round-1 packets where its peers wait for them, and when did
  // this rank get here?
  for (int r = tid; st.abort && r < W; r += nt) {
    const uint4* at = lane_x1(p.padPeers[r] + p.laneOffset, W, parity, me);
    const uint4 v = ll_load(at), a = ll_load_acquire(at);
    printf("x round 2 timeout: rank %d seq %lld: my round-1 header at rank %d (%p): flags %u %u, acquired %u %u (mine %u)\n", me, seq, r, (const void*)at, v.y, v.w, a.y, a.w, flag);
  }
  if (st.abort && tid == 0)
    printf("x round 2 timeout: rank %d seq %lld: entered at %llu, round 1 stored at %llu, now %llu; my last x_done (call %llu) ended at %llu\n", me, seq, entered,
           g_x_when[me][1], global_timer_ns(), g_x_when[me][3], g_x_when[me][2]);
#endif
  if (st.abort) return;
  PROBE_CLOCK(7);
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
  PROBE_CLOCK(8);
  for (i64 i = tid; i < N; i += nt) plan.dst[i] = answers[(i / E) * A2AV_X2_WORDS + A2AV_X2_HEADER + (i % E)];
  accept(p, xin, starts, gate, sent, seq);
  PROBE_CLOCK(9);
  PROBE_STAMP(me, 1);
#ifdef A2AV_PROBE_CLOCKS
  if (PROBE_CLOCKS_DUE(xx_launches))
    printf("x_exchange kind=%d W=%d E=%d rank=%d cycles: pdl-wait %lld row %lld round-1 stores %lld round-1 wait %lld layout %lld round-2 stores %lld round-2 headers %lld round-2 counts %lld accept %lld\n",
           (int)p.kind, W, E, me, PROBE_CYCLES(1), PROBE_CYCLES(2), PROBE_CYCLES(3), PROBE_CYCLES(4), PROBE_CYCLES(5), PROBE_CYCLES(6), PROBE_CYCLES(7), PROBE_CYCLES(8), PROBE_CYCLES(9));
#endif
  // A gathered dispatch's table past the rows it sends, up to where x_copy_slices_gather reads
  // early (its grid is sized for the most the route can send): no row (-1), so the blocks past
  // the sends read nothing. The route writes only the entries it sends; an older entry naming a
  // row of x would send a spare block to read it (in bounds: the copy checks, but for nothing).
  if (p.gatherRows != nullptr && p.gridBytes > 0) {
    const i64 readable = xs_readable_bytes(p) / p.rowBytes + 1;
    const i64 end = readable < p.inRows ? readable : p.inRows;
    for (i64 r = sent + tid; r < end; r += nt) ((int*)p.gatherRows)[r] = -1;
  }
}

// A plan's move: its agreement words against every rank's (the plan word: the lane call of the
// plan's exchange), then the plan's own verdict.
extern "C" __global__ void __launch_bounds__(1024) x_check(const XParams p) {
  __shared__ XBlockState st;
  const int W = p.world, me = p.rank, tid = threadIdx.x, nt = blockDim.x;
  u8* lane = p.pad + p.laneOffset;
  LaneHeader* h = (LaneHeader*)lane;
  i64* const gate = p.scratch;
  i64* const xin = p.scratch + 8;
  if (!x_begin(st, h, gate)) return;
  const i64 seq = st.seq;
  const int parity = (int)(seq & 1);
  const u32 flag = ll_flag(seq);
  const i64 planId = p.plan[11];
  for (int k = tid; k < A2AV_X1_AGREE * W; k += nt)
    ll_store(lane_x1(p.padPeers[k / A2AV_X1_AGREE] + p.laneOffset, W, parity, me) + k % A2AV_X1_AGREE, agree_word(p, k % A2AV_X1_AGREE, planId), flag);
  const XWait wait{h, flag, global_timer_ns() + (u64)p.timeoutNs, me, W, seq};
  receive(st, wait, [&](int src) { return lane_x1(lane, W, parity, src); }, XInbox{xin, A2AV_X1_WORDS, 0, A2AV_X1_AGREE, A2AV_WAIT_MOVE});
  if (st.abort) return;
  const XVerdict mismatch = agree_verdict(xin, A2AV_X1_WORDS, W, st.mis);
  if (tid != 0) return;
  if (mismatch.key != (i64)X_NONE) refuse(XCall{p, h, lane, gate, seq}, mismatch, false);
  else if (p.plan[0] != A2AV_OK) refuse(XCall{p, h, lane, gate, seq}, read_plan_verdict(p.plan), false);
  else *gate = 0;
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

#include "exchange-slices.cuh"

// Completion, as a2av_done: every rank sends each peer one signal per call (the probes note when).
__device__ __forceinline__ void x_complete(const XParams& p) {
  PROBE_STAMP(p.rank, 4);
  complete_call(CallLane{p.pad, p.padPeers, p.laneOffset, p.world, p.rank, p.timeoutNs}, [](int, i64) { return (i64)1; });
  PROBE_STAMP(p.rank, 5);
#ifdef A2AV_PROBE_WAIT_PRINT
  note_done(p);
#endif
}
extern "C" __global__ void __launch_bounds__(A2AV_MAX_THREADS) x_done(const XParams p) { x_complete(p); }
// The same, launched early behind x_copy_slices (moe.ts SLICES_EARLY), letting the next
// call's exchange (one block: the host launches nothing larger early behind it,
// CudaStream.heldOpen) wait in a slot beside it.
extern "C" __global__ void __launch_bounds__(A2AV_MAX_THREADS) x_done_open(const XParams p) {
  pdl_wait();
  pdl_release();
  x_complete(p);
}

#include "exchange-fused.cuh"
