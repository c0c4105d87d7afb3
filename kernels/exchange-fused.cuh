// A whole MoE call in one launch for small routings: x_fused and x_fused_gather (kernels/exchange.cu
// has the three-kernel form it stands in for).
#pragma once
#include "exchange.cuh"
#include "probe-clocks.cuh"

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
// mismatch; so a rank here may meet peers in x_exchange or x_check only when the agreement words
// differ, which every rank decides from those words alone (agree_verdict): it then completes with
// one signal, as they do.
// Shared memory (i64 words): hdr[W][XF_HDR], cnt[W][N] (sender's row), glen[W][G] (per receiver:
// group lengths, then starts), my rows, source rows, running sums, destination rows, where each
// source lands in my output [N each], outAt[W], total[W], output bases[W], companion bases[W],
// then the biased chunks of the payload being copied (start, dst, src [N each]).
#define XF_HDR (A2AV_X1_HEADER + A2AV_XF_EXTRA)
// The header's words: the A2AV_X1_AGREE that every rank's call must match, then the sender's own
// verdict (verdict_word).
#define XF_VERDICT_WORDS (A2AV_X1_HEADER - A2AV_X1_AGREE)
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

// len (>= 0) rounded up to a multiple of align (>= 1), saturating; a 32-bit remainder where both fit.
__device__ __forceinline__ i64 round_up_sat(i64 len, i64 align) {
  if (align == 1) return len;
  const i64 rem = ((len | align) >> 31) == 0 ? (i64)((u32)len % (u32)align) : len % align;
  return rem == 0 ? len : sat_add(len, align - rem);
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
  // 32-bit indices on the layout's path (N = W * E fits: x_fused_fits): a 64-bit division is a long
  // subroutine, and every block runs these loops before its first copy.
  for (int i = tid; i < (int)N; i += nt) {
    const int r = i / E, e = i - r * E;
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
  // The peers shared among the blocks: at W = 8, E = 16 a block stores one peer's packets in one
  // pass, where block 0 alone took three (0.6 µs of the call: docs/perf.md).
  for (int r = blockIdx.x; r < W; r += gridDim.x) {
    for (int j = tid; j < words; j += nt) {
      if (j >= A2AV_X1_AGREE && j < A2AV_X1_HEADER) continue;
      i64 v;
      if (j < A2AV_X1_AGREE) v = agree_word(p, j, p.callPlan);
      else if (j < A2AV_X1_HEADER + N) v = rows[j - A2AV_X1_HEADER];
      else v = j == A2AV_X1_HEADER + N ? p.outRows : (i64)gridDim.x;
      ll_store(lane_x1(p.padPeers[r] + p.laneOffset, W, parity, me) + j, v, flag);
    }
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
    ll_store(lane_x1(p.padPeers[k / XF_VERDICT_WORDS] + p.laneOffset, W, parity, me) + A2AV_X1_AGREE + k % XF_VERDICT_WORDS, verdict_word(st.v, k % XF_VERDICT_WORDS), flag);
  const u64 deadline = global_timer_ns() + (u64)p.timeoutNs;
  // Round-1 words [from, from + count) of every sender q, word j into to(q, j) (a timeout
  // recorded). 32-bit indices: 300 cycles less than 64-bit ones for the rows at W = 8.
  const auto await1 = [&](int from, int count, auto to) {
    for (int k = tid; k < W * count; k += nt) {
      const int q = k / count, j = k % count;
      if (!ll_wait(lane_x1(lane, W, parity, q) + from + j, flag, deadline, to(q, j))) {
        record_abort(h, StatusRecord{A2AV_ERR_TIMEOUT, me, q, seq, *to(q, j), me, seq, A2AV_WAIT_ROUND1});
        st.abort = 1;
        break;
      }
    }
  };
  const auto header = [&](int from) { return [&, from](int q, int j) { return &hdr[q * XF_HDR + from + j]; }; };
  // First the agreement words (every kind of exchange sends them) ...
  await1(0, A2AV_X1_AGREE, header(0));
  __syncthreads();
  PROBE_CLOCK(4);
  if (st.abort) return;
  const XVerdict mismatch = agree_verdict(hdr, XF_HDR, W, st.mis);
  if (mismatch.key != (i64)X_NONE) {
    // The calls differ (peers may even be in x_exchange or x_check): completion with one signal,
    // as x_done; the other blocks leave.
    if (blockIdx.x != 0) return;
#ifdef A2AV_PROBE_XF_BLOCK0_POLL
    if (tid == 0) announce(ready, seq, XF_MISMATCH);
#endif
    if (tid == 0) record_refusal(h, StatusRecord{A2AV_ERR_MISMATCH, mismatch.rank, mismatch.peer, mismatch.needed, mismatch.available, me, seq, mismatch.expert});
    __syncthreads();
    complete_call(CallLane{p.pad, p.padPeers, p.laneOffset, W, me, p.timeoutNs}, [](int, i64) { return (i64)1; });
    return;
  }
  // ... then, the calls matching, every sender's row and extras (the verdicts after the layout).
  // (Reading rows already there took 2,400 cycles at W = 8, the first pass 3,600: docs/perf.md.)
  await1(A2AV_X1_HEADER, (int)N + A2AV_XF_EXTRA, [&](int q, int j) { return j < N ? &cnt[(i64)q * N + j] : &hdr[q * XF_HDR + A2AV_X1_HEADER + (j - (int)N)]; });
  __syncthreads();
  PROBE_CLOCK(5);
  if (st.abort) return;

  // Every receiver's layout, as receiver_verdict lays out its own, in one walk of each group's
  // members: its block length, and where this rank's chunks and the chunks it receives lie in
  // their group (made absolute once the groups' starts are known). A second walk, to find the
  // first chunk past a receiver's output, only for a group that ends past it (a refused call).
  const auto count = [&](int src, int r, int e) { return clamp0(cnt[(i64)src * N + (i64)r * E + e]); };
  const auto member = [&](int r, int g, int m) { return m < M ? (byExpert ? count(m, r, g) : count(g, r, m)) : (i64)0; };
  // A group has M members (dispatch: W sources of an expert; combine: E experts of a source). A
  // thread walks them where they are few; where they are many (a combine with E = 128 took 12 µs
  // walking them), a warp takes a group, 32 members a step. `visit(m, c, at)`: member m, its
  // count c, its place at (from `pos`); returns the group's length.
  // Combine: the cheaper of the two, a warp's step costing about 8 of a thread's (measured: the
  // small W = 8 combine 21.8 -> 20.3 µs, docs/perf.md "the combine's walk by cost"). The dispatch
  // keeps the member count: the same rule there cost it 0.3-0.5 µs through code generation.
  const int warps = nt >> 5;
  const bool byWarp = byExpert ? M > XF_THREAD_MEMBERS : ((W * G + warps - 1) / warps) * ((M + 31) / 32) * 8 < ((W * G + nt - 1) / nt) * M;
  const int lane32 = tid & 31;
  const int pairs = W * G, pairStep = byWarp ? nt >> 5 : nt;
  const auto walk = [&](int r, int g, i64 pos, auto visit) {
    if (byWarp) {
      for (int m0 = 0; m0 < M; m0 += 32) {
        const int m = m0 + lane32;
        const i64 c = member(r, g, m), upTo = warp_incl_scan_sat(c);
        const i64 before = __shfl_up_sync(0xffffffffu, upTo, 1);
        if (m < M) visit(m, c, sat_add(pos, lane32 == 0 ? 0 : before));
        pos = sat_add(pos, __shfl_sync(0xffffffffu, upTo, 31));
      }
    } else {
      for (int m = 0; m < M; ++m) {
        const i64 c = member(r, g, m);
        visit(m, c, pos);
        pos = sat_add(pos, c);
      }
    }
    return pos;
  };
  for (int t = byWarp ? tid >> 5 : tid; t < pairs; t += pairStep) {
    const int r = t / G, g = t - r * G;
    const i64 len = walk(r, g, 0, [&](int m, i64, i64 at_) {
      const int src = byExpert ? m : g, e = byExpert ? g : m;
      if (src == me) dst[r * E + e] = at_;
      if (r == me) startsMe[src * E + e] = at_;
    });
    if (!byWarp || lane32 == 0) glen[t] = !byExpert ? len : len == 0 ? p.align : round_up_sat(len, p.align);
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
  // ... the places made absolute (entry i: receiver or source i / E, expert i % E) ...
  for (int i = tid; i < (int)N; i += nt) {
    const int q = i / E, e = i - q * E;
    dst[i] = sat_add(dst[i], glen[q * G + (byExpert ? e : me)]);
    startsMe[i] = sat_add(startsMe[i], glen[me * G + (byExpert ? e : q)]);
  }
  // ... and each receiver's first overrun, walked for the groups that end past its output.
  // (A group's verdict keys grow with its members, so the least key of every overrun is its first;
  // a group that ends within the output has every chunk within it: counts are not negative.)
  for (int t = byWarp ? tid >> 5 : tid; t < pairs; t += pairStep) {
    const int r = t / G, g = t - r * G;
    const i64 cap = hdr[r * XF_HDR + A2AV_X1_HEADER];
    const i64 end = g + 1 < G ? glen[t + 1] : total[r];
    if (end <= cap) continue;
    i64 at = (i64)X_NONE;
    walk(r, g, glen[t], [&](int m, i64 c, i64 at_) {
      const int src = byExpert ? m : g, e = byExpert ? g : m;
      if (at == (i64)X_NONE && c > cap - at_) at = byExpert ? (i64)e * (W + 1) + src : (i64)src * E + e;
    });
    // (By warp, each lane keeps its members' first; the padding's key is above every member's.)
    if (byExpert && at == (i64)X_NONE) at = (i64)g * (W + 1) + W;  // the padding passes
    if (at != (i64)X_NONE) atomicMin(&outAt[r], (unsigned long long)at);
  }
  // Every sender's verdict words, sent after its row (they have most likely arrived meanwhile).
  await1(A2AV_X1_AGREE, XF_VERDICT_WORDS, header(A2AV_X1_AGREE));
  __syncthreads();
  PROBE_CLOCK(11);
  if (st.abort) return;
  // The least verdict: any sender's own (the least key, then the lowest sender), else the lowest
  // receiver's overrun; found by one warp, a lane per sender.
  if (tid < 32) {
    i64 key = (i64)X_NONE;
    int who = W, over = W;
    for (int q0 = 0; q0 < W; q0 += 32) {
      const int q = q0 + tid;
      const unsigned bits = __ballot_sync(0xffffffffu, q < W && outAt[q] != X_NONE);
      if (over == W && bits != 0) over = q0 + __ffs(bits) - 1;
      const i64 k = q < W ? hdr[q * XF_HDR + A2AV_X1_AGREE] : (i64)X_NONE;
      if (k < key) key = k, who = q;
    }
    for (int d = 16; d > 0; d >>= 1) {
      const i64 k = __shfl_xor_sync(0xffffffffu, key, d);
      const int w = __shfl_xor_sync(0xffffffffu, who, d);
      if (k < key || (k == key && w < who)) key = k, who = w;
    }
    if (tid == 0) {
      st.fin = key == (i64)X_NONE ? X_NONE : (unsigned long long)who;
      if (st.fin != X_NONE) {
        st.v = read_verdict(hdr + who * XF_HDR + A2AV_X1_AGREE);
      } else if (over < W) {
        const int r = over;
        const i64 at = (i64)outAt[r];
        const int peer = byExpert ? (int)(at % (W + 1)) : (int)(at / E), e = byExpert ? (int)(at / (W + 1)) : (int)(at % E);
        st.v = XVerdict{x_key(X_PRIO_OUTPUT, r), r, peer == W && byExpert ? -1 : peer, e, total[r], hdr[r * XF_HDR + A2AV_X1_HEADER]};
      } else {
        st.v = XVerdict{(i64)X_NONE, 0, 0, 0, 0, 0};
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
    for (int k = tid; blockIdx.x == 0 && k < (int)N; k += nt) {
      const int src = byExpert ? k % W : k / E, e = byExpert ? k / W : k % E;
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
