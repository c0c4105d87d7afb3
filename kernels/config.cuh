// Limits, status codes and the signal-pad layout. src/backends/cuda/layout.ts mirrors these numbers.
#pragma once

typedef unsigned char u8;
typedef unsigned int u32;
typedef long long i64;
typedef unsigned long long u64;

#define A2AV_MAX_THREADS 1024
// 16-byte loads each thread keeps in flight before storing; a block's tile is threads * 16 * this.
#define A2AV_COPY_UNROLL 4
// Splitting a copy's blocks between destinations (params.splitByPeer, copy.cuh split_by_peer): 0
// never, 1 from this many send bytes on (the ranks span GPUs), 2 always. Below it the shared sweep
// was faster across two H200s: 0.5-8 MiB per rank 1.2-1.6 us slower split (fewer blocks on the
// link's share), 16 MiB and up faster (docs/perf.md).
#define A2AV_SPLIT_NEVER 0
#define A2AV_SPLIT_LARGE 1
#define A2AV_SPLIT_ALWAYS 2
#define A2AV_SPLIT_MIN_BYTES (16ll << 20)
__host__ __device__ inline bool split_wanted(int mode, long long sendBytes) {
  return mode == A2AV_SPLIT_ALWAYS || (mode == A2AV_SPLIT_LARGE && sendBytes >= A2AV_SPLIT_MIN_BYTES);
}

// Programmatic dependent launch (jit/module.ts launchEarly): pdl_wait() waits until the kernel
// before this one on the stream has finished and its writes are visible; pdl_release() lets the
// kernel after this one be scheduled (it then waits in pdl_wait() itself). Both are no-ops where
// the kernel was launched plainly, and before sm_90.
__device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
__device__ __forceinline__ void pdl_release() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;");
#endif
}

// Status record codes (StatusRecord below; decoded by src/collectives/status.ts).
#define A2AV_OK 0
#define A2AV_ERR_NEGATIVE 1
#define A2AV_ERR_INPUT_OVERFLOW 2
#define A2AV_ERR_OUTPUT_OVERFLOW 3
#define A2AV_ERR_MISMATCH 4
#define A2AV_ERR_TIMEOUT 5
// Which wait ran out, in a timeout's record (its expert word; src/collectives/status.ts names them).
#define A2AV_WAIT_ARRIVAL 1  // a2av_1d: a peer's payload
#define A2AV_WAIT_DONE 2     // completion: a peer's done signals
#define A2AV_WAIT_ROUND1 3   // MoE exchange: a sender's counts
#define A2AV_WAIT_ROUND2 4   // MoE exchange: a receiver's answer
#define A2AV_WAIT_MOVE 5     // a plan's move: a peer's agreement words
#define A2AV_WAIT_AR_HEADER 6  // allReduce: a peer's count, dtype, op and output
#define A2AV_WAIT_AR_DATA 7    // allReduce: a peer's contribution
#define A2AV_WAIT_AR_SLOT 8    // allReduce: an owner freeing its staging slot
// Which field differs, in a mismatch's record (its expert word; src/collectives/status.ts
// MismatchCode). The MoE round-1 header's agreement words name theirs through agree_field.
#define A2AV_FIELD_KIND 1
#define A2AV_FIELD_ROW_BYTES 2
#define A2AV_FIELD_OUTPUT 3
#define A2AV_FIELD_EXPERTS 4
#define A2AV_FIELD_ALIGN 5
#define A2AV_FIELD_COUNT 6  // allReduce's header: count, dtype, op, output id
#define A2AV_FIELD_DTYPE 7
#define A2AV_FIELD_OP 8
#define A2AV_FIELD_PLAN 9   // a direct call, a plan's exchange, or a move of which plan

// Records of refused calls kept per lane, by sequence number modulo this: a handle reads its own
// call's record as long as fewer than this many later calls were queued on its lane (the host's
// event ring has the same length, src/backends/stream-lane.ts).
#define A2AV_STATUS_RING 256
// A lane's status area is in pinned host memory, which the host reads with no driver call: a
// synchronous device-to-host copy of the records, made while peers already spin in the next call,
// was measured to stall until their timeout (8 ranks on one GPU, at the start of a timed loop).
// validation: "no offender found" in the per-category atomicMin reductions
#define A2AV_NONE 0x7fffffff

