// The MoE exchange's pieces (kernels/exchange.cu): parameters, verdicts, block-wide scans, the
// bounded receive of a round's packets, and the receiver's layout.
#pragma once
#include "config.cuh"
#include "copy.cuh"
#include "signals.cuh"
#if defined(A2AV_PROBE_WAIT_PRINT) && !defined(__CUDACC_RTC__)
#include <cstdio>
#endif

// Call kinds, as src/codes.ts numbers them.
#define X_1D 1
#define X_DISPATCH 2
#define X_COMBINE 3

// Mirrored by src/backends/cuda/kernel-params.ts (byte offsets in comments).
struct XParams {
  const u8* input;         // 0
  u8* const* outPeers;     // 8: output base on every rank (device table [W])
  const i64* splits;       // 16: 1d, dispatch: inSplits [W*E]; combine: inSplitsOffsets [2][E*W]
  i64* outSplitsOffsets;   // 24: [2][W*E]
  u8* const* padPeers;     // 32
  u8* pad;                 // 40: this rank's own signal pad
  i64* plan;               // 48: where the exchange leaves its plan (config.cuh: plan layout)
  i64* scratch;            // 56: the lane's scratch (config.cuh)
  u64 laneOffset;          // 64
  i64 rowBytes;            // 72
  i64 outId;               // 80
  i64 inRows;              // 88
  i64 outRows;             // 96
  i64 timeoutNs;           // 104
  i64 align;               // 112
  int kind;                // 120
  int experts;             // 124
  int rank;                // 128
  int world;               // 132
  int splitByPeer;         // 136: A2AV_SPLIT_*: the copy gives each destination its own blocks (copy.cuh)
  int sliceSpanLog2;       // 140: x_copy_slices' index: each entry covers 1 << this many send bytes
  const u8* input2;        // 144: x_fused's companion payload (moe.ts): the same rows, rowBytes2 each; null: none
  u8* const* outPeers2;    // 152
  i64 rowBytes2;           // 160
  const int* gatherRows;   // 168: send row r is input row gatherRows[r] (moe.ts GATHER); null: input rows in send order
  i64 gridBytes;           // 176: x_copy_slices: the send bytes its grid was sized for (a dispatch reads early up to there)
  i64 gatherInputRows;     // 184: with gatherRows: the rows the input holds (x_copy_slices_gather's early reads stay below)
  i64 callPlan;            // 192: the plan agreement word of x_exchange and x_fused: 0 a direct call, -1 a plan's exchange
  // x_scatter_index and x_copy_scatter (moe.ts SCATTER): a gathered dispatch read row by row of its input.
  const int* scatterSlots;  // 200: int32 [scatterRows][scatterTopk]: each (row, k)'s send row, -1 none
  u64* scatterDests;        // 208: u64 [scatterRows][scatterTopk]: where each (row, k)'s send row lands, 0 none
  const i64* scatterTokens; // 216: int64 [1]: the input rows this call sends from (read when it runs)
  i64 scatterTopk;          // 224
  i64 scatterRows;          // 232: the rows that may send (the host's bound), within the slots and the input
};
A2AV_LAYOUT_CHECK(__builtin_offsetof(XParams, scratch) == 56, "XParams.scratch");
A2AV_LAYOUT_CHECK(__builtin_offsetof(XParams, laneOffset) == 64, "XParams.laneOffset");
A2AV_LAYOUT_CHECK(__builtin_offsetof(XParams, align) == 112, "XParams.align");
A2AV_LAYOUT_CHECK(__builtin_offsetof(XParams, kind) == 120, "XParams.kind");
A2AV_LAYOUT_CHECK(__builtin_offsetof(XParams, world) == 132, "XParams.world");
A2AV_LAYOUT_CHECK(__builtin_offsetof(XParams, splitByPeer) == 136, "XParams.splitByPeer");
A2AV_LAYOUT_CHECK(__builtin_offsetof(XParams, input2) == 144, "XParams.input2");
A2AV_LAYOUT_CHECK(__builtin_offsetof(XParams, sliceSpanLog2) == 140, "XParams.sliceSpanLog2");
A2AV_LAYOUT_CHECK(__builtin_offsetof(XParams, gatherRows) == 168, "XParams.gatherRows");
A2AV_LAYOUT_CHECK(__builtin_offsetof(XParams, gridBytes) == 176, "XParams.gridBytes");
A2AV_LAYOUT_CHECK(__builtin_offsetof(XParams, gatherInputRows) == 184, "XParams.gatherInputRows");
A2AV_LAYOUT_CHECK(__builtin_offsetof(XParams, callPlan) == 192, "XParams.callPlan");
A2AV_LAYOUT_CHECK(__builtin_offsetof(XParams, scatterSlots) == 200, "XParams.scatterSlots");
A2AV_LAYOUT_CHECK(__builtin_offsetof(XParams, scatterRows) == 232, "XParams.scatterRows");
A2AV_LAYOUT_CHECK(sizeof(XParams) == 240, "XParams: X_PARAMS_BYTES");

// The send bytes a slice-grid dispatch may read before its index (x_copy_slices): its input, or
// the bytes its grid was sized for where fewer (a larger input may hold far more than is sent).
__device__ __forceinline__ i64 xs_readable_bytes(const XParams& p) {
  const i64 in = p.inRows * p.rowBytes;
  return in < p.gridBytes ? in : p.gridBytes;
}

// Row counts summed without wrapping: a sum past int64 reads INT64_MAX, which the host reports as
// overflow (the 1-D kernel's rules use it too).
__device__ __forceinline__ i64 sat_add(i64 a, i64 b) { return a > 0x7fffffffffffffffLL - b ? 0x7fffffffffffffffLL : a + b; }
__device__ __forceinline__ i64 clamp0(i64 v) { return v < 0 ? 0 : v; }

