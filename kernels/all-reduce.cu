// allReduce: the sum of every rank's input in every rank's output, in the order of
// src/collectives/reduce.ts (rank 0 first, in f32), so every rank and run gets the same bits.
// Per rank and call, one launch (one-shot) or two (rounds):
//   ar_reduce  block 0 sends every peer this call's header (count, dtype, op, output id) as LL
//              packets; every block waits for all headers and refuses the call when any differs
//              from rank 0's (every rank sees the same headers, so all refuse or none does; nothing
//              is written to an output before). Then the data, one of two ways:
//              - one-shot (up to ar_one_shot_bytes): every rank pushes its input to every peer as LL
//                packets (data and flag in one store: no fence, no round trip) and sums all of
//                them itself, into its own output. Pushed before the headers are checked, into an
//                area only one-shot calls use, sized for any call that takes this path. Nothing
//                is written to a peer's output, and the packet areas alternate by the call's parity
//                (config.cuh says why that is safe), so the call needs no completion exchange: the
//                last of its blocks to finish numbers it. Refused, it completes as ar_done would
//                (a peer whose call was not one-shot runs ar_done and waits for this rank's signal).
//              - rounds (larger): in round k, rank o owns tile kW + o of the buffer; every rank
//                copies its share of that tile into o's staging slot and raises ready, o sums the
//                W shares in rank order and writes the sum into every rank's output, then frees
//                the slot. Block b takes rounds b, b + B, ...; it copies round k + B before summing
//                round k, so the wait for the peers' shares overlaps a copy. The input is pushed,
//                not read by peers: it may be any buffer of its rank. In place is safe: a rank
//                reads its share of a tile before raising ready, and only then does the owner
//                write the tile's sum there.
//   ar_done    after rounds, completion (complete_call, one signal per peer): after it, every peer's
//              writes into this rank's output are visible, and the staging may be used again.
// Every wait is bounded by the lane's timeout and ends in a record naming the missing rank.
//
// Staging slots are numbered by round, lane-wide: ar_done adds the call's rounds to the lane's
// count. Writer r puts round g into slot g % S of owner o once o has freed round g - S there; with
// at most S / 2 blocks, block b's copy of round k + B waits only on rounds before k, which every
// rank can finish, so no set of resident blocks waits on itself.
#include "all-reduce.cuh"
#include "probe-clocks.cuh"

// One-shot, before the headers are checked: this rank's input, 8 bytes a packet, to every peer.
__device__ void ar_push_packets(const ArCall& c, i64 bytes, u32 flag) {
  const ArParams& p = c.p;
  const int W = p.world, me = p.rank, parity = (int)(c.seq & 1);
  const i64 words = (bytes + 7) / 8;
  for (i64 w = (i64)blockIdx.x * blockDim.x + threadIdx.x; w < words; w += (i64)gridDim.x * blockDim.x) {
    u32 x[2];
    ar_load8(p.input + 8 * w, bytes - 8 * w, x);
    const i64 v = (i64)(((u64)x[1] << 32) | x[0]);
    for (int i = 1; i < W; ++i) ll_store(ar_stage_ll(c.stages[(me + i) % W], W, parity, me) + w, v, flag);
  }
}

// One-shot: every source's packets, summed in rank order into this rank's output. False when a
// wait did not end well (recorded).
template <int DT>
__device__ bool ar_one_shot(const ArCall& c, i64 bytes, u32 flag) {
  const ArParams& p = c.p;
  const int W = p.world, me = p.rank, parity = (int)(c.seq & 1);
  const i64 words = (bytes + 7) / 8;
  const u64 deadline = global_timer_ns() + (u64)p.timeoutNs;
  for (i64 w = (i64)blockIdx.x * blockDim.x + threadIdx.x; w < words; w += (i64)gridDim.x * blockDim.x) {
    ArSum<DT, 2> acc;
    for (int q = 0; q < W; ++q) {
      u32 x[2];
      if (q == me) {
        ar_load8(p.input + 8 * w, bytes - 8 * w, x);
      } else {
        i64 v;
        // The peer sent its header for this call: it got that far.
        if (c.failed(ar_wait_packet(ar_stage_ll(c.stages[me], W, parity, q) + w, flag, deadline, c.h, &v), q, c.seq, A2AV_WAIT_AR_DATA)) return false;
        x[0] = (u32)v;
        x[1] = (u32)((u64)v >> 32);
      }
      if (q == 0) acc.first(x);
      else acc.add(x);
    }
    u32 o[2];
    acc.out(o);
    ar_store8(c.outs[me] + 8 * w, bytes - 8 * w, o);
  }
  return true;
}

