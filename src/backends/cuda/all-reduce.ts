// allReduce on the cuda backend (kernels/all-reduce.cu): what a call queues on its lane. A one-shot
// call is ar_reduce alone (its last block numbers it), a larger one ar_reduce + ar_done (ar_done
// numbers it): one call on the lane either way, so handles, records, replays and timeouts work as
// for allToAllV. Each lane's staging is one symmetric allocation made at set-up:
// allocating while a peer's kernel spins on this rank can stall until its timeout (README).
import type { Handle, ReduceDtype, Stream } from '../backend.js';
import type { CudaStream } from '../../cuda/device.js';
import { ELEMENT_BYTES } from '../../collectives/reduce.js';
import { UsageError } from '../../errors.js';
import { earlyLaunchWanted, KernelFunction, KernelModule, StructLauncher } from '../../jit/module.js';
import type { GpuBuffer } from '../gpu-memory.js';
import { AR_PARAMS_BYTES, ArDtype, ArOp, writeArParams } from './kernel-params.js';
import type { CallHost } from './call-host.js';
import type { CudaLane } from './lane.js';
import { arOneShotBytes, arRounds, arSharedBytes, arSlots, arStageBytes } from './layout.js';

/** What allReduce needs from its communicator. */
export type AllReduceHost = CallHost;

/** One checked call: `output` symmetric, both buffers at least `count` elements. */
export interface AllReduceCall {
  input: GpuBuffer;
  output: GpuBuffer;
  count: number;
  dtype: ReduceDtype;
}

/** Threads of ar_reduce (AR_THREADS). */
const THREADS = 512;

export class AllReduceCalls {
  readonly #host: AllReduceHost;
  readonly #module: KernelModule;
  readonly #launcher: StructLauncher;
  readonly #done: KernelFunction;
  readonly #smem: number;
  /**
   * Programmatic dependent launch (Hopper+) of ar_done and of ar_reduce, so a call's launch overlaps
   * the previous call on the lane, as a2av_1d's (eager 8-128 KiB on two H200s: 6.5 -> 5.8 µs).
   * A2AV_EARLY_LAUNCH=0 turns it off.
   */
  readonly #early: boolean;
  /** Blocks of ar_reduce a call may use: this rank's share of what the GPU holds at once, per lane. */
  readonly #fair: number;
  #stage: GpuBuffer | undefined;

  /** `module`: kernels/all-reduce.cu, loaded before any rank launches (setup.ts says why). */
  constructor(host: AllReduceHost, module: KernelModule) {
    this.#host = host;
    this.#module = module;
    this.#launcher = new StructLauncher(module.fn('ar_reduce'), AR_PARAMS_BYTES);
    this.#done = module.fn('ar_done');
    this.#smem = arSharedBytes(host.worldSize);
    this.#early = earlyLaunchWanted(host.device.arch);
    // Every lane of every rank here may have a call spinning at once: each gets its share.
    const resident = this.#launcher.fn.maxActiveBlocksPerSm(THREADS, this.#smem) * host.device.smCount;
    this.#fair = Math.max(1, Math.floor(resident / (host.ranksOnDevice * host.laneCount)));
  }

  /** Bytes of staging each rank allocates (symmetric, at set-up) for all its lanes. */
  stageBytes(): number {
    return arStageBytes(this.#host.worldSize) * this.#host.laneCount;
  }

  /** Takes the staging and zeroes it on `stream` (LL packets need it; the caller synchronises before any peer calls). */
  prepare(stage: GpuBuffer, stream: CudaStream): void {
    this.#stage = stage;
    this.#host.device.memsetAsync(stage.ptr, 0, stage.bytes, stream);
  }

  call(lane: CudaLane, a: AllReduceCall, stream: Stream | undefined): Handle {
    const host = this.#host;
    host.usable();
    const stage = this.#stage;
    if (stage === undefined) throw new UsageError(`rank ${host.rank}: allReduce has no staging (prepare() was not called)`);
    host.follow(lane, stream);
    const pad = host.pad();
    const launcher = this.#launcher;
    writeArParams(launcher.view, {
      input: a.input.ptr,
      outPeers: a.output.peerTable,
      padPeers: pad.peerTable,
      pad: pad.ptr,
      stagePeers: stage.peerTable,
      laneOffset: lane.offset,
      stageOffset: lane.index * arStageBytes(host.worldSize),
      count: a.count,
      outId: a.output.symmetricId,
      timeoutNs: BigInt(Math.round(host.timeoutMs * 1e6)),
      dtype: ArDtype[a.dtype],
      op: ArOp.sum,
      rank: host.rank,
      world: host.worldSize,
    });
    const blocks = allReduceBlocks(host.worldSize, a.count, ELEMENT_BYTES[a.dtype], this.#fair);
    // Early only where this call's blocks and the next's fit at once (they wait on each other's peers).
    if (this.#early && 2 * blocks <= this.#fair) launcher.launchEarly(blocks, THREADS, lane.stream, this.#smem);
    else launcher.launch(blocks, THREADS, lane.stream, this.#smem);
    if (a.count * ELEMENT_BYTES[a.dtype] <= arOneShotBytes(host.worldSize)) return host.finish(lane, `allReduce of ${a.count} ${a.dtype}`);
    const doneThreads = Math.min(1024, 32 * Math.ceil(host.worldSize / 32));
    if (this.#early) launcher.launchEarly(1, doneThreads, lane.stream, 0, this.#done);
    else launcher.launch(1, doneThreads, lane.stream, 0, this.#done);
    return host.finish(lane, `allReduce of ${a.count} ${a.dtype}`);
  }

  /** Unloads the module (the communicator has synchronised the device; the staging is freed with its memory). */
  release(): void {
    this.#module.unload();
  }
}

/**
 * Blocks of ar_reduce for a call. One-shot: a thread an 8-byte packet. Rounds: a block per round in
 * flight, at most half the slots (the kernel's bound: all-reduce.cu says why). Never past `fair`,
 * the blocks a rank may keep resident beside the other ranks and lanes on its GPU: peers wait for
 * every one of them.
 */
export function allReduceBlocks(world: number, count: number, elementBytes: number, fair: number): number {
  const bytes = count * elementBytes;
  const wanted = bytes <= arOneShotBytes(world) ? Math.ceil(bytes / 8 / THREADS) : Math.min(arRounds(world, count, elementBytes), Math.floor(arSlots(world) / 2));
  return Math.max(1, Math.min(fair, wanted));
}