// Inclusive running sums across a warp (saturating; every lane takes part).
__device__ __forceinline__ i64 warp_incl_scan_sat(i64 v) {
  const int lane = threadIdx.x & 31;
  for (int d = 1; d < 32; d <<= 1) {
    const i64 t = __shfl_up_sync(0xffffffffu, v, d);
    if (lane >= d) v = sat_add(v, t);
  }
  return v;
}

// Exclusive running sums (saturating) of load(0) ... load(n - 1), by one warp, every lane taking
// part: store(i, the sum of the values before i) for each i; returns the total.
template <typename Load, typename Store>
__device__ __forceinline__ i64 warp_scan_each(int n, Load load, Store store) {
  const int lane = threadIdx.x & 31;
  i64 carry = 0;
  for (int base = 0; base < n; base += 32) {
    const int i = base + lane;
    i64 v = i < n ? load(i) : 0;
    for (int d = 1; d < 32; d <<= 1) {
      const i64 t = __shfl_up_sync(0xffffffffu, v, d);
      if (lane >= d) v = sat_add(v, t);
    }
    const i64 before = __shfl_up_sync(0xffffffffu, v, 1);
    if (i < n) store(i, sat_add(carry, lane == 0 ? 0 : before));
    carry = sat_add(carry, __shfl_sync(0xffffffffu, v, 31));
  }
  return carry;
}

// The warp's total of non-negative values (saturating, so the order does not matter), on every lane.
__device__ __forceinline__ i64 warp_sum_sat(i64 v) {
  for (int d = 16; d > 0; d >>= 1) v = sat_add(v, __shfl_xor_sync(0xffffffffu, v, d));
  return v;
}

// A verdict's key orders it as the rules do: the problem's priority on top, then the position the
// rules scan in (rank, then peer and expert). The least key over all ranks is the call's verdict.
#define X_NONE 0x7fffffffffffffffULL
#define X_PRIO_MISMATCH 0
#define X_PRIO_NEGATIVE 1
#define X_PRIO_INPUT 2
#define X_PRIO_OUTPUT 3
__device__ __forceinline__ i64 x_key(int prio, i64 index) { return ((i64)prio << 56) | index; }

struct XVerdict {
  i64 key;
  int rank, peer, expert;
  i64 needed, available;
};
__device__ __forceinline__ i64 verdict_word(const XVerdict& v, int j) {
  return j == 0 ? v.key : j == 1 ? v.rank : j == 2 ? v.peer : j == 3 ? v.expert : j == 4 ? v.needed : v.available;
}
__device__ __forceinline__ XVerdict read_verdict(const i64* w) { return XVerdict{w[0], (int)w[1], (int)w[2], (int)w[3], w[4], w[5]}; }
// A plan's verdict: [0] the status code (0: accepted), [1, 7) the verdict's words.
__device__ __forceinline__ XVerdict read_plan_verdict(const i64* plan) { return read_verdict(plan + 1); }

struct PlanArrays {
  i64 *rows, *src, *dst, *cum;
};
__device__ __forceinline__ PlanArrays plan_arrays(i64* plan, int W) {
  const i64 n = (i64)W * A2AV_MAX_EXPERTS;
  i64* a = plan + A2AV_PLAN_HEADER;
  return PlanArrays{a, a + n, a + 2 * n, a + 3 * n};
}

// Shared state of the one block that runs an exchange.
struct XBlockState {
  i64 seq, total;
  int abort;
  unsigned long long at, at2, mis, out, fin;
  XVerdict mine, all;
  i64 scan[33];
  i64 tmp[A2AV_MAX_EXPERTS];  // per expert block lengths, or per source totals (W <= 256)
  i64 len[A2AV_MAX_EXPERTS], first[A2AV_MAX_EXPERTS];  // receiver_verdict's groups: lengths, running sum at the first member
};

// The call's sequence number and fresh block state; false (and the gate shut, so x_copy moves
// nothing) when the lane has timed out.
__device__ __forceinline__ bool x_begin(XBlockState& st, LaneHeader* h, i64* gate) {
  pdl_wait();  // launched early (moe.ts): the kernel before has finished
  if (threadIdx.x == 0) {
    st.abort = ld_volatile(&h->abort.code) != A2AV_OK;
    if (st.abort) *gate = 1;
    st.seq = ld_volatile(&h->seq) + 1;
    st.at = st.at2 = st.mis = st.out = st.fin = X_NONE;
    st.mine = st.all = XVerdict{(i64)X_NONE, 0, 0, 0, 0, 0};
  }
  __syncthreads();
  return !st.abort;
}

// Exclusive running sums of get(0) .. get(n - 1) handed to put(i, sum) (negative values count as
// 0; sums saturate); returns the total. Every thread of the block calls it; blockDim.x is a
// multiple of 32. Each thread sums a run of consecutive values, so get's loads are independent.
template <class Get, class Put>
__device__ i64 block_scan_sat_by(i64 n, Get get, Put put, i64* sh) {
  const int tid = threadIdx.x, nt = blockDim.x, lane = tid & 31, warp = tid >> 5, warps = nt >> 5;
  const i64 chunk = (n + nt - 1) / nt, lo = (i64)tid * chunk, hi = lo + chunk < n ? lo + chunk : n;
  i64 s = 0;
  for (i64 i = lo; i < hi; ++i) s = sat_add(s, clamp0(get(i)));
  i64 v = s;
  for (int d = 1; d < 32; d <<= 1) {
    const i64 t = __shfl_up_sync(0xffffffffu, v, d);
    if (lane >= d) v = sat_add(v, t);
  }
  i64 before = __shfl_up_sync(0xffffffffu, v, 1);
  if (lane == 0) before = 0;
  if (lane == 31) sh[warp] = v;
  __syncthreads();
  if (tid == 0) {
    i64 run = 0;
    for (int w = 0; w < warps; ++w) {
      const i64 t = sh[w];
      sh[w] = run;
      run = sat_add(run, t);
    }
    sh[32] = run;
  }
  __syncthreads();
  i64 run = sat_add(sh[warp], before);
  for (i64 i = lo; i < hi; ++i) {
    const i64 c = clamp0(get(i));
    put(i, run);
    run = sat_add(run, c);
  }
  const i64 total = sh[32];
  __syncthreads();
  return total;
}
// The same from in[0, n) into out (in and out may not overlap).
__device__ i64 block_scan_sat(const i64* in, i64* out, i64 n, i64* sh) {
  return block_scan_sat_by(n, [&](i64 i) { return in[i]; }, [&](i64 i, i64 v) { out[i] = v; }, sh);
}