// One lane's region of a rank's signal pad, for a world of W ranks (PW = A2AV_PAYLOAD_HEADER + W):
//   [0, 64)                 abort record: the first timeout on this lane; it stays (the host
//                           aborts the communicator), and later kernels of the lane see it and exit
//   [64, 72)                sequence number of the last completed call on this lane (local)
//   [72, 80)                the lane's status area in host memory (StatusArea, set by the host)
//   [128, 128+32*W*PW)      payload[parity][src][PW]: what src published for its call, one LL packet
//                           (16 bytes: 8 data bytes and the call's flag twice) per int64
//   then                    done[src]: completion signals src has sent here, ever (each call adds
//                           the count src announced in its payload)
//   then                    send plan[dst][3] (int64: source offset, destination address, bytes),
//                           left by a2av_1d for a2av_copy in grid mode (local)
//   then                    expect[src]: done[src] at the end of the last completed call (local)
//   then                    MoE exchange (kernels/exchange.cu), LL packets, slots sized for
//                           A2AV_MAX_EXPERTS so a peer that disagrees on E shifts nothing:
//                           x1[parity][src][A2AV_X1_WORDS]: what src sends me in round 1
//                           x2[parity][src][A2AV_X2_WORDS]: what receiver src answers in round 2
//                           (a plan's move sends only the agreement words of an x1 slot)
// input rows, output rows, row bytes, output buffer id, completion signals sent to each peer per call
#define A2AV_PAYLOAD_HEADER 5
#define A2AV_PAY_SIGNALS 4
#define A2AV_LANE_HEADER_BYTES 128

// Why a call was refused, or why it gave up waiting; src/collectives/status.ts decodes it.
struct StatusRecord {
  i64 code;        // A2AV_ERR_*; A2AV_OK: no record
  i64 rank;        // the rank at fault (splits), or the rank that waited (timeout)
  i64 peer;        // the peer involved (splits), or the rank that never arrived (timeout)
  i64 needed;      // rows needed (INT64_MAX: the sum overflows), or the call waited for (timeout)
  i64 available;   // rows available, or the call the peer last reached (timeout)
  i64 reportedBy;  // the rank whose kernel wrote it
  i64 seq;         // the call's sequence number on its lane
  i64 expert;      // the expert involved (MoE calls), else -1; a timeout: the wait (A2AV_WAIT_*)
};
// Layout checks: NVRTC lacks offsetof, so they hold under nvcc (CI compile-checks every kernel).
#ifndef __CUDACC_RTC__
#define A2AV_LAYOUT_CHECK(cond, what) static_assert(cond, what)
#else
#define A2AV_LAYOUT_CHECK(cond, what)
#endif
A2AV_LAYOUT_CHECK(sizeof(StatusRecord) == 64, "StatusRecord: 8 int64 words (status.ts STATUS_WORDS)");
A2AV_LAYOUT_CHECK(__builtin_offsetof(StatusRecord, seq) == 48, "StatusRecord.seq: word 6 (status.ts StatusField.seq)");

// A lane's status area (host memory): the abort record again, for the host, the count of refused
// calls, and the ring: the record of refused call seq is at seq % A2AV_STATUS_RING, its seq field
// saying whose it is.
struct StatusArea {
  StatusRecord abort;
  i64 refused;
  i64 reserved[7];
  StatusRecord ring[A2AV_STATUS_RING];
};
A2AV_LAYOUT_CHECK(__builtin_offsetof(StatusArea, refused) == 64 && __builtin_offsetof(StatusArea, ring) == 128, "StatusArea: layout.ts StatusAreaField");

struct LaneHeader {
  StatusRecord abort;
  i64 seq;
  StatusArea* status;
};
A2AV_LAYOUT_CHECK(__builtin_offsetof(LaneHeader, seq) == 64 && __builtin_offsetof(LaneHeader, status) == 72, "LaneHeader: layout.ts LaneHeaderField");
A2AV_LAYOUT_CHECK(sizeof(LaneHeader) <= A2AV_LANE_HEADER_BYTES, "LaneHeader fits its region");

__host__ __device__ __forceinline__ uint4* lane_payload(u8* lane, int W, int parity, int src) {
  return (uint4*)(lane + A2AV_LANE_HEADER_BYTES) + ((i64)parity * W + src) * (A2AV_PAYLOAD_HEADER + W);
}
__host__ __device__ __forceinline__ i64* lane_done(u8* lane, int W) { return (i64*)lane_payload(lane, W, 2, 0); }
__host__ __device__ __forceinline__ i64* lane_send_plan(u8* lane, int W) { return lane_done(lane, W) + W; }
__host__ __device__ __forceinline__ i64* lane_expect(u8* lane, int W) { return lane_send_plan(lane, W) + 3 * W; }