// The end of a one-shot call on every block that got this far: the last block to finish numbers
// the call, unless the lane has given up. Blocks that read the lane's number at their start have
// all finished by then (a block counts itself only after that read).
__device__ void ar_one_shot_finish(const ArCall& c) {
  __syncthreads();
  if (threadIdx.x != 0) return;
  i64* finished = lane_ar_rounds(c.lane, c.p.world) + 2;
  __threadfence();
  if (atomicAdd((unsigned long long*)finished, 1ull) != (unsigned long long)gridDim.x - 1) return;
  *finished = 0;
  if (ld_volatile(&c.h->abort.code) == A2AV_OK) st_volatile(&c.h->seq, c.seq);
}

// Rounds: copies this rank's share of round k into every other owner's slot, then raises ready there.
template <int DT>
__device__ bool ar_push(const ArCall& c, i64 k) {
  const ArParams& p = c.p;
  const int W = p.world, me = p.rank, S = ar_slots(W);
  constexpr i64 E = ArType<DT>::tileElements;
  const i64 g = c.base + k;
  const int s = (int)(g % S);
  bool failed = false;
  if (g >= S)
    for (int q = threadIdx.x; q < W; q += blockDim.x)
      if (q != me && c.failed(ar_wait_flag(lane_ar_free(c.lane, W, q) + s, g + 1 - S, c.h, p.timeoutNs), q, c.seq, A2AV_WAIT_AR_SLOT)) failed = true;
  if (__syncthreads_or(failed)) return false;
  for (int i = 1; i < W; ++i) {
    const int o = (me + i) % W;
    const i64 lo = (k * W + o) * E, hi = lo + E < p.count ? lo + E : p.count;
    if (lo < hi) ar_copy(ar_stage_tile(c.stages[o], W, s, me), p.input + lo * ArType<DT>::bytes, (hi - lo) * ArType<DT>::bytes);
  }
  __syncthreads();
  for (int q = threadIdx.x; q < W; q += blockDim.x) {
    if (q == me) continue;
    fence_peers();
    st_release_peer(lane_ar_ready(p.padPeers[q] + p.laneOffset, W, me) + s, g + 1);
  }
  return true;
}

// Rounds: sums tile kW + me of every rank in rank order, writes the sum into every rank's output and
// frees the slot at every writer.
template <int DT>
__device__ bool ar_own(const ArCall& c, i64 k) {
  const ArParams& p = c.p;
  const int W = p.world, me = p.rank, S = ar_slots(W), tid = threadIdx.x, nt = blockDim.x;
  constexpr i64 E = ArType<DT>::tileElements;
  const i64 g = c.base + k;
  const int s = (int)(g % S);
  bool failed = false;
  for (int q = tid; q < W; q += nt)
    if (q != me && c.failed(ar_wait_flag(lane_ar_ready(c.lane, W, q) + s, g + 1, c.h, p.timeoutNs), q, c.seq, A2AV_WAIT_AR_DATA)) failed = true;
  if (__syncthreads_or(failed)) return false;
  const i64 lo = (k * W + me) * E, hi = lo + E < p.count ? lo + E : p.count;
  const i64 at = lo * ArType<DT>::bytes, n = hi > lo ? (hi - lo) * ArType<DT>::bytes : 0;
  const i64 words = n / 16;
  const auto share = [&](int q) { return ar_stage_tile(c.stages[me], W, s, q); };
  for (i64 i = tid; i < words; i += nt) {
    ArSum<DT, 4> acc;
    for (int q = 0; q < W; ++q) {
      // Peers' shares were written during this kernel: read past L1.
      const uint4 v = q == me ? *(const uint4*)(p.input + at + 16 * i) : __ldcg((const uint4*)share(q) + i);
      const u32 x[4] = {v.x, v.y, v.z, v.w};
      if (q == 0) acc.first(x);
      else acc.add(x);
    }
    u32 o[4];
    acc.out(o);
    const uint4 sum = make_uint4(o[0], o[1], o[2], o[3]);
    for (int j = 0; j < W; ++j) *(uint4*)(c.outs[(me + j) % W] + at + 16 * i) = sum;
  }
  const int tail = (int)(n - 16 * words);
  if (tail > 0 && tid == 0) {
    ArSum<DT, 4> acc;
    for (int q = 0; q < W; ++q) {
      u32 x[4];
      if (q == me) ar_load_part<4, false>(p.input + at + 16 * words, tail, x);
      else ar_load_part<4, true>(share(q) + 16 * words, tail, x);
      if (q == 0) acc.first(x);
      else acc.add(x);
    }
    u32 o[4];
    acc.out(o);
    for (int j = 0; j < W; ++j) ar_store_part<4>(c.outs[(me + j) % W] + at + 16 * words, tail, o);
  }
  __syncthreads();
  for (int q = tid; q < W; q += nt) {
    if (q == me) continue;
    fence_peers();  // the reads of the shares before the slot is handed back
    st_release_peer(lane_ar_free(p.padPeers[q] + p.laneOffset, W, me) + s, g + 1);
  }
  return true;
}