// What a round's waits share: the lane, the call's flag and the deadline.
struct XWait {
  LaneHeader* h;
  u32 flag;
  u64 deadline;
  int me, world;
  i64 seq;
};

// Where a round's packets go: packets [from, to) of every source's slot into dst[src * stride + j]
// (to < 0: up to the end of the source's counts, A2AV_X1_HEADER + the experts its agreement words
// say, already received); site names the wait.
struct XInbox {
  i64* dst;
  int stride, from, to, site;
};

// Waits for a round's packets and unpacks them. A wait past the deadline records the timeout in
// the lane's abort record (with how far the writer got) and sets st.abort.
template <typename Slot>
__device__ void receive(XBlockState& st, const XWait& w, Slot slot, const XInbox& in) {
  const int span = in.to >= 0 ? in.to - in.from : A2AV_X1_HEADER + A2AV_MAX_EXPERTS - in.from;
  for (i64 k = threadIdx.x; k < (i64)w.world * span; k += blockDim.x) {
    const int src = (int)(k / span), j = in.from + (int)(k % span);
    if (in.to < 0) {
      const i64 e = in.dst[(i64)src * in.stride + A2AV_X1_EXPERTS];
      if (j >= A2AV_X1_HEADER + (e < 0 ? 0 : e > A2AV_MAX_EXPERTS ? A2AV_MAX_EXPERTS : e)) continue;
    }
    i64 v;
    if (!ll_wait(slot(src) + j, w.flag, w.deadline, &v)) {
#ifdef A2AV_PROBE_WAIT_PRINT
      // What a timed-out wait saw: the whole packet (both flags) and where it lies, the same word
      // through an acquire (a stale copy near this SM, or a packet that never came?), and when.
      const uint4 seen = ll_load(slot(src) + j), fresh = ll_load_acquire(slot(src) + j);
      printf("x wait timeout: rank %d seq %lld site %d src %d word %d at %p: data %08x%08x flags %u %u (want %u), acquired flags %u %u, lane seq %lld\n", w.me, w.seq,
             in.site, src, j, (const void*)(slot(src) + j), seen.z, seen.x, seen.y, seen.w, w.flag, fresh.y, fresh.w, ld_volatile(&w.h->seq));
      if (j == 0) printf("x wait timeout: rank %d seq %lld site %d src %d: deadline %llu (the wait's start + the timeout), now %llu\n", w.me, w.seq, in.site, src, w.deadline, global_timer_ns());
#endif
      record_abort(w.h, StatusRecord{A2AV_ERR_TIMEOUT, w.me, src, w.seq, v, w.me, w.seq, in.site});
      st.abort = 1;
      break;
    }
    in.dst[(i64)src * in.stride + j] = v;
  }
  __syncthreads();
}

// Agreement word j of a call (A2AV_X1_AGREE of them; plan: its plan word).
__device__ __forceinline__ i64 agree_word(const XParams& p, int j, i64 plan) {
  return j == 0 ? p.kind : j == 1 ? plan : j == 2 ? p.rowBytes : j == 3 ? p.outId : j == 4 ? p.experts : p.align;
}

// The field each agreement word names in a mismatch (A2AV_X1_AGREE of them, in the rules' order).
__device__ __forceinline__ int agree_field(int j) {
  return j == 0 ? A2AV_FIELD_KIND : j == 1 ? A2AV_FIELD_PLAN : j == 2 ? A2AV_FIELD_ROW_BYTES : j == 3 ? A2AV_FIELD_OUTPUT : j == 4 ? A2AV_FIELD_EXPERTS : A2AV_FIELD_ALIGN;
}

// Every rank's agreement words (a[q * stride + j]) against rank 0's: the mismatch verdict naming
// the lowest rank that differs and its first differing word, else key X_NONE. Every rank holds
// the same words and a mismatch outranks every other verdict, so every rank decides a mismatch
// here alone, with no counts and no answer round (its peers may be in another kernel: x_exchange,
// x_fused or x_check). `mis` is shared, X_NONE on entry; every thread of the block calls it.
__device__ XVerdict agree_verdict(const i64* a, int stride, int W, unsigned long long& mis) {
  for (int q = threadIdx.x; q < W; q += blockDim.x)
    for (int j = 0; j < A2AV_X1_AGREE; ++j)
      if (a[(i64)q * stride + j] != a[j]) {
        atomicMin(&mis, (unsigned long long)q);
        break;
      }
  __syncthreads();
  if (mis == X_NONE) return XVerdict{(i64)X_NONE, 0, 0, 0, 0, 0};
  const int q = (int)mis;
  const i64* b = a + (i64)q * stride;
  int j = 0;
  while (b[j] == a[j]) ++j;
  return XVerdict{x_key(X_PRIO_MISMATCH, q), q, 0, agree_field(j), b[j], a[j]};
}

