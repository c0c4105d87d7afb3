// allReduce's pieces (kernels/all-reduce.cu): parameters, the rank-ordered sum, element loads and
// stores that stop at the last element, and waits that give up with the lane.
#pragma once
#include "config.cuh"
#include "signals.cuh"

// Element types and ops, as src/codes.ts numbers them (never 0, so a header
// word still zero cannot pass for a call).
#define AR_F32 1
#define AR_BF16 2
#define AR_SUM 1
#define AR_THREADS 512

// Mirrored by src/backends/cuda/kernel-params.ts (byte offsets in comments).
struct ArParams {
  const u8* input;        // 0: this rank's input (peers cannot read it: it is pushed or staged)
  u8* const* outPeers;    // 8: output base on every rank (device table [W])
  u8* const* padPeers;    // 16: signal pad base on every rank
  u8* pad;                // 24: this rank's own signal pad
  u8* const* stagePeers;  // 32: staging base on every rank
  u64 laneOffset;         // 40: this lane's offset in every pad
  u64 stageOffset;        // 48: this lane's offset in every staging allocation
  i64 count;              // 56: elements
  i64 outId;              // 64: symmetric buffer id of the output (must match across ranks)
  i64 timeoutNs;          // 72
  int dtype;              // 80: AR_F32, AR_BF16
  int op;                 // 84: AR_SUM
  int rank;               // 88
  int world;              // 92
};
A2AV_LAYOUT_CHECK(__builtin_offsetof(ArParams, outPeers) == 8, "ArParams.outPeers");
A2AV_LAYOUT_CHECK(__builtin_offsetof(ArParams, padPeers) == 16, "ArParams.padPeers");
A2AV_LAYOUT_CHECK(__builtin_offsetof(ArParams, pad) == 24, "ArParams.pad");
A2AV_LAYOUT_CHECK(__builtin_offsetof(ArParams, stagePeers) == 32, "ArParams.stagePeers");
A2AV_LAYOUT_CHECK(__builtin_offsetof(ArParams, laneOffset) == 40, "ArParams.laneOffset");
A2AV_LAYOUT_CHECK(__builtin_offsetof(ArParams, stageOffset) == 48, "ArParams.stageOffset");
A2AV_LAYOUT_CHECK(__builtin_offsetof(ArParams, count) == 56, "ArParams.count");
A2AV_LAYOUT_CHECK(__builtin_offsetof(ArParams, outId) == 64, "ArParams.outId");
A2AV_LAYOUT_CHECK(__builtin_offsetof(ArParams, timeoutNs) == 72, "ArParams.timeoutNs");
A2AV_LAYOUT_CHECK(__builtin_offsetof(ArParams, dtype) == 80, "ArParams.dtype");
A2AV_LAYOUT_CHECK(__builtin_offsetof(ArParams, op) == 84, "ArParams.op");
A2AV_LAYOUT_CHECK(__builtin_offsetof(ArParams, rank) == 88, "ArParams.rank");
A2AV_LAYOUT_CHECK(__builtin_offsetof(ArParams, world) == 92, "ArParams.world");
A2AV_LAYOUT_CHECK(sizeof(ArParams) == 96, "ArParams: AR_PARAMS_BYTES");

template <int DT>
struct ArType {
  static constexpr i64 bytes = DT == AR_BF16 ? 2 : 4;
  static constexpr i64 tileElements = A2AV_AR_TILE_BYTES / bytes;
};