__host__ __device__ __forceinline__ i64 ar_round_count(i64 count, i64 tileElements, int W) {
  const i64 tiles = (count + tileElements - 1) / tileElements;
  return (tiles + W - 1) / W;
}

template <int DT>
__device__ void ar_rounds(const ArCall& c) {
  const int W = c.p.world;
  const i64 R = ar_round_count(c.p.count, ArType<DT>::tileElements, W);
  const int B = (int)gridDim.x < ar_slots(W) / 2 ? (int)gridDim.x : ar_slots(W) / 2;
  if ((int)blockIdx.x >= B) return;
  i64 k = blockIdx.x;
  if (k < R && !ar_push<DT>(c, k)) return;
  for (; k < R; k += B) {
    if (k + B < R && !ar_push<DT>(c, k + B)) return;
    if (!ar_own<DT>(c, k)) return;
  }
}

// Dynamic shared memory: every rank's header, output and staging (AR_SHARED_WORDS per rank).
#ifdef A2AV_PROBE_CLOCKS
__device__ unsigned ar_reduce_launches;
#endif

extern "C" __global__ void __launch_bounds__(AR_THREADS) ar_reduce(const ArParams p) {
  PROBE_CLOCKS;
  PROBE_CLOCK(0);
  extern __shared__ i64 smem[];
  const int W = p.world, me = p.rank, tid = threadIdx.x, nt = blockDim.x;
  i64* hdr = smem;  // [W][A2AV_AR_HEADER]
  u8** outs = (u8**)(hdr + (i64)W * A2AV_AR_HEADER);
  u8** stages = outs + W;
  __shared__ i64 sSeq, sBase;
  __shared__ int sAbort, sMismatch;
  // A no-op unless launched early (all-reduce.ts): then it waits for the previous kernel on the
  // stream, whose lane sequence and round count are read next.
  pdl_wait();
  // The next kernel (ar_done, or the lane's next call launched early) may be scheduled now and wait
  // beside this one, as a2av_1d's: the host launches early only where twice the blocks fit.
  pdl_release();
  PROBE_CLOCK(1);
  u8* lane = p.pad + p.laneOffset;
  LaneHeader* h = (LaneHeader*)lane;
  if (tid == 0) {
    sAbort = ld_volatile(&h->abort.code) != A2AV_OK;
    sSeq = ld_volatile(&h->seq) + 1;
    sBase = ld_volatile(lane_ar_rounds(lane, W));
    sMismatch = A2AV_NONE;
  }
  for (int q = tid; q < W; q += nt) {
    outs[q] = p.outPeers[q];
    stages[q] = p.stagePeers[q] + p.stageOffset;
  }
  __syncthreads();
  PROBE_CLOCK(2);
  if (sAbort) return;
  const ArCall c{p, h, lane, outs, stages, sSeq, sBase};
  const u32 flag = ll_flag(c.seq);
  const int parity = (int)(c.seq & 1);
  const i64 bytes = p.count * (p.dtype == AR_BF16 ? 2 : 4);
  const bool oneShot = bytes <= ar_one_shot_bytes(W);

  if (blockIdx.x == 0)
    for (int k = tid; k < W * A2AV_AR_HEADER; k += nt) {
      const int q = k / A2AV_AR_HEADER, j = k % A2AV_AR_HEADER;
      const i64 v = j == 0 ? p.count : j == 1 ? p.dtype : j == 2 ? p.op : p.outId;
      ll_store(lane_ar_header(p.padPeers[q] + p.laneOffset, W, parity, me) + j, v, flag);
    }
  if (oneShot) ar_push_packets(c, bytes, flag);
  PROBE_CLOCK(3);

  bool failed = false;
  const u64 deadline = global_timer_ns() + (u64)p.timeoutNs;
  for (int k = tid; k < W * A2AV_AR_HEADER; k += nt) {
    const int q = k / A2AV_AR_HEADER;
    i64 v;
    if (c.failed(ar_wait_packet(lane_ar_header(lane, W, parity, q) + k % A2AV_AR_HEADER, flag, deadline, h, &v), q, v, A2AV_WAIT_AR_HEADER)) {
      failed = true;
      break;
    }
    hdr[k] = v;
  }
  if (__syncthreads_or(failed)) return;
  PROBE_CLOCK(4);
  for (int q = tid; q < W; q += nt)
    for (int j = 0; j < A2AV_AR_HEADER; ++j)
      if (hdr[q * A2AV_AR_HEADER + j] != hdr[j]) {
        atomicMin(&sMismatch, q);
        break;
      }
  __syncthreads();
  const bool refused = sMismatch != A2AV_NONE;
  if (blockIdx.x == 0 && tid == 0) {
    if (refused) {
      // As the other calls' mismatch: the first rank that differs, its value and rank 0's.
      const i64* hq = hdr + (i64)sMismatch * A2AV_AR_HEADER;
      int j = 0;
      while (hq[j] == hdr[j]) ++j;
      const i64 field = j == 0 ? A2AV_FIELD_COUNT : j == 1 ? A2AV_FIELD_DTYPE : j == 2 ? A2AV_FIELD_OP : A2AV_FIELD_OUTPUT;
      record_refusal(h, StatusRecord{A2AV_ERR_MISMATCH, sMismatch, 0, hq[j], hdr[j], me, c.seq, field});
    }
    const i64 tileElements = p.dtype == AR_BF16 ? ArType<AR_BF16>::tileElements : ArType<AR_F32>::tileElements;
    lane_ar_rounds(lane, W)[1] = c.base + (refused || oneShot ? 0 : ar_round_count(p.count, tileElements, W));
  }
  if (refused && !oneShot) return;  // ar_done completes it
  if (refused) {
    // As ar_done: one signal to every peer, then theirs (a peer whose call was not one-shot waits
    // for it in its ar_done).
    const CallLane cl{p.pad, p.padPeers, p.laneOffset, W, me, p.timeoutNs};
    if (blockIdx.x == 0 && !__syncthreads_and(signal_and_await(cl, c.seq, [](int) { return (i64)1; }))) return;
    ar_one_shot_finish(c);
    return;
  }

  if (oneShot) {
    PROBE_CLOCK(5);
    const bool ok = p.dtype == AR_BF16 ? ar_one_shot<AR_BF16>(c, bytes, flag) : ar_one_shot<AR_F32>(c, bytes, flag);
    if (!__syncthreads_and(ok)) return;
    PROBE_CLOCK(6);
    ar_one_shot_finish(c);
    PROBE_CLOCK(7);
#ifdef A2AV_PROBE_CLOCKS
    if (PROBE_CLOCKS_DUE(ar_reduce_launches))
      printf("ar_reduce one-shot bytes=%lld W=%d rank=%d blocks=%d cycles: pdl-wait %lld lane %lld push %lld headers %lld check %lld sum %lld finish %lld\n",
             bytes, W, me, (int)gridDim.x, PROBE_CYCLES(1), PROBE_CYCLES(2), PROBE_CYCLES(3), PROBE_CYCLES(4), PROBE_CYCLES(5), PROBE_CYCLES(6),
             PROBE_CYCLES(7));
#endif
  } else if (p.dtype == AR_BF16) {
    ar_rounds<AR_BF16>(c);
  } else {
    ar_rounds<AR_F32>(c);
  }
  // ar_done or the lane's next kernel (launched early) may be scheduled now; it waits for this grid to finish.
  pdl_release();
}

// Completion, as x_done: one signal to every peer, then wait for theirs; then the lane's round count
// takes this call's rounds (only ar_reduce's block 0 knew whether the call was accepted).
extern "C" __global__ void __launch_bounds__(A2AV_MAX_THREADS) ar_done(const ArParams p) {
  pdl_wait();
  pdl_release();
  complete_call(CallLane{p.pad, p.padPeers, p.laneOffset, p.world, p.rank, p.timeoutNs}, [](int, i64) { return (i64)1; });
  if (threadIdx.x == 0) {
    u8* lane = p.pad + p.laneOffset;
    if (ld_volatile(&((LaneHeader*)lane)->abort.code) == A2AV_OK) {
      i64* rounds = lane_ar_rounds(lane, p.world);
      rounds[0] = rounds[1];
    }
  }
}
