// The MoE copy as a grid of short-lived blocks, for ranks that share one GPU: x_slice_index and
// x_copy_slices (kernels/exchange.cu has the calls they take part in).
#pragma once
#include "exchange.cuh"

// Grid mode for calls whose ranks share one GPU (moe.ts, A2AV_MOE_GRID): x_slice_index, then
// x_copy_slices. The copy is a2av_copy's shape, whose grid of short-lived blocks (256 threads, a
// 16-byte word each) reaches 0.98 of the copy engine on one GPU where resident sweeps stay at
// 0.85-0.92, provided a block lives about one memory round trip. A MoE call's send bytes run
// through up to W * E chunks, too many for every block to search (measured at W = 8 on one H200,
// 256 MiB: a lookup by every block, in shared memory, held the copy to 0.86-0.87 of the 1-D call).
// So x_slice_index writes where each span of the send bytes goes once (exchange.cuh
// xs_chunk_entries), and a block of x_copy_slices reads its spans' entries in the same round as
// its source words where it can (a dispatch's send bytes are its input in order, so those are read
// before the plan), then stores. A span whose bytes run from one chunk into the next (about one a
// chunk) is copied from a split entry in the same round where its bytes come from the input in
// order (a dispatch), else from those two chunks after reading them (xs_copy_across); one across
// more chunks, or past the index, takes the lookup (xs_copy_lookup). x_copy_slices_gather: the
// same for a dispatch whose rows are read through XParams.gatherRows (the token group's rows, read
// from its x): a dispatch sends its send rows in order, so send byte x comes from send row
// x / rowBytes, wherever the plan sends it; the table and the word are both read before the index.

#ifdef A2AV_PROBE_XS_LOOKUPS  // a probe's count of slices that took the lookup, printed by x_slice_index
#ifndef __CUDACC_RTC__
#include <cstdio>
#endif
__device__ unsigned long long xsLookups;
#endif

// Whether a slice grid's send bytes are its input in order (a dispatch's, a gathered one's through
// its table), so its words are read before the index and its spans into the next chunk may be
// split entries: x_slice_index and x_copy_slices must agree. A gathered payload takes the grid as
// a dispatch only (moe.ts).
__device__ __forceinline__ bool xs_in_order(const XParams& p) { return p.kind == X_DISPATCH && ((u64)p.input & 15) == 0; }

// A dispatch's spans into the next chunk are split entries (exchange.cuh xs_split_entry), copied in
// the round of their index entry. Measured at W = 8 on one H200 (14 KiB rows, against the same run
// without them): dispatch E = 256 1131 -> 1118 us, E = 16 and the combine within noise, E = 64
// 0.5% slower (docs/perf.md). A probe's A2AV_PROBE_XS_NO_SPLITS (A2AV_PROBE_DEFINES) leaves them
// out, for a same-run comparison.
#ifdef A2AV_PROBE_XS_NO_SPLITS
#define XS_SPLITS false
#else
#define XS_SPLITS true
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
  PROBE_STAMP(p.rank, 2);
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
  XsIndexOf of;
  of.plan = plan_arrays(p.plan, W);
  of.n = n;
  of.E = p.experts;
  of.rb = p.rowBytes;
  of.total = total;
  of.shift = shift;
  of.entries = entries;
  of.out = p.outPeers;
  of.input = p.input;
  of.splits = XS_SPLITS && xs_in_order(p);
  longlong2* out = xs_entries(index);
  const int lane32 = threadIdx.x & 31;
  for (i64 k = ((i64)blockIdx.x * blockDim.x + threadIdx.x) >> 5; k < n; k += ((i64)gridDim.x * blockDim.x) >> 5)
    xs_chunk_entries(of, k, lane32, 32, [&](i64 i, XsEntry e) { out[i] = make_longlong2(e.dst, e.src); });
  PROBE_STAMP_LAST(p.rank, 7);
}