// The receiver's verdict, the calls matching: the least of every sender's own verdict and this
// receiver's output overrun. Fills starts[src * A2AV_MAX_EXPERTS + e] with where each source's
// chunk for each expert lands.
__device__ void receiver_verdict(XBlockState& st, const XParams& p, const i64* xin, i64* starts) {
  const int W = p.world, E = p.experts, tid = threadIdx.x, nt = blockDim.x;
  const i64 cap = p.outRows;
  const auto count = [&](int src, int e) { return clamp0(xin[(i64)src * A2AV_X1_WORDS + A2AV_X1_HEADER + e]); };
  for (int q = tid; q < W; q += nt) atomicMin(&st.at2, (unsigned long long)xin[(i64)q * A2AV_X1_WORDS + A2AV_X1_AGREE]);
  __syncthreads();
  const bool byExpert = p.kind == X_DISPATCH;
  const int groups = byExpert ? E : W, members = byExpert ? W : E;
  // Groups of a few members (a dispatch's W sources): a thread a group walks them. Many (a
  // combine's E experts): the layout as one sequence, group by group, with running sums over all
  // of it by every thread (a thread a group summed E counts one load after another: 30 us of a
  // combine at W = 8, E = 256), parked in starts until each is moved by its group's start.
  const bool flat = members > 32;
  const int n = groups * members;  // <= 256 x 256
  const auto srcOf = [&](int f) { return byExpert ? f % members : f / members; };
  const auto expertOf = [&](int f) { return byExpert ? f / members : f % members; };
  const auto slot = [&](int f) { return starts + (i64)srcOf(f) * A2AV_MAX_EXPERTS + expertOf(f); };
  const auto padded = [&](i64 t) { return !byExpert ? t : t == 0 ? p.align : sat_add(t, (p.align - t % p.align) % p.align); };
  i64 all = 0;
  if (flat) {
    all = block_scan_sat_by((i64)n, [&](i64 f) { return count(srcOf((int)f), expertOf((int)f)); }, [&](i64 f, i64 v) { *slot((int)f) = v; }, st.scan);
    for (int g = tid; g < groups; g += nt) {
      const i64 at = *slot(g * members), next = g + 1 < groups ? *slot((g + 1) * members) : all;
      st.first[g] = at;
      st.len[g] = padded(next - at);  // past a saturated sum the layout is refused below, whatever this is
    }
  } else {
    for (int g = tid; g < groups; g += nt) {
      i64 t = 0;
      for (int m = 0; m < members; ++m) t = sat_add(t, byExpert ? count(m, g) : count(g, m));
      // an expert's block: a multiple of align rows, and at least align rows
      st.len[g] = padded(t);
    }
  }
  __syncthreads();
  const i64 total = block_scan_sat(st.len, st.tmp, groups, st.scan);
  // A saturated count sum is the total the verdict names, as summed group by group.
  if (tid == 0) st.total = all == 0x7fffffffffffffffLL ? all : total;
  __syncthreads();
  // The first overrun in layout order: the least key, as each group's keys rise through it.
  const auto overrun = [&](int src, int e) { atomicMin(&st.out, (unsigned long long)(byExpert ? (i64)e * (W + 1) + src : (i64)src * E + e)); };
  if (flat) {
    for (int f = tid; f < n; f += nt) {
      const int src = srcOf(f), e = expertOf(f);
      const i64 pos = sat_add(st.tmp[f / members], *slot(f) - st.first[f / members]), c = count(src, e);
      if (c > cap - pos) overrun(src, e);
      *slot(f) = pos;
    }
  } else {
    for (int g = tid; g < groups; g += nt) {
      i64 pos = st.tmp[g];
      bool over = false;
      for (int m = 0; m < members; ++m) {
        const int src = byExpert ? m : g, e = byExpert ? g : m;
        const i64 c = count(src, e);
        if (!over && c > cap - pos) {
          overrun(src, e);
          over = true;
        }
        starts[(i64)src * A2AV_MAX_EXPERTS + e] = pos;
        pos = sat_add(pos, c);
      }
    }
  }
  for (int g = tid; byExpert && g < groups; g += nt) {
    const i64 end = g + 1 < groups ? st.tmp[g + 1] : st.total;
    if (end > cap) atomicMin(&st.out, (unsigned long long)((i64)g * (W + 1) + W));  // the padding passes
  }
  __syncthreads();
  if (tid == 0) {
    XVerdict v{(i64)X_NONE, 0, 0, 0, 0, 0};
    if (st.at2 != X_NONE)
      for (int q = 0; q < W; ++q)
        if ((unsigned long long)xin[(i64)q * A2AV_X1_WORDS + A2AV_X1_AGREE] == st.at2) {
          v = read_verdict(xin + (i64)q * A2AV_X1_WORDS + A2AV_X1_AGREE);
          break;
        }
    const i64 key = x_key(X_PRIO_OUTPUT, p.rank);
    if (st.out != X_NONE && key < v.key) {
      const i64 at = (i64)st.out;
      const int peer = byExpert ? (int)(at % (W + 1)) : (int)(at / E), e = byExpert ? (int)(at / (W + 1)) : (int)(at % E);
      v = XVerdict{key, p.rank, peer == W && byExpert ? -1 : peer, e, st.total, cap};
    }
    st.mine = v;
  }
  __syncthreads();
}

// The call a kernel serves: its parameters, its lane, its gate and its sequence number.
struct XCall {
  const XParams& p;
  LaneHeader* h;
  u8* lane;
  i64* gate;
  i64 seq;
};

// A refused call, by one thread: its record in the lane's ring; the plan (when the exchange makes
// one) keeps the verdict for its moves; the gate keeps x_copy from moving anything.
__device__ void refuse(const XCall& c, const XVerdict& v, bool intoPlan) {
  const int prio = (int)(v.key >> 56);
  const i64 code = prio == X_PRIO_MISMATCH   ? A2AV_ERR_MISMATCH
                   : prio == X_PRIO_NEGATIVE ? A2AV_ERR_NEGATIVE
                   : prio == X_PRIO_INPUT    ? A2AV_ERR_INPUT_OVERFLOW
                                             : A2AV_ERR_OUTPUT_OVERFLOW;
  const XParams& p = c.p;
  // A mismatch's expert word names the field that differs (A2AV_FIELD_*), whatever the call.
  const i64 expert = p.kind == X_1D && code != A2AV_ERR_MISMATCH ? -1 : v.expert;
  record_refusal(c.h, StatusRecord{code, v.rank, v.peer, v.needed, v.available, p.rank, c.seq, expert});
  if (intoPlan) {
    for (int j = 0; j < 6; ++j) p.plan[1 + j] = verdict_word(v, j);
    p.plan[0] = code;
    p.plan[8] = 0;
    p.plan[11] = c.seq;  // a refused plan is named in its moves as an accepted one is
  }
  *c.gate = 1;
}