// MoE exchange limits and packet layout (src/backends/cuda/layout.ts mirrors them).
#define A2AV_MAX_EXPERTS 256
// round 1 header: the A2AV_X1_AGREE words every rank's call must match (kind, plan, rowBytes,
// outId, experts, align: the host rules' order, exchange-rules.ts), then the sender's own verdict
// (key, rank, peer, expert, needed, available); the counts for the receiver's experts follow.
// plan: 0 a direct call, -1 a plan's exchange, else a move of the plan whose exchange was that
// lane call. Every MoE call on a lane (x_exchange, x_fused, x_check) sends the agreement words
// first, so calls of different kinds meet there and are refused as a mismatch.
#define A2AV_X1_AGREE 6
#define A2AV_X1_EXPERTS 4  // the agreement word that says how many counts follow
#define A2AV_X1_HEADER 12
// round 2 header: the receiver's verdict (key, rank, peer, expert, needed, available); the rows
// where the sender's chunk for each expert starts in the receiver's output follow
#define A2AV_X2_HEADER 6
// A fused call (x_fused) sends its whole row of W*E counts in a round-1 slot, then its output rows
// and its completion signals: two words past the largest row of counts it takes.
#define A2AV_XF_EXTRA 2
// The largest split matrix (W * W * E counts) a fused call holds in shared memory.
#define A2AV_XF_MAX_MATRIX 2048
#define A2AV_X1_WORDS (A2AV_X1_HEADER + A2AV_MAX_EXPERTS + A2AV_XF_EXTRA)
#define A2AV_X2_WORDS (A2AV_X2_HEADER + A2AV_MAX_EXPERTS)
__host__ __device__ __forceinline__ uint4* lane_x1(u8* lane, int W, int parity, int src) {
  const u64 base = ((u64)(lane_expect(lane, W) + W) + 15) & ~15ull;  // packets are 16-byte stores
  return (uint4*)base + ((i64)parity * W + src) * A2AV_X1_WORDS;
}
__host__ __device__ __forceinline__ uint4* lane_x2(u8* lane, int W, int parity, int src) {
  return lane_x1(lane, W, 2, 0) + ((i64)parity * W + src) * A2AV_X2_WORDS;
}
// allReduce (kernels/all-reduce.cu). Its region of a lane, after the MoE packets:
//   ar_header[parity][src][A2AV_AR_HEADER]  LL packets: src's call (count, dtype, op, output id), in
//                                   the slot of the call's parity. A one-shot call has no completion
//                                   exchange: a peer writes call s + 2's only after it has received this
//                                   rank's packets of call s + 1 (every call on a lane exchanges with
//                                   every peer), sent once this rank's kernel of call s had finished
//   ar_ready[src][slots]            src's tile for this rank is in staging slot s: its round + 1
//   ar_free[owner][slots]           owner has consumed this rank's tile in its slot s: the round + 1
//   ar_rounds[3]                    (local) rounds run on this lane so far; the count after this call;
//                                   blocks of a one-shot call that have finished (the last numbers it)
// Rounds are numbered lane-wide (every rank runs the same rounds), so flags only grow.
#define A2AV_AR_HEADER 4
// Its staging, a symmetric allocation of its own (ar_stage_bytes a lane):
//   ll[parity][src][ar_one_shot_bytes / 8]      one-shot calls: src's input as LL packets (parity: as
//                                               the headers)
//   tile[slot][src][A2AV_AR_TILE_BYTES]         larger calls: src's tile for this rank to sum
// One-shot below ar_one_shot_bytes: every rank pushes its input to every peer, which costs W - 1
// copies of it (doubled by LL packets), so the limit falls as W grows, and with it the LL area.
// A tuning run may set each (A2AV_PROBE_AR_*, src/backends/cuda/probe-defines.ts; layout.ts reads
// the same values).
#ifdef A2AV_PROBE_AR_TILE_BYTES
#define A2AV_AR_TILE_BYTES ((i64)A2AV_PROBE_AR_TILE_BYTES)
#else
#define A2AV_AR_TILE_BYTES (64 << 10)
#endif
#ifdef A2AV_PROBE_AR_ONE_SHOT_MAX
#define A2AV_AR_ONE_SHOT_MAX ((i64)A2AV_PROBE_AR_ONE_SHOT_MAX)
#else
#define A2AV_AR_ONE_SHOT_MAX (1 << 20)
#endif
#ifdef A2AV_PROBE_AR_ONE_SHOT_TOTAL
#define A2AV_AR_ONE_SHOT_TOTAL ((i64)A2AV_PROBE_AR_ONE_SHOT_TOTAL)
#else
#define A2AV_AR_ONE_SHOT_TOTAL (2 << 20)
#endif
#ifdef A2AV_PROBE_AR_SLOT_BUDGET
#define A2AV_AR_SLOT_BUDGET ((i64)A2AV_PROBE_AR_SLOT_BUDGET)
#else
#define A2AV_AR_SLOT_BUDGET (16 << 20)
#endif
#ifdef A2AV_PROBE_AR_MAX_SLOTS
#define A2AV_AR_MAX_SLOTS A2AV_PROBE_AR_MAX_SLOTS
#else
#define A2AV_AR_MAX_SLOTS 256
#endif
__host__ __device__ __forceinline__ i64 ar_one_shot_bytes(int W) {
  const i64 b = A2AV_AR_ONE_SHOT_TOTAL / W;
  return (b < A2AV_AR_ONE_SHOT_MAX ? b : A2AV_AR_ONE_SHOT_MAX) & ~127ll;
}
// Staging slots per source: a block keeps two rounds in flight, so up to slots / 2 blocks never wait
// for a slot (all-reduce.cu).
__host__ __device__ __forceinline__ int ar_slots(int W) {
  const i64 s = A2AV_AR_SLOT_BUDGET / ((i64)W * A2AV_AR_TILE_BYTES);
  return s < 2 ? 2 : s > A2AV_AR_MAX_SLOTS ? A2AV_AR_MAX_SLOTS : (int)s;
}
__host__ __device__ __forceinline__ i64 ar_stage_bytes(int W) {
  return 4 * (i64)W * ar_one_shot_bytes(W) + (i64)ar_slots(W) * W * A2AV_AR_TILE_BYTES;
}
__host__ __device__ __forceinline__ uint4* ar_stage_ll(u8* stage, int W, int parity, int src) {
  return (uint4*)stage + ((i64)parity * W + src) * (ar_one_shot_bytes(W) / 8);
}
__host__ __device__ __forceinline__ u8* ar_stage_tile(u8* stage, int W, int slot, int src) {
  return (u8*)ar_stage_ll(stage, W, 2, 0) + ((i64)slot * W + src) * A2AV_AR_TILE_BYTES;
}
__host__ __device__ __forceinline__ uint4* lane_ar_header(u8* lane, int W, int parity, int src) {
  return lane_x2(lane, W, 2, 0) + ((i64)parity * W + src) * A2AV_AR_HEADER;
}
__host__ __device__ __forceinline__ i64* lane_ar_ready(u8* lane, int W, int src) { return (i64*)lane_ar_header(lane, W, 2, 0) + (i64)src * ar_slots(W); }
__host__ __device__ __forceinline__ i64* lane_ar_free(u8* lane, int W, int owner) { return lane_ar_ready(lane, W, W) + (i64)owner * ar_slots(W); }
__host__ __device__ __forceinline__ i64* lane_ar_rounds(u8* lane, int W) { return lane_ar_free(lane, W, W); }
__host__ __device__ __forceinline__ u8* lane_end(u8* lane, int W) { return (u8*)(lane_ar_rounds(lane, W) + 3); }