// Send byte x's send row (q) and the input row its table entry names.
__device__ __forceinline__ int gather_entry(const int* gather, i64 rb, i64 x, u32& q) {
  q = (u32)x / (u32)rb;
  int row;
  asm("ld.relaxed.gpu.global.s32 %0, [%1];" : "=r"(row) : "l"(gather + q));  // not volatile: both slices' tables first
  return row;
}
// Send byte x of a gathered dispatch: byte x % rb of input row gather[x / rb]. The host takes this
// grid only where the table's rows hold under 4 GiB (moe.ts), so the quotient fits 32 bits (a
// 64-bit one made the copy's short path spill). The table was written before the exchange ahead
// of this copy had finished (the token group's route), so it can be read before pdl_wait; at gpu
// scope, past any copy of a line an SM kept from an earlier call.
__device__ __forceinline__ const u8* gathered_byte(const u8* input, const int* gather, i64 rb, i64 x) {
  u32 q;
  const int row = gather_entry(gather, rb, x, q);
  return input + (i64)row * rb + (x - (i64)q * rb);
}
// The same before the index, where x may lie past the rows this call sends: their entries are not
// this call's (stale, or never written), so a row outside the input's `rows` is not read (null).
// Reading only the sent rows' entries would wait for the exchange's count first: every block of
// the grid asking one word at gpu scope made 128-token dispatches 10-15% slower, 4096-token ones
// up to 30% (docs/perf.md).
__device__ __forceinline__ const u8* gathered_byte_early(const u8* input, const int* gather, i64 rows, i64 rb, i64 x) {
  u32 q;
  const int row = gather_entry(gather, rb, x, q);
  return row >= 0 && row < rows ? input + (i64)row * rb + (x - (i64)q * rb) : nullptr;
}

// A span that runs across chunks (or lies past the index, or is unaligned): each thread finds its
// words' chunks. Where the plan has at most XS_WINDOW chunks the block reads them all at once
// into shared memory; else every stride-th running sum first, then XS_WINDOW chunks from the last
// that starts at or before the slice (exchange.cuh: xs_base, xs_find; a word past the window takes
// x_chunk_at). Kept out of line: x_copy_slices' usual path does not pay its registers.
// Gather: `gather` is a gathered dispatch's table (send byte y's source is gathered_byte(y)).
template <bool Gather>
static __device__ __noinline__ void xs_copy_lookup(const u8* input, const int* gather, u8* const* outPeers, i64* planWords, int W, int E, i64 rb, i64 lo, i64 hi) {
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
        outOf(k)[dst * rb + off] = Gather ? *gathered_byte(input, gather, rb, y) : input[src * rb + off];
      }
    } else {
      i64 src, dst;
      const i64 k = at(x, &src, &dst);
      const i64 off = x - startOf(k) * rb;
      const u8* from = Gather ? gathered_byte(input, gather, rb, x) : input + src * rb + off;
      *(uint4*)(outOf(k) + dst * rb + off) = ld_stream((const uint4*)from);
    }
  }
  __syncthreads();  // the shared words are the next span's
}

// A span across chunks whose first chunk the index names (k): the index names one only where every
// byte of the span lies in k or k + 1 (xs_chunk_entries), so eight threads read both chunks'
// starts, rows and outputs in one round, where the lookup took two rounds and a window in shared
// memory (with 64 or more experts a rank a span in thirty took it: docs/perf.md). `inOrder`: a
// dispatch's source is its input in order (a gathered one's, its table's row) whatever the
// chunk, so its word is read in the same round. A peer's output off 16 bytes: byte by byte.
template <bool Gather>
static __device__ __noinline__ void xs_copy_across(const u8* input, const int* gather, u8* const* outPeers, i64* planWords, int W, int E, i64 rb, i64 k, i64 lo, i64 hi, bool inOrder) {
  // [0, 1]: the starts of k and k + 1 (rows), [2, 3]: their source rows, [4, 5]: their
  // destination rows, [6, 7]: their outputs.
  __shared__ i64 sWords[8];
  const int tid = threadIdx.x;
  const PlanArrays plan = plan_arrays(planWords, W);
  const i64 x = lo + 16 * (i64)tid;
  if (tid < 8) {
    const i64 c = k + (tid & 1);
    sWords[tid] = tid < 2 ? __ldg(plan.cum + c) : tid < 4 ? __ldg(plan.src + c) : tid < 6 ? __ldg(plan.dst + c) : (i64)outPeers[c / E];
  }
  const bool mine = x < hi;
  uint4 word;
  const bool early = mine && inOrder;
  if (early) word = ld_stream((const uint4*)(Gather ? gathered_byte(input, gather, rb, x) : input + x));
  __syncthreads();
  if (!mine) return;
  const int j = x < sWords[1] * rb ? 0 : 1;
  const ChunkBias b = chunk_bias_to((const u8*)sWords[6 + j], input, rb, sWords[4 + j], sWords[2 + j], sWords[j] * rb);
  u8* const to = (u8*)b.dst;  // byte x goes from from + x to to + x
  const u8* const from = (const u8*)b.src;
  if (((u64)(to + x) & 15) != 0) {
    for (i64 y = x; y < x + 16 && y < hi; ++y) to[y] = Gather ? *gathered_byte(input, gather, rb, y) : from[y];
    return;
  }
  *(uint4*)(to + x) = early ? word : ld_stream((const uint4*)(Gather ? gathered_byte(input, gather, rb, x) : from + x));
}