// An accepted exchange: outSplitsOffsets, and the plan's header. Every thread of the block calls it.
__device__ void accept(const XParams& p, const i64* xin, const i64* starts, i64* gate, i64 sent, i64 seq) {
  const int W = p.world, E = p.experts;
  const i64 n = (i64)W * E;
  const bool byExpert = p.kind == X_DISPATCH;
  for (i64 k = threadIdx.x; k < n; k += blockDim.x) {
    const int src = byExpert ? (int)(k % W) : (int)(k / E), e = byExpert ? (int)(k / W) : (int)(k % E);
    p.outSplitsOffsets[k] = xin[(i64)src * A2AV_X1_WORDS + A2AV_X1_HEADER + e];
    p.outSplitsOffsets[n + k] = starts[(i64)src * A2AV_MAX_EXPERTS + e];
  }
  if (threadIdx.x == 0) {
    p.plan[0] = A2AV_OK;
    p.plan[8] = sent;
    p.plan[9] = E;
    p.plan[10] = p.kind;
    p.plan[11] = seq;
    *gate = 0;
  }
}

// A rank's send bytes as chunks, in (peer, expert) order: chunk i is rows[i] rows from source row
// src[i] of the input to destination row dst[i] of peer i / E's output; cum[i] rows come before it.
struct XChunks {
  const i64 *rows, *src, *dst, *cum;
  u8* const* out;  // output base on every rank
  const u8* input;
  i64 n, rb;
  int E;
};

// Through the gather table (the token group's dispatch reads each row from the tokens themselves,
// no staging copy in send order): the row of a chunk that holds its byte `off`, then the bytes.
__device__ __forceinline__ i64 wide_quotient(i64 a, i64 b) { return a / b; }
__device__ __forceinline__ i64 row_quotient(i64 off, i64 rb) {
  return off <= 0xffffffffll && rb <= 0xffffffffll ? (i64)((u32)off / (u32)rb) : wide_quotient(off, rb);
}
// Rows not in whole 16-byte words (the token group gathers only rows that are): byte by byte.
__device__ __forceinline__ void copy_gathered_bytes(u8* to, const XChunks& c, const int* gather, i64 i, i64 cs, i64 x, i64 y) {
  for (i64 b = x + threadIdx.x; b < y; b += blockDim.x) {
    const i64 q = row_quotient(b - cs, c.rb);
    to[b - cs] = c.input[(i64)gather[c.src[i] + q] * c.rb + (b - cs - q * c.rb)];
  }
}

// Copies bytes [lo, hi) of the send bytes (hi - lo <= blockDim.x * 16 * A2AV_COPY_UNROLL), by one
// block. Aligned (rows of whole 16-byte words, 16-byte aligned bases): every load of the tile is
// issued before any store, so a tile costs one memory round trip however many chunks it spans;
// small MoE steps are made of short chunks (4 rows of 4 KiB), which chunk-by-chunk copies would
// pay a round trip each. Gather (with a table `gather`, send row -> input row: XParams.gatherRows)
// is compiled into kernels of its own, x_fused_gather and x_copy_gather: inside x_fused and x_copy
// its state made them spill (64 registers; 312 and 184 bytes) and every call slower.
template <bool Gather>
__device__ void copy_tile(const XChunks& c, const int* gather, i64 lo, i64 hi, bool aligned) {
  i64 a = 0, b = c.n - 1;  // the last chunk starting at or before byte lo (running sums ascend)
  while (a < b) {
    const i64 m = (a + b + 1) >> 1;
    if (c.cum[m] * c.rb <= lo) a = m;
    else b = m - 1;
  }
  if (aligned) {
    uint4 v[A2AV_COPY_UNROLL];
    u8* d[A2AV_COPY_UNROLL];
    int row[A2AV_COPY_UNROLL], inRow[A2AV_COPY_UNROLL];  // Gather: send rows < 2^31, row sizes too
    i64 k = a;
#pragma unroll
    for (int u = 0; u < A2AV_COPY_UNROLL; ++u) {
      const i64 x = lo + ((i64)u * blockDim.x + threadIdx.x) * 16;
      d[u] = nullptr;
      if (x < hi) {
        // Empty chunks share the next one's start. A few steps cover long rows; past them (short
        // rows, e.g. the token group's metadata beside its rows: 256 chunks in one tile) a search.
        int steps = 0;
        while (k + 1 < c.n && c.cum[k + 1] * c.rb <= x && ++steps <= 8) ++k;
        if (steps > 8) {
          i64 b2 = c.n - 1;
          while (k < b2) {
            const i64 m = (k + b2 + 1) >> 1;
            if (c.cum[m] * c.rb <= x) k = m;
            else b2 = m - 1;
          }
        }
        const i64 off = x - c.cum[k] * c.rb;
        d[u] = c.out[k / c.E] + c.dst[k] * c.rb + off;
        if (!Gather || !gather) {
          v[u] = ld_stream((const uint4*)(c.input + c.src[k] * c.rb + off));
        } else {
          const i64 q = row_quotient(off, c.rb);
          row[u] = (int)(c.src[k] + q);
          inRow[u] = (int)(off - q * c.rb);
        }
      }
    }
    if (Gather && gather) {
      // Every word's table entry first, then every word's load: the tile waits for the table
      // (small and cached) once, not once a word.
#pragma unroll
      for (int u = 0; u < A2AV_COPY_UNROLL; ++u)
        if (d[u]) row[u] = __ldg(gather + row[u]);
#pragma unroll
      for (int u = 0; u < A2AV_COPY_UNROLL; ++u)
        if (d[u]) v[u] = ld_stream((const uint4*)(c.input + (i64)row[u] * c.rb + inRow[u]));
    }
#pragma unroll
    for (int u = 0; u < A2AV_COPY_UNROLL; ++u)
      if (d[u]) *(uint4*)d[u] = v[u];
    return;
  }
  for (i64 i = a; i < c.n && c.cum[i] * c.rb < hi; ++i) {
    const i64 cs = c.cum[i] * c.rb, ce = cs + clamp0(c.rows[i]) * c.rb;
    const i64 x = cs > lo ? cs : lo, y = ce < hi ? ce : hi;
    if (x >= y) continue;
    u8* const to = c.out[i / c.E] + c.dst[i] * c.rb;
    if (!Gather || !gather) copy_bytes(to + (x - cs), c.input + c.src[i] * c.rb + (x - cs), (u64)(y - x));
    else copy_gathered_bytes(to, c, gather, i, cs, x, y);
  }
}

