// Limits, status codes and the signal-pad layout. src/backends/cuda/layout.ts mirrors these numbers.
#pragma once

typedef unsigned char u8;
typedef unsigned int u32;
typedef long long i64;
typedef unsigned long long u64;

#define A2AV_MAX_THREADS 1024
// 16-byte loads each thread keeps in flight before storing; a block's tile is threads * 16 * this.
#define A2AV_COPY_UNROLL 4

// Status record codes (int64[8] = code, rank, peer, needed, available, reportedBy, 0, 0).
#define A2AV_OK 0
#define A2AV_ERR_NEGATIVE 1
#define A2AV_ERR_INPUT_OVERFLOW 2
#define A2AV_ERR_OUTPUT_OVERFLOW 3
#define A2AV_ERR_MISMATCH 4
#define A2AV_ERR_TIMEOUT 5

// One lane's region of a rank's signal pad, for a world of W ranks (PW = A2AV_PAYLOAD_HEADER + W):
//   [0, 64)                 status record (local)
//   [64, 72)                sequence number of the last completed call on this lane (local)
//   [128, 128+32*W*PW)      payload[parity][src][PW]: what src published for its call, one LL packet
//                           (16 bytes: 8 data bytes and the call's flag twice) per int64
//   then                    done[src]: completion signals src has sent here, ever (each call adds
//                           the count src announced in its payload)
//   then                    send plan[dst][3] (int64: source offset, destination address, bytes),
//                           left by a2av_1d for a2av_copy in grid mode (local)
//   then                    expect[src]: done[src] at the end of the last completed call (local)
// input rows, output rows, row bytes, output buffer id, completion signals sent to each peer per call
#define A2AV_PAYLOAD_HEADER 5
#define A2AV_PAY_SIGNALS 4
#define A2AV_LANE_HEADER_BYTES 128

struct LaneHeader {
  i64 status[8];
  i64 seq;
};

__host__ __device__ __forceinline__ uint4* lane_payload(u8* lane, int W, int parity, int src) {
  return (uint4*)(lane + A2AV_LANE_HEADER_BYTES) + ((i64)parity * W + src) * (A2AV_PAYLOAD_HEADER + W);
}
__host__ __device__ __forceinline__ i64* lane_done(u8* lane, int W) { return (i64*)lane_payload(lane, W, 2, 0); }
__host__ __device__ __forceinline__ i64* lane_send_plan(u8* lane, int W) { return lane_done(lane, W) + W; }
__host__ __device__ __forceinline__ i64* lane_expect(u8* lane, int W) { return lane_send_plan(lane, W) + 3 * W; }