// A split entry's slice (exchange.cuh xs_split_entry) past a block's first two: out of line, as
// decoding it inline made xs_copy_rest spill on every combine block's third slice (2% at 256 MiB).
template <bool Gather>
static __device__ __noinline__ void xs_copy_split(const u8* input, const int* gather, i64 rb, longlong2 e, i64 lo, i64 total, i64 mask) {
  const i64 x = lo + 16 * (i64)threadIdx.x;
  if (x < total) *(uint4*)(xs_split_to(e.x, e.y, x, mask) + x) = ld_stream((const uint4*)(Gather ? gathered_byte(input, gather, rb, x) : input + x));
}

// The slices of [lo, total) a grid's stride apart, from the index or the lookup: for the slices
// past a block's first (a grid sized from a low hint or a budget) and spans across chunks. Out of
// line, so that x_copy_slices' one-slice path keeps nothing live across a call (no spills).
template <bool Gather>
static __device__ __noinline__ void xs_copy_rest(const u8* input, const int* gather, u8* const* outPeers, i64* plan, int W, int E, i64 rb, int shift, const i64* index, i64 lo, i64 total, bool inOrder) {
  const i64 slice = (i64)blockDim.x * 16, step = (i64)gridDim.x * slice;
  for (; lo < total; lo += step) {
    const longlong2 e = xs_entry_at(index, lo >> shift);
    if (e.x != XS_STRADDLES && !(XS_SPLITS && inOrder && xs_is_split(e.x))) {
      const i64 x = lo + 16 * (i64)threadIdx.x;
      if (x < total) *(uint4*)(e.x + x) = ld_stream((const uint4*)(Gather ? gathered_byte(input, gather, rb, x) : (const u8*)e.y + x));
    } else if (XS_SPLITS && e.x != XS_STRADDLES) {
      xs_copy_split<Gather>(input, gather, rb, e, lo, total, ((i64)1 << shift) - 1);
    } else if (e.y >= 0) {
      xs_copy_across<Gather>(input, gather, outPeers, plan, W, E, rb, e.y, lo, lo + slice < total ? lo + slice : total, inOrder);
    } else {
#ifdef A2AV_PROBE_XS_LOOKUPS
      if (threadIdx.x == 0) atomicAdd(&xsLookups, 1ull);
#endif
      xs_copy_lookup<Gather>(input, gather, outPeers, plan, W, E, rb, lo, lo + slice < total ? lo + slice : total);
    }
  }
}

#ifndef A2AV_PROBE_XS_NO_SPLITS
template <bool B>
struct XsSplits {
  static constexpr bool value = B;
};
#endif