// This block's tiles of the send bytes [0, bytes): tiles b, b + B, ... for block b of B; with
// split (config.cuh split_wanted: large calls, ranks on several GPUs), the blocks split between
// destinations first (split_by_peer), whose bytes are contiguous since chunks go in (peer, expert)
// order. startOf(k): where peer k's bytes start (k = W: `bytes`), read 3W times by one thread, so
// from shared memory (x_fused's running sums are there; x_copy stages the W + 1 starts).
// `block`: this block's place among the grid's (default its index; x_fused gives a second payload
// the blocks in reverse, so block 0, which waits for the call's completion, takes its last tiles).
template <class StartOf, class Tile>
__device__ __forceinline__ void for_each_tile(i64 bytes, int W, int split, StartOf startOf, i64 block, Tile copyTile) {
  const i64 tile = (i64)blockDim.x * 16 * A2AV_COPY_UNROLL;
  __shared__ int sSplit, sSeg;
  __shared__ i64 sFirst, sQuota;
  if (threadIdx.x == 0)
    sSplit = split_wanted(split, bytes) && bytes > 0 && split_by_peer_with(W, [&](int k) { return startOf(k + 1) - startOf(k); }, bytes, gridDim.x, block, &sSeg, &sFirst, &sQuota);
  __syncthreads();
  i64 start = block * tile, step = (i64)gridDim.x * tile, end = bytes;
  if (sSplit) {
    start = startOf(sSeg) + (block - sFirst) * tile;
    step = sQuota * tile;
    end = startOf(sSeg + 1);
  }
  for (i64 lo = start; lo < end; lo += step) copyTile(lo, lo + tile < end ? lo + tile : end);
}
template <bool Gather = false, class StartOf>
__device__ __forceinline__ void copy_send_bytes(const XChunks& c, i64 bytes, bool aligned, int split, StartOf startOf, i64 block = blockIdx.x, const int* gather = nullptr) {
  for_each_tile(bytes, (int)(c.n / c.E), split, startOf, block, [&](i64 lo, i64 hi) { copy_tile<Gather>(c, gather, lo, hi, aligned); });
}

// Per chunk, where its bytes start among the send bytes and two address biases: byte x of chunk k
// goes from src[k] + x to dst[k] + x. Laid out once a payload (x_fused), they spare copy_tile's
// aligned path a division and three 64-bit products a word (measured at W = 8 on one H200:
// docs/perf.md).
struct BiasedChunks {
  i64 *start, *dst, *src;
  i64 n;
};
// Chunk k's destination and source addresses less its start in the send bytes, so that its byte x
// goes from src + x to dst + x: x_fused's biased chunks and x_copy_slices' index entries.
struct ChunkBias {
  i64 dst, src;
};
// From the chunk's output (its peer's) itself, as xs_copy_across has it; chunk_bias from the table.
__host__ __device__ inline ChunkBias chunk_bias_to(const u8* out, const u8* input, i64 rb, i64 dstRow, i64 srcRow, i64 start) {
  return ChunkBias{(i64)out + dstRow * rb - start, (i64)input + srcRow * rb - start};
}
__host__ __device__ inline ChunkBias chunk_bias(u8* const* out, const u8* input, int E, i64 rb, i64 k, i64 dstRow, i64 srcRow, i64 start) {
  return chunk_bias_to(out[k / E], input, rb, dstRow, srcRow, start);
}
__host__ __device__ inline void bias_chunk(const BiasedChunks& b, const XChunks& c, i64 k) {
  const i64 s = c.cum[k] * c.rb;
  const ChunkBias a = chunk_bias(c.out, c.input, c.E, c.rb, k, c.dst[k], c.src[k], s);
  b.start[k] = s;
  b.dst[k] = a.dst;
  b.src[k] = a.src;
}
// The last chunk starting at or before byte x, searched from chunk k on (k <= it).
__host__ __device__ inline i64 biased_search(const i64* start, i64 n, i64 k, i64 x) {
  i64 z = n - 1;
  while (k < z) {
    const i64 m = (k + z + 1) >> 1;
    if (start[m] <= x) k = m;
    else z = m - 1;
  }
  return k;
}
// From chunk k, at or before byte x, to the chunk holding it: a few steps cover long chunks; past
// them (many short ones in one tile) a search. tests/chunk-lookup.test.ts checks it on the host.
__host__ __device__ inline i64 biased_chunk_from(const i64* start, i64 n, i64 k, i64 x) {
  int steps = 0;
  while (k + 1 < n && start[k + 1] <= x && ++steps <= 8) ++k;
  return steps > 8 ? biased_search(start, n, k, x) : k;
}
__device__ __forceinline__ void bias_chunks(const BiasedChunks& b, const XChunks& c) {
  for (i64 k = threadIdx.x; k < c.n; k += blockDim.x) bias_chunk(b, c, k);
}
// copy_tile's aligned path from biased chunks: every load of the tile before any store.
__device__ __forceinline__ void copy_tile_biased(const BiasedChunks& b, i64 lo, i64 hi) {
  i64 k = biased_search(b.start, b.n, 0, lo);
  uint4 v[A2AV_COPY_UNROLL];
  i64 d[A2AV_COPY_UNROLL];
#pragma unroll
  for (int u = 0; u < A2AV_COPY_UNROLL; ++u) {
    const i64 x = lo + ((i64)u * blockDim.x + threadIdx.x) * 16;
    d[u] = 0;
    if (x < hi) {
      k = biased_chunk_from(b.start, b.n, k, x);
      d[u] = b.dst[k] + x;
      v[u] = ld_stream((const uint4*)(b.src[k] + x));
    }
  }
#pragma unroll
  for (int u = 0; u < A2AV_COPY_UNROLL; ++u)
    if (d[u]) *(uint4*)d[u] = v[u];
}