// A lane's local scratch for the MoE exchange (its own allocation, i64 words):
//   [0]                            gate: non-zero while the current call must move nothing
//   [8, 8 + W*A2AV_X1_WORDS)       xin: round-1 values received from each source
//   then W*A2AV_MAX_EXPERTS        starts: receiver side, where (src, e) starts in my output
//   then W*A2AV_X2_WORDS           answers: round-2 values received from each receiver
//   then the plan of the current call (the layout below), for calls that keep no plan
// An exchange plan (i64 words): [0] its status code (0: accepted), [1, 7) the verdict (key, rank,
// peer, expert, needed, available) that its moves report when refused, [8] rows
// this rank sends, [9] experts, [10] kind, [11] the lane call number of its exchange (which plan a
// move is of, the same on every rank); from [16], four arrays of W*A2AV_MAX_EXPERTS indexed
// peer*E + e: rows, source row, destination row in the peer's output, rows before (running sum).
#define A2AV_PLAN_HEADER 16
__host__ __device__ __forceinline__ i64 plan_words(int W) { return A2AV_PLAN_HEADER + 4 * (i64)W * A2AV_MAX_EXPERTS; }
__host__ __device__ __forceinline__ i64 scratch_words(int W) {
  return 8 + (i64)W * A2AV_X1_WORDS + (i64)W * A2AV_MAX_EXPERTS + (i64)W * A2AV_X2_WORDS + plan_words(W);
}