// Block b copies bytes [b * slice, (b + 1) * slice) of this rank's send bytes, a 16-byte word a
// thread, and the slice a grid's stride on in the same round when there is one (moe.ts sizes the
// grid for two slices a block, a combine's for three: a combine's source is known only from the
// index, so its blocks live two memory round trips, and two words a thread keep twice the bytes in
// flight); slices further on (a grid sized for three, from a low hint or a budget) one after another.
// The host launches it for 16-byte rows and an aligned input only (x_copy takes the others), and
// x_copy_slices_gather for dispatches only.
template <bool Gather>
__device__ __forceinline__ void x_copy_slices_run(const XParams& p) {
  const int tid = threadIdx.x;
  const i64 slice = (i64)blockDim.x * 16, step = (i64)gridDim.x * slice;
  const i64 first = (i64)blockIdx.x * slice, mine = first + 16 * (i64)tid, mine2 = mine + step;
  // A dispatch's send bytes are its input in order: its words can be read before the index.
  const i64 readable = xs_readable_bytes(p);
  const bool inOrder = (Gather || p.kind == X_DISPATCH) && ((u64)p.input & 15) == 0;  // xs_in_order, known for Gather
  const int* gather = Gather ? p.gatherRows : nullptr;
  // Send byte x's source: base + x, base the input or an index entry's source (a gathered
  // dispatch needs neither).
  const auto from = [&](const void* base, i64 x) { return (const uint4*)(Gather ? gathered_byte(p.input, gather, p.rowBytes, x) : (const u8*)base + x); };
  bool early = inOrder && mine + 16 <= readable, early2 = inOrder && mine2 + 16 <= readable;
  uint4 word, word2;
  if constexpr (Gather) {
    const u8* at = early ? gathered_byte_early(p.input, gather, p.gatherInputRows, p.rowBytes, mine) : nullptr;
    const u8* at2 = early2 ? gathered_byte_early(p.input, gather, p.gatherInputRows, p.rowBytes, mine2) : nullptr;
    early = at != nullptr;
    early2 = at2 != nullptr;
    if (early) word = ld_stream((const uint4*)at);
    if (early2) word2 = ld_stream((const uint4*)at2);
  } else {
    if (early) word = ld_stream((const uint4*)(p.input + mine));
    if (early2) word2 = ld_stream((const uint4*)(p.input + mine2));
  }
  pdl_wait();     // x_slice_index has finished
  pdl_release();  // x_done_open may wait in a slot beside us
  PROBE_STAMP(p.rank, 3);
  const i64* index = xs_index(p.scratch, p.world);
  // Written by x_slice_index, the kernel before this one: the read-only path serves every block.
  const int shift = p.sliceSpanLog2;
  const i64 total = __ldg(index);
  const longlong2 e = xs_entry_at(index, first >> shift), e2 = xs_entry_at(index, (first + step) >> shift);
#ifndef A2AV_PROBE_NO_COPY
  if (first >= total) return;
  // Both slices from the index in one round, or the first alone, or the lookup from the first. A
  // split entry's source is the input in order (its src word holds its other chunk's base).
  const bool one = e.x != XS_STRADDLES, two = one && first + step < total && e2.x != XS_STRADDLES;
#ifndef A2AV_PROBE_XS_NO_SPLITS
  const i64 mask = ((i64)1 << shift) - 1;
  // Instantiated twice: a combine's path (no split entries) keeps no trace of their decoding.
  const auto firstSlices = [&](auto splits) {
    constexpr bool S = decltype(splits)::value;
    const auto to = [&](const longlong2& f, i64 x) { return (u8*)(S && xs_is_split(f.x) ? xs_split_to(f.x, f.y, x, mask) : f.x); };
    const auto base = [&](const longlong2& f) { return S && xs_is_split(f.x) ? (const void*)p.input : (const void*)f.y; };
    if (two) {
      const uint4 w = early ? word : ld_stream(from(base(e), mine));
      const uint4 w2 = mine2 >= total ? w : early2 ? word2 : ld_stream(from(base(e2), mine2));
      *(uint4*)(to(e, mine) + mine) = w;  // first + slice <= first + step < total
      if (mine2 < total) *(uint4*)(to(e2, mine2) + mine2) = w2;
    } else if (one && mine < total) {
      *(uint4*)(to(e, mine) + mine) = early ? word : ld_stream(from(base(e), mine));
    }
  };
  if (inOrder) firstSlices(XsSplits<true>{});
  else firstSlices(XsSplits<false>{});
#else  // as it compiled before split entries
  if (two) {
    const uint4 w = early ? word : ld_stream(from((const void*)e.y, mine));
    const uint4 w2 = mine2 >= total ? w : early2 ? word2 : ld_stream(from((const void*)e2.y, mine2));
    *(uint4*)(e.x + mine) = w;  // first + slice <= first + step < total
    if (mine2 < total) *(uint4*)(e2.x + mine2) = w2;
  } else if (one && mine < total) {
    *(uint4*)(e.x + mine) = early ? word : ld_stream(from((const void*)e.y, mine));
  }
#endif
  const i64 next = two ? first + 2 * step : one ? first + step : first;
  if (next < total) xs_copy_rest<Gather>(p.input, gather, p.outPeers, p.plan, p.world, p.experts, p.rowBytes, shift, index, next, total, inOrder);
#endif
}
extern "C" __global__ void __launch_bounds__(XS_THREADS, 8) x_copy_slices(const XParams p) { x_copy_slices_run<false>(p); }
extern "C" __global__ void __launch_bounds__(XS_THREADS, 8) x_copy_slices_gather(const XParams p) { x_copy_slices_run<true>(p); }

// --- a gathered dispatch read row by row of its input (moe.ts SCATTER) ---------------------------
// The slice grid above reads a gathered dispatch in send order: each of a token's K send rows reads
// its x row again, and each block's word waits on its table entry first. Here each x row is read
// once and stored at each of its send rows' destinations: for the token group's expanded layout
// K stores a word read (a 4096-token dispatch at W = 8 on one GPU reads an eighth of the bytes it
// writes), and a block's word is read before anything is known of the call (docs/perf.md).