// Whether copy_tile may take its aligned path: whole 16-byte words per row, every base aligned.
// Every thread of the block calls it.
__device__ __forceinline__ bool chunks_aligned(u8* const* out, int W, const u8* input, i64 rb) {
  bool ok = (rb & 15) == 0 && ((u64)input & 15) == 0;
  for (int r = threadIdx.x; r < W; r += blockDim.x) ok = ok && ((u64)out[r] & 15) == 0;
  return __syncthreads_and(ok);
}

// Where x_copy_slices finds a byte's chunk in a plan's running sums (cum, n chunks, rows of rb
// bytes), read through the read-only path on the device. tests/chunk-lookup.test.ts checks both on
// the host.
__host__ __device__ __forceinline__ i64 plan_word(const i64* p) {
#ifdef __CUDA_ARCH__
  return __ldg(p);
#else
  return *p;
#endif
}
// The last chunk starting at or before byte `at` (running sums ascend; an empty chunk shares its
// start with the next, which this finds instead).
__host__ __device__ inline i64 x_chunk_at(const i64* cum, i64 n, i64 rb, i64 at) {
  i64 a = 0, b = n - 1;
  while (a < b) {
    const i64 m = (a + b + 1) >> 1;
    if (plan_word(cum + m) * rb <= at) a = m;
    else b = m - 1;
  }
  return a;
}
// x_copy_slices' window: a block copies one slice, whose chunks it must find in as few dependent
// loads as it can, since the block lives about one memory round trip. Where the plan has at most
// XS_WINDOW chunks the block reads them all at once into shared memory; else it reads every
// stride-th running sum first (one load a thread), picks the last that starts at or before its
// slice (xs_base), and reads the XS_WINDOW chunks from there (xs_find looks inside; a word past
// the window, only where many chunks are shorter than a slice, takes x_chunk_at). Both are
// checked on the host by tests/chunk-lookup.test.ts.
// A probe's A2AV_PROBE_XS_WINDOW=n (A2AV_PROBE_DEFINES) narrows it: x_copy_slices' blocks then ask
// less static shared memory (10 KiB each at 256, 82 KiB an SM at eight blocks, where a2av_copy asks
// 16 bytes), to tell whether the SM's shared-memory carveout costs the copy (docs/perf.md).
#ifdef A2AV_PROBE_XS_WINDOW
#define XS_WINDOW A2AV_PROBE_XS_WINDOW
#else
#define XS_WINDOW 256
#endif
// x_copy_slices' blocks (moe.ts launches them with the same): XS_THREADS threads, a 16-byte word
// each, eight blocks an SM (32 registers). Four words a thread (16 KiB slices, each block finding
// its chunk itself) ran at 0.86-0.87 of the 1-D call at W = 8 on one H200 (docs/perf.md).
#define XS_THREADS 256
__host__ __device__ inline i64 xs_stride(i64 n) { return (n + XS_WINDOW - 1) / XS_WINDOW; }
// The first chunk of the window for a slice starting at byte lo: sample[j] = cum[j * stride].
__host__ __device__ inline i64 xs_base(const i64* sample, i64 n, i64 rb, i64 lo) {
  const i64 stride = xs_stride(n);
  i64 a = 0, b = (n + stride - 1) / stride - 1;
  while (a < b) {
    const i64 m = (a + b + 1) >> 1;
    if (sample[m] * rb <= lo) a = m;
    else b = m - 1;
  }
  return a * stride;
}
// Running sums past the last chunk: no byte is at or past it.
__host__ __device__ inline i64 xs_sentinel(i64 rb) { return 0x7fffffffffffffffll / rb; }
// The window's entry holding byte x (wcum: count running sums from the window's first chunk, whose
// start is at or before x, then the next chunk's or xs_sentinel); -1 when x is past the window.
__host__ __device__ inline int xs_find(const i64* wcum, int count, i64 rb, i64 x) {
  if (x >= wcum[count] * rb) return -1;
  int a = 0, b = count - 1;
  while (a < b) {
    const int m = (a + b + 1) >> 1;
    if (wcum[m] * rb <= x) a = m;
    else b = m - 1;
  }
  return a;
}