// bf16 bits of an f32, as src/collectives/reduce.ts f32BitsToBf16: nearest-even, a NaN kept quiet.
__device__ __forceinline__ u32 ar_bf16_round(float f) {
  const u32 bits = __float_as_uint(f);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return (bits >> 16) | 0x40u;
  return (bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16;
}

// The sum of src/collectives/reduce.ts over N 32-bit words of elements: f32, sources in rank order,
// the first one's bits taken as they are; bf16 widened exactly and rounded once at the end.
// __fadd_rn: the compiler may neither contract nor reorder it.
template <int DT, int N>
struct ArSum {
  float v[DT == AR_BF16 ? 2 * N : N];
  __device__ __forceinline__ void first(const u32 (&w)[N]) {
#pragma unroll
    for (int i = 0; i < N; ++i) {
      if constexpr (DT == AR_BF16) {
        v[2 * i] = __uint_as_float(w[i] << 16);
        v[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
      } else {
        v[i] = __uint_as_float(w[i]);
      }
    }
  }
  __device__ __forceinline__ void add(const u32 (&w)[N]) {
#pragma unroll
    for (int i = 0; i < N; ++i) {
      if constexpr (DT == AR_BF16) {
        v[2 * i] = __fadd_rn(v[2 * i], __uint_as_float(w[i] << 16));
        v[2 * i + 1] = __fadd_rn(v[2 * i + 1], __uint_as_float(w[i] & 0xffff0000u));
      } else {
        v[i] = __fadd_rn(v[i], __uint_as_float(w[i]));
      }
    }
  }
  __device__ __forceinline__ void out(u32 (&w)[N]) const {
#pragma unroll
    for (int i = 0; i < N; ++i) {
      if constexpr (DT == AR_BF16) w[i] = ar_bf16_round(v[2 * i]) | (ar_bf16_round(v[2 * i + 1]) << 16);
      else w[i] = __float_as_uint(v[i]);
    }
  }
};

// The last, partial word of a range: `bytes` (even, < 4N) bytes in 2-byte steps, the rest zero, so
// nothing past the last element is touched. CG: data peers write during the kernel, read past L1.
template <int N, bool CG>
__device__ __forceinline__ void ar_load_part(const u8* p, int bytes, u32 (&w)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) w[i] = 0;
  for (int b = 0; b < bytes; b += 2) {
    const unsigned short* h = (const unsigned short*)(p + b);
    const u32 x = CG ? __ldcg(h) : *h;
    w[b >> 2] |= x << ((b & 2) * 8);
  }
}
template <int N>
__device__ __forceinline__ void ar_store_part(u8* p, int bytes, const u32 (&w)[N]) {
  for (int b = 0; b < bytes; b += 2) *(unsigned short*)(p + b) = (unsigned short)(w[b >> 2] >> ((b & 2) * 8));
}

// 8 bytes of a range of `bytes` at p (8-byte aligned); a short tail as above.
__device__ __forceinline__ void ar_load8(const u8* p, i64 bytes, u32 (&w)[2]) {
  if (bytes >= 8) {
    const uint2 v = *(const uint2*)p;
    w[0] = v.x;
    w[1] = v.y;
  } else {
    ar_load_part<2, false>(p, (int)bytes, w);
  }
}
__device__ __forceinline__ void ar_store8(u8* p, i64 bytes, const u32 (&w)[2]) {
  if (bytes >= 8) *(uint2*)p = make_uint2(w[0], w[1]);
  else ar_store_part<2>(p, (int)bytes, w);
}

// Block-wide copy of n bytes (even) between 16-byte aligned addresses: all loads of a step, then
// all stores.
__device__ __forceinline__ void ar_copy(u8* dst, const u8* src, i64 n) {
  const i64 words = n / 16, nt = blockDim.x;
  const uint4* s = (const uint4*)src;
  uint4* d = (uint4*)dst;
  i64 i = threadIdx.x;
  for (; i + (A2AV_COPY_UNROLL - 1) * nt < words; i += A2AV_COPY_UNROLL * nt) {
    uint4 v[A2AV_COPY_UNROLL];
#pragma unroll
    for (int u = 0; u < A2AV_COPY_UNROLL; ++u) v[u] = s[i + u * nt];
#pragma unroll
    for (int u = 0; u < A2AV_COPY_UNROLL; ++u) d[i + u * nt] = v[u];
  }
  for (; i < words; i += nt) d[i] = s[i];
  for (i64 b = words * 16 + 2 * (i64)threadIdx.x; b < n; b += 2 * nt) *(unsigned short*)(dst + b) = *(const unsigned short*)(src + b);
}

// Waits: bounded by the lane's timeout, and cut short once another block of this rank has recorded
// the lane's timeout (its peers will not come either), so a dead peer costs one timeout, not one a
// round.
#define AR_WAIT_OK 0
#define AR_WAIT_TIMEOUT 1
#define AR_WAIT_ABORTED 2

__device__ __forceinline__ int ar_wait_flag(const i64* flag, i64 target, const LaneHeader* h, i64 timeoutNs) {
  if (ld_acquire_peer(flag) >= target) return AR_WAIT_OK;
  const u64 deadline = global_timer_ns() + (u64)timeoutNs;
  for (int spins = 1;; ++spins) {
    if (ld_acquire_peer(flag) >= target) return AR_WAIT_OK;
    if ((spins & 63) == 0) {
      if (ld_volatile(&h->abort.code) != A2AV_OK) return AR_WAIT_ABORTED;
      if (global_timer_ns() > deadline) return ld_acquire_peer(flag) >= target ? AR_WAIT_OK : AR_WAIT_TIMEOUT;
    }
  }
}

// An LL packet of this call (flag); on a timeout *out is the call whose packet is there (0: none).
__device__ __forceinline__ int ar_wait_packet(const uint4* p, u32 flag, u64 deadline, const LaneHeader* h, i64* out) {
  for (int spins = 1;; ++spins) {
    const uint4 v = ll_load(p);
    if (v.y == flag && v.w == flag) {
      *out = ll_value(v);
      return AR_WAIT_OK;
    }
    if ((spins & 63) == 0) {
      if (ld_volatile(&h->abort.code) != A2AV_OK) return AR_WAIT_ABORTED;
      if (global_timer_ns() > deadline) {
        *out = v.y == 0 ? 0 : (i64)v.y - 1;
        return AR_WAIT_TIMEOUT;
      }
    }
  }
}

// What every step of one call on one block needs.
struct ArCall {
  const ArParams& p;
  LaneHeader* h;
  u8* lane;
  u8* const* outs;    // every rank's output (shared memory)
  u8* const* stages;  // every rank's staging of this lane (shared memory)
  i64 seq;
  i64 base;  // rounds run on the lane before this call
  // A wait that did not end well: a timeout is recorded (the first on the lane stays), naming q.
  __device__ __forceinline__ bool failed(int result, int q, i64 available, int site) const {
    if (result == AR_WAIT_TIMEOUT) record_abort(h, StatusRecord{A2AV_ERR_TIMEOUT, p.rank, q, seq, available, p.rank, seq, site});
    return result != AR_WAIT_OK;
  }
};