// Each (row, k)'s destination, from the plan x_exchange left: send row s of chunk c = (peer,
// expert) lands in peer's output at row dst[c] + s - cum[c]; 0 where the entry sends nothing. A
// thread an entry. The gate (index word 0) gets the input bytes to scatter, -1 for a call refused
// or aborted (nothing is then written).
extern "C" __global__ void __launch_bounds__(XS_THREADS) x_scatter_index(const XParams p) {
  __shared__ i64 sRows;
  const int W = p.world, E = p.experts;
  const u8* lane = p.pad + p.laneOffset;
  pdl_wait();  // x_exchange has finished: its plan is written
  pdl_release();
  if (threadIdx.x == 0) {
    const bool skip = ld_volatile(p.scratch) != 0 || ld_volatile(&((const LaneHeader*)lane)->abort.code) != A2AV_OK;
    const i64 rows = skip ? -1 : ld_volatile(p.scatterTokens);
    sRows = rows < 0 ? -1 : rows < p.scatterRows ? rows : p.scatterRows;
  }
  __syncthreads();
  const i64 rows = sRows;
  if (blockIdx.x == 0 && threadIdx.x == 0) xs_index(p.scratch, W)[0] = rows < 0 ? -1 : rows * p.rowBytes;
  if (rows <= 0) return;
  const PlanArrays plan = plan_arrays(p.plan, W);
  const i64 n = (i64)W * E, entries = rows * p.scatterTopk, sent = plan_word(p.plan + 8);
  for (i64 j = (i64)blockIdx.x * blockDim.x + threadIdx.x; j < entries; j += (i64)gridDim.x * blockDim.x) {
    const i64 s = p.scatterSlots[j];
    u64 d = 0;
    if (s >= 0 && s < sent) {
      const i64 c = x_chunk_at(plan.cum, n, 1, s);
      d = (u64)__ldg((const u64*)p.outPeers + c / E) + (u64)((plan_word(plan.dst + c) + s - plan_word(plan.cum + c)) * p.rowBytes);
    }
    p.scatterDests[j] = d;
  }
}

// Its K destinations at a time from the table (one 32-byte sector); six blocks an SM: with eight
// (32 registers) the loop spilled.
#define XS_SCATTER_BATCH 4
// Block b copies input bytes [b * slice, (b + 1) * slice), a 16-byte word a thread, to each of the
// word's row's destinations; slices a grid's stride on after it (a grid under an SM budget). The
// first word is read before the gate. The host launches it for 16-byte rows, an aligned input and under 4 GiB of
// input rows (32-bit quotients, as x_copy_slices_gather's).
extern "C" __global__ void __launch_bounds__(XS_THREADS, 6) x_copy_scatter(const XParams p) {
  const i64 slice = (i64)blockDim.x * 16, step = (i64)gridDim.x * slice, rb = p.rowBytes;
  i64 x = (i64)blockIdx.x * slice + 16 * (i64)threadIdx.x;
  // Only rows that send are read early: the grid covers the slots' rows, and a group sized for
  // 4096 tokens called with one read all 4096 (a 1-token dispatch 38 -> 176 µs, docs/perf.md). The
  // count was written before the exchange ahead of this copy had finished (the token group's route).
  const i64 routed = __ldg(p.scatterTokens), rows = routed < p.scatterRows ? routed : p.scatterRows;
  const bool early = x + 16 <= rows * rb;
  uint4 word;
  if (early) word = ld_stream((const uint4*)(p.input + x));
  pdl_wait();     // x_scatter_index has finished
  pdl_release();  // x_done_open may wait in a slot beside us
  const i64 total = __ldg(xs_index(p.scratch, p.world));
  const int K = (int)p.scatterTopk;
  for (bool first = true; x < total; x += step, first = false) {
    if (!(first && early)) word = ld_stream((const uint4*)(p.input + x));
    const u32 t = (u32)x / (u32)rb;
    const u64 off = (u64)(x - (i64)t * rb);
    const u64* dests = p.scatterDests + (i64)t * K;
    for (int k0 = 0; k0 < K; k0 += XS_SCATTER_BATCH) {
      u64 d[XS_SCATTER_BATCH];
#pragma unroll
      for (int i = 0; i < XS_SCATTER_BATCH; ++i) d[i] = k0 + i < K ? __ldg(dests + k0 + i) : 0;
#pragma unroll
      for (int i = 0; i < XS_SCATTER_BATCH; ++i)
        if (d[i] != 0) *(uint4*)(d[i] + off) = word;
    }
  }
}