// x_copy_slices' index, after the lane's scratch words (x_slice_index writes it before each copy
// grid): word 0 the bytes this rank sends (-1: nothing to copy: the call was refused or aborted),
// word 1 unused, then XS_INDEX_ENTRIES entries of two words. Entry i covers send bytes
// [i * span, (i + 1) * span), span = 1 << XParams.sliceSpanLog2, a multiple of a block's slice
// (moe.ts picks the least that covers the grid's bytes): the destination and the source address
// less the send offset, so byte x of the span goes from src + x to dst + x; dst is XS_STRADDLES
// where the span runs across chunks or a base is not 16-byte aligned, and then src names the chunk
// holding the span's first byte where the span ends in the next chunk (x_copy_slices copies it from
// those two: xs_copy_across), or is -1: the lookup (a base unaligned, a span across more chunks or
// an empty one, or past the index). Where split entries are allowed (XsIndexOf.splits: a
// dispatch's index, exchange-slices.cuh), a span into the next chunk
// whose bytes come from the input in order on both sides is a split entry instead: dst = chunk k's
// destination base with bit 0 set, src = chunk k + 1's with the span's byte where k + 1 begins in
// its top 16 bits (xs_split_entry), so its slice is copied in the round of its index entry.
#define XS_INDEX_ENTRIES 65536
#define XS_STRADDLES 1
#define XS_SPLIT_SHIFT 48
#define XS_SPLIT_BASE ((((i64)1) << XS_SPLIT_SHIFT) - 1)
// 16-byte aligned (the entries are read as one 16-byte word): scratch_words(W) is odd for some W.
__host__ __device__ __forceinline__ i64 xs_index_word(int W) { return (scratch_words(W) + 1) & ~(i64)1; }
__host__ __device__ __forceinline__ i64* xs_index(i64* scratch, int W) { return scratch + xs_index_word(W); }
__host__ __device__ __forceinline__ const i64* xs_index(const i64* scratch, int W) { return scratch + xs_index_word(W); }
__host__ __device__ __forceinline__ longlong2* xs_entries(i64* index) { return (longlong2*)(index + 2); }
using XsEntry = ChunkBias;
// A split entry for a span whose bytes below `split` (its offset in the span) go to dst0 + x and
// the rest to dst1 + x; false where it cannot be told in one entry (a base past 48 bits, or at 0:
// dst would read XS_STRADDLES; an offset past 16 bits): such a span keeps the chunk it names.
__host__ __device__ inline bool xs_split_entry(i64 dst0, i64 dst1, i64 split, XsEntry* e) {
  if (dst0 <= 0 || dst0 > XS_SPLIT_BASE || dst1 <= 0 || dst1 > XS_SPLIT_BASE || ((dst0 | dst1) & 15) != 0 || split <= 0 || split >= ((i64)1 << 16)) return false;
  *e = XsEntry{dst0 | 1, dst1 | (split << XS_SPLIT_SHIFT)};
  return true;
}
// Whether an entry read as not XS_STRADDLES is a split entry, and where byte x of it goes (to + x);
// `mask`: the span's bytes less one.
__host__ __device__ __forceinline__ bool xs_is_split(i64 dst) { return (dst & 1) != 0; }
__host__ __device__ __forceinline__ i64 xs_split_to(i64 dst, i64 src, i64 x, i64 mask) {
  return (x & mask) < (i64)((u64)src >> XS_SPLIT_SHIFT) ? dst - 1 : (src & XS_SPLIT_BASE);
}
// What a call's index is made from (x_slice_index): its plan of n = W x E chunks, E experts a rank,
// rows of rb bytes, `total` bytes sent, spans of 1 << shift bytes, at most `entries` of them, each
// peer's output and this rank's input.
struct XsIndexOf {
  PlanArrays plan;
  i64 n;
  int E;
  i64 rb, total;
  int shift;
  i64 entries;
  u8* const* out;
  const u8* input;
  // Split entries allowed: only where the copy decodes them (a dispatch's x_copy_slices); a
  // combine never, whose path measured 2% slower with their decoding.
  bool splits;
};
// The entries of the spans that start in chunk k (none if it is empty: every byte below `total`
// lies in one non-empty chunk, so each entry is written once): emit(i, entry) for the t-th of
// every `nt` of them. One round of loads, then stores: x_slice_index gives a chunk to a warp,
// where a search for each span's chunk waited on a load at each of its steps.
template <class Emit>
__host__ __device__ inline void xs_chunk_entries(const XsIndexOf& of, i64 k, int t, int nt, Emit emit) {
  const PlanArrays& plan = of.plan;
  const i64 n = of.n, rb = of.rb, total = of.total, entries = of.entries;
  const int E = of.E, shift = of.shift;
  u8* const* out = of.out;
  const u8* input = of.input;
  const bool splits = of.splits;
  const i64 rows = plan_word(plan.rows + k), start = plan_word(plan.cum + k) * rb, end = start + rows * rb;
  const ChunkBias bias = chunk_bias(out, input, E, rb, k, plan_word(plan.dst + k), plan_word(plan.src + k), start);
  const i64 dst = bias.dst, src = bias.src;
  if (rows <= 0) return;
  const i64 span = (i64)1 << shift, last = ((end + span - 1) >> shift) < entries ? (end + span - 1) >> shift : entries;
  const bool aligned = ((dst | src) & 15) == 0;
  // Where chunk k + 1 ends: a span that runs on past it (or into an empty k + 1) is looked up.
  const i64 nextEnd = k + 2 < n ? plan_word(plan.cum + k + 2) * rb : total;
  // Chunk k + 1's bases, for a split entry (both sides' bytes from the input in order).
  ChunkBias next{XS_STRADDLES, 0};
  if (splits && k + 1 < n && nextEnd > end && src == (i64)input) next = chunk_bias(out, input, E, rb, k + 1, plan_word(plan.dst + k + 1), plan_word(plan.src + k + 1), end);
  for (i64 i = ((start + span - 1) >> shift) + t; i < last; i += nt) {
    const i64 lo = i << shift, hi = lo + span < total ? lo + span : total;
    XsEntry e{dst, src};
    if (hi > end || !aligned) {
      const bool named = aligned && hi <= nextEnd && nextEnd > end;
      if (!(named && next.src == (i64)input && xs_split_entry(dst, next.dst, end - lo, &e))) e = XsEntry{XS_STRADDLES, named ? k : -1};
    }
    emit(i, e);
  }
}
#ifdef __CUDACC__
// Entry i as x_copy_slices reads it: past the index, a span to look up.
__device__ __forceinline__ longlong2 xs_entry_at(const i64* index, i64 i) {
  return i < XS_INDEX_ENTRIES ? __ldg((const longlong2*)(index + 2) + i) : make_longlong2(XS_STRADDLES, -1);
}
#endif

// From chunk k, at or before byte x, forward to the chunk holding x (a step or two unless chunks
// are shorter than the distance walked).
__host__ __device__ inline i64 x_chunk_from(const i64* cum, i64 n, i64 rb, i64 k, i64 x) {
  while (k + 1 < n && plan_word(cum + k + 1) * rb <= x) ++k;
  return k;
}
