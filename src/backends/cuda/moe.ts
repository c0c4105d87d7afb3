// The cuda backend's MoE calls and exchange plans (kernels/exchange.cu): what each call queues on
// its lane. A call is one x_fused where the split matrix is small (fusedFits: the small MoE step),
// else x_exchange + x_copy + x_done; a plan's exchange x_exchange + x_done, a move x_check +
// x_copy + x_done. Each is one call on the lane (its last kernel numbers it), so handles, records,
// replays and timeouts work as for allToAllV.
import { BETWEEN, COMPANION, GATHER, ONE_GPU_FUSED, SCATTER, type Between, type Companion, type Scatter, type DeviceBuffer, type ExchangePlan, type Handle, type PlanMoveArgs, type Stream } from '../backend.js';
import type { CudaStream } from '../../cuda/device.js';
import { moveWhat } from '../../collectives/call-names.js';
import { ExchangeKind } from '../../collectives/exchange-rules.js';
import { UsageError } from '../../errors.js';
import { PLAN_CLOSE_IN_CAPTURE } from '../../collectives/check.js';
import { moeFusedOn, moeGridFromEnv, peerSplitFromEnv, type MoeGrid } from '../../knobs.js';
import { GRID_MIN_BYTES, laneShares, peerSplitMode } from '../../tune/plan.js';
import { earlyLaunchWanted, KernelFunction, KernelModule, StructLauncher } from '../../jit/module.js';
import type { GpuBuffer } from '../gpu-memory.js';
import { writeXParams, X_PARAMS_BYTES, type XParams } from './kernel-params.js';
import type { CallHost } from './call-host.js';
import type { CudaLane } from './lane.js';
import { fusedFits, fusedSharedBytes, planBytes, scratchBytes, scratchPlanOffset, SLICE_INDEX_BYTES, SLICE_INDEX_ENTRIES, sliceIndexOffset } from './layout.js';
import { probeNumber, probeSwitch } from './probe-defines.js';

/** What the MoE calls need from their communicator. */
export type MoeHost = CallHost;

/** One exchange as the kernels take it: the call's kind and its buffers, counts in rows. */
export interface ExchangeCall {
  kind: ExchangeKind;
  /** 1d, dispatch: inSplits; combine: inSplitsOffsets. */
  splits: DeviceBuffer;
  outSplitsOffsets: DeviceBuffer;
  experts: number;
  align: number;
  inRows: number;
  outRows: number;
}

/**
 * Whether a call that fits x_fused takes three launches instead (x_exchange, a copy grid, x_done).
 * Only ranks all on one GPU; under 'auto' from GRID_MIN_BYTES of output with 16-byte rows
 * (x_copy_slices takes those; others copy faster in x_fused), or as the token MoE group says for its
 * exchanges (backend.ts ONE_GPU_FUSED). Rank-uniform: the output is one symmetric allocation of one
 * size; rows and the group's word are the same on every rank, else the call is refused.
 */
export function leavesFused(grid: MoeGrid, c: { oneGpu: boolean; outputBytes: number; rowBytes: number; oneGpuFused?: boolean }): boolean {
  if (!c.oneGpu || grid === 'never') return false;
  if (grid === 'always') return true;
  if (c.oneGpuFused !== undefined) return !c.oneGpuFused;
  return c.outputBytes >= GRID_MIN_BYTES && c.rowBytes % 16 === 0;
}

/** A payload: its buffers and row size (a plan's exchange has none: rowBytes 0, outId -1). */
export interface Payload {
  input?: GpuBuffer;
  output?: GpuBuffer;
  rowBytes: number;
  /** The call's SM budget: at most this many blocks in its data grid. */
  maxBlocks?: number;
  /** Bytes this rank sends at most, when fewer than its input holds: the data grid is sized from it (its blocks loop, so more is still moved right). */
  sizeHintBytes?: number;
  /** The token MoE group's exchanges (ONE_GPU_FUSED): on one GPU, whether they stay in x_fused under 'auto'. */
  oneGpuFused?: boolean;
  /** A second payload along the same exchange (backend.ts COMPANION). */
  companion?: Companion;
  /** int32 [send rows]: where each send row is in the input (backend.ts GATHER). */
  gather?: GpuBuffer;
  /** With `gather`: the same rows from the input's side (backend.ts SCATTER). */
  scatter?: Scatter;
  /** The caller's work in place of the copy (backend.ts BETWEEN). */
  between?: Between;
}

/** The kernels' view of a call: its kind, split buffers, experts, alignment and capacities in rows. */
export function exchangeCall(
  kind: ExchangeKind,
  a: { splits: DeviceBuffer; outSplitsOffsets: DeviceBuffer; expertsPerRank?: number; majorAlign?: number },
  rows: { inRows: number; outRows: number },
): ExchangeCall {
  const experts = kind === '1d' ? 1 : (a.expertsPerRank as number);
  return { kind, splits: a.splits, outSplitsOffsets: a.outSplitsOffsets, experts, align: kind === 'dispatch' ? (a.majorAlign ?? 1) : 1, ...rows };
}

/** A direct call's capacities: whole rows of its input and output. */
export function rowsOf(a: { input: DeviceBuffer; output: DeviceBuffer; rowBytes: number; [COMPANION]?: Companion; [GATHER]?: DeviceBuffer }): { inRows: number; outRows: number } {
  const rows = (b: { input: DeviceBuffer; output: DeviceBuffer; rowBytes: number }) => ({ inRows: Math.floor(b.input.bytes / b.rowBytes), outRows: Math.floor(b.output.bytes / b.rowBytes) });
  const own = rows(a);
  // Through a gather table the rows sent are the table's (each names a row of the input).
  const table = a[GATHER];
  if (table !== undefined) own.inRows = Math.floor(table.bytes / 4);
  const c = a[COMPANION];
  if (c === undefined) return own;
  // Both payloads land in the same rows: a call fits where both fit.
  const other = rows(c);
  return { inRows: Math.min(own.inRows, other.inRows), outRows: Math.min(own.outRows, other.outRows) };
}

type PayloadArgs = { input: DeviceBuffer; output: DeviceBuffer; rowBytes: number; maxBlocks?: number; sizeHintBytes?: number; [ONE_GPU_FUSED]?: boolean; [COMPANION]?: Companion; [GATHER]?: DeviceBuffer; [SCATTER]?: Scatter; [BETWEEN]?: Between };
export function payloadOf(a: PayloadArgs): Payload {
  const companion = a[COMPANION];
  if (companion !== undefined && (companion.rowBytes < 1 || (companion.output as GpuBuffer).peerTable === 0n)) {
    throw new UsageError('a companion payload needs a row size and a symmetric output');
  }
  const between = a[BETWEEN];
  if (between !== undefined && (a.input as GpuBuffer).peerTable === 0n) throw new UsageError('a call whose data the caller moves needs a symmetric input');
  return { input: a.input as GpuBuffer, output: a.output as GpuBuffer, rowBytes: a.rowBytes, maxBlocks: a.maxBlocks, sizeHintBytes: a.sizeHintBytes, oneGpuFused: a[ONE_GPU_FUSED], companion, gather: a[GATHER] as GpuBuffer | undefined, scatter: a[GATHER] !== undefined ? a[SCATTER] : undefined, between };
}

/** x_scatter_index's and x_copy_scatter's parameters: the rows that may send, within what the slots and the input hold. */
function scatterParams(sc: Scatter, input: GpuBuffer, rowBytes: number): Required<Pick<XParams, 'scatterSlots' | 'scatterDests' | 'scatterTokens' | 'scatterTopk' | 'scatterRows'>> {
  const rows = Math.min(sc.rows, Math.floor(input.bytes / rowBytes), Math.floor(sc.slots.bytes / (4 * sc.topk)), Math.floor(sc.dests.bytes / (8 * sc.topk)));
  return { scatterSlots: (sc.slots as GpuBuffer).ptr, scatterDests: (sc.dests as GpuBuffer).ptr, scatterTokens: (sc.tokens as GpuBuffer).ptr, scatterTopk: sc.topk, scatterRows: rows };
}

/** The bytes a call's data grid is sized for: its input (through a gather table, the table's rows), or the hint when smaller. */
const gridBytes = (payload: Payload): number => {
  const input = payload.gather ? (payload.gather.bytes / 4) * payload.rowBytes : (payload.input?.bytes ?? 0);
  return Math.min(input, payload.sizeHintBytes ?? Infinity);
};

const EXCHANGE_THREADS = 1024;
const COPY_THREADS = 512;
/** x_copy_slices' blocks: XS_THREADS threads of a 16-byte word each (kernels/exchange.cuh). */
export const SLICE_THREADS = 256;
const SLICE_BYTES = SLICE_THREADS * 16;
/**
 * Slices the grid of x_copy_slices is sized for a block: a block copies two in one round, a grid's
 * stride apart, and any further one after another. Measured at W = 8 on one H200 (docs/perf.md): a
 * combine, whose source is known only from the index, 1220 -> 1137 µs at 256 MiB with two, 1102.7
 * -> 1098.8 with three (1 GiB 4305 -> 4270: its blocks live two round trips, so fewer of them
 * gain); a dispatch 1130 -> 1122 with two, and three no faster (512 MiB 2132 -> 2147).
 * A2AV_PROBE_DEFINES=A2AV_PROBE_XS_SLICES=n and A2AV_PROBE_XS_COMBINE_SLICES=n: a probe's.
 */
const SLICES_A_BLOCK = probeNumber('A2AV_PROBE_XS_SLICES', 2);
const COMBINE_SLICES_A_BLOCK = probeNumber('A2AV_PROBE_XS_COMBINE_SLICES', 3);

/**
 * Gathered dispatches on the slice grid (x_copy_slices_gather). A2AV_PROBE_DEFINES=A2AV_PROBE_X_COPY_GATHER
 * (a probe's) sends them through x_copy_gather as before it, for a same-run comparison: at W = 8 on
 * one H200 the slice grid took 128-token dispatches from 165 / 137 µs to 111 / 100 (expanded /
 * compact), and 4096-token ones from 0.69 / 0.76 of the 1-D call to 0.82 / 0.82 once the token
 * group sized its grid for an even routing (docs/perf.md).
 */
const GATHER_SLICES = !probeSwitch('A2AV_PROBE_X_COPY_GATHER');
/**
 * The slice grid's kernels (one GPU) are launched early, each behind the one before (32 MiB dispatch
 * 198 -> 176 µs, 128-token compact dispatch 103 -> 95 in a graph, W = 8 on one H200).
 * A2AV_PROBE_DEFINES=A2AV_PROBE_X_PLAIN (a probe's) launches them plainly, for a same-run comparison.
 */
const SLICES_EARLY = !probeSwitch('A2AV_PROBE_X_PLAIN');
/**
 * Gathered dispatches on one GPU read each input row once and store it at each of its send rows'
 * places (x_scatter_index, x_copy_scatter) where the caller names the rows from the input's side
 * (backend.ts SCATTER): docs/perf.md "Token dispatch read once a token". A2AV_PROBE_DEFINES=A2AV_PROBE_X_NO_SCATTER
 * (a probe's) keeps them on x_copy_slices_gather, for a same-run comparison.
 */
const SCATTERS = !probeSwitch('A2AV_PROBE_X_NO_SCATTER');

/**
 * x_copy_slices' index span (kernels/exchange.cuh XS_INDEX_ENTRIES): the least power of two, from
 * a block's slice up, whose entries cover `bytes` (spans past the index are looked up, slowly).
 */
export function sliceSpanLog2(bytes: number): number {
  let log2 = Math.log2(SLICE_BYTES);
  while (Math.ceil(bytes / 2 ** log2) > SLICE_INDEX_ENTRIES) log2++;
  return log2;
}
/**
 * x_fused's block size. At W = 8 on one H200 the rows wait (W x (W x E + 2) packets, two or three a
 * thread with 512) is its longest wait; 1024 threads (A2AV_PROBE_DEFINES=A2AV_PROBE_XF_THREADS=1024, a
 * probe's) would take one or two, in half as many blocks (docs/perf.md has the prediction).
 */
const FUSED_THREADS = probeNumber('A2AV_PROBE_XF_THREADS', 512, 32);
/** Open exchange plans served from the pool; more are allocated (and freed) as they come and go. */
export const PLAN_POOL = 8;

export class MoeCalls {
  readonly #host: MoeHost;
  readonly #module: KernelModule;
  readonly #launcher: StructLauncher;
  readonly #fns: Record<'exchange' | 'check' | 'copy' | 'copyGather' | 'sliceIndex' | 'slices' | 'slicesGather' | 'scatterIndex' | 'copyScatter' | 'done' | 'doneOpen' | 'fused' | 'fusedGather', KernelFunction>;
  readonly #scratch = new Map<CudaLane, bigint>();
  /** A2AV_MOE_FUSED=0: every call as x_exchange + x_copy + x_done (to compare the two). */
  readonly #fused = moeFusedOn();
  /** A2AV_MOE_GRID (moeGridFromEnv): where calls whose ranks share one GPU copy in x_copy_slices. */
  readonly #grid = moeGridFromEnv();
  /** How every call's copy splits its blocks (plan.ts, peerSplitMode): fixed by where the ranks are. */
  readonly #splitByPeer: number;
  /** Programmatic dependent launch of x_fused (Hopper+), as kernels.ts; A2AV_EARLY_LAUNCH=0 turns it off. */
  readonly #earlyLaunch: boolean;
  /** Blocks of x_fused (or x_fused_gather) a rank keeps resident, by function and shared memory. */
  readonly #resident = new Map<KernelFunction, Map<number, number>>();
  /**
   * Plans' buffers, allocated at set-up: allocating or freeing device memory can wait for every
   * kernel on the GPU, among them a peer's that spins until this rank's next call.
   */
  #planPool = 0n;
  readonly #freePlans: bigint[] = [];

  /** `module`: kernels/exchange.cu, loaded before any rank launches (setup.ts says why). */
  constructor(host: MoeHost, module: KernelModule) {
    this.#host = host;
    this.#module = module;
    // Looking the functions up loads them now, not at a first launch beside a peer's spinning kernel.
    this.#launcher = new StructLauncher(module.fn('x_exchange'), X_PARAMS_BYTES);
    this.#fns = {
      exchange: module.fn('x_exchange'),
      check: module.fn('x_check'),
      copy: module.fn('x_copy'),
      copyGather: module.fn('x_copy_gather'),
      sliceIndex: module.fn('x_slice_index'),
      slices: module.fn('x_copy_slices'),
      slicesGather: module.fn('x_copy_slices_gather'),
      scatterIndex: module.fn('x_scatter_index'),
      copyScatter: module.fn('x_copy_scatter'),
      done: module.fn('x_done'),
      doneOpen: module.fn('x_done_open'),
      fused: module.fn('x_fused'),
      fusedGather: module.fn('x_fused_gather'),
    };
    this.#earlyLaunch = earlyLaunchWanted(host.device.arch);
    this.#splitByPeer = peerSplitMode({ allOnDevice: host.ranksOnDevice === host.worldSize, peerSplit: peerSplitFromEnv() });
  }

  /** Queues one whole call (exchange and data) on `lane`. */
  call(lane: CudaLane, x: ExchangeCall, payload: Payload, stream: Stream | undefined, what: string): Handle {
    this.#host.usable();
    const scratch = this.#scratchOf(lane);
    this.#host.follow(lane, stream);
    const plan = scratch + BigInt(scratchPlanOffset(this.#host.worldSize));
    const params = this.#paramsOf(lane, x, payload, plan);
    if (payload.between !== undefined) {
      // The agreement, the caller's work on the lane, the completion; every rank takes this path
      // for the same input allocation, else the exchange refuses the call (outId: #paramsOf).
      this.#queue(lane.stream, params, ['exchange'], payload);
      payload.between.launch(lane.stream);
      this.#queue(lane.stream, params, ['done'], payload);
    } else if (this.#takesFused(x, payload)) {
      this.#queueFused(lane.stream, params, x, payload);
    } else if (payload.companion === undefined) {
      this.#queue(lane.stream, params, ['exchange', 'copy', 'done'], payload);
    } else {
      // The companion's rows along the same plan: a second copy before the completion.
      const c = payload.companion;
      const second: Payload = { input: c.input as GpuBuffer, output: c.output as GpuBuffer, rowBytes: c.rowBytes, maxBlocks: payload.maxBlocks, oneGpuFused: payload.oneGpuFused };
      if (payload.sizeHintBytes !== undefined) second.sizeHintBytes = (payload.sizeHintBytes / payload.rowBytes) * c.rowBytes;
      this.#queue(lane.stream, params, ['exchange', 'copy'], payload);
      this.#queue(lane.stream, this.#paramsOf(lane, x, second, plan), ['copy', 'done'], second);
    }
    return this.#host.finish(lane, what);
  }

  /**
   * Every rank takes the same path (x_fused meets x_exchange only in a call refused for a mismatch,
   * and answers it: kernels/exchange.cu): it depends on W, E, the ranks' places, the row size and
   * the output, one symmetric allocation of the same size on every rank (another row size or
   * output is refused).
   */
  #takesFused(x: ExchangeCall, payload: Payload): boolean {
    if (!this.#fused || x.kind === '1d' || !fusedFits(this.#host.worldSize, x.experts)) return false;
    return !leavesFused(this.#grid, { oneGpu: this.#oneGpu(), outputBytes: payload.output?.bytes ?? 0, rowBytes: payload.rowBytes, oneGpuFused: payload.oneGpuFused });
  }

  /** Every rank of the call on this GPU (more than one): their copies may take x_copy_slices. */
  #oneGpu(): boolean {
    return this.#host.worldSize > 1 && this.#host.ranksOnDevice === this.#host.worldSize;
  }

  /** Whether copies may take the slice grid (an aligned, ungathered payload then does): its index lives past each lane's scratch. */
  #sliceGrid(): boolean {
    return this.#grid !== 'never' && this.#oneGpu();
  }

  /** Builds an exchange plan on `lane`: the exchange now, moves later. */
  plan(lane: CudaLane, x: ExchangeCall, stream: Stream | undefined, what: string, maxBlocks?: number): ExchangePlan {
    this.#host.usable();
    const scratch = this.#scratchOf(lane);
    const host = this.#host;
    const buf = this.#takePlanBuffer();
    host.follow(lane, stream);
    // callPlan -1: a direct call beside it is refused as a mismatch of field 'plan', as on cpu.
    this.#queue(lane.stream, { ...this.#paramsOf(lane, x, { rowBytes: 0 }, buf, scratch), callPlan: -1 }, ['exchange', 'done'], { rowBytes: 0 });
    const ready = host.finish(lane, what);
    let closed = false;
    return {
      ready,
      move: (m: PlanMoveArgs): Handle => {
        if (closed) throw new UsageError(`rank ${host.rank}: this exchange plan is closed`);
        host.usable();
        const payload = { input: m.input as GpuBuffer, output: m.output as GpuBuffer, rowBytes: m.rowBytes, maxBlocks };
        host.follow(lane, m.stream);
        this.#queue(lane.stream, this.#paramsOf(lane, x, payload, buf, scratch), ['check', 'copy', 'done'], payload);
        return host.finish(lane, moveWhat(what));
      },
      close: () => {
        if (closed) return;
        if (host.capturing()) throw new UsageError(PLAN_CLOSE_IN_CAPTURE(host.rank));
        closed = true;
        // Its moves may still be queued: the buffer goes once the lane has run them.
        lane.stream.synchronize();
        this.#givePlanBuffer(buf);
      },
    };
  }

  /** Frees the lanes' scratch and the plans' pool (the communicator has synchronised the device). */
  release(): void {
    for (const ptr of this.#scratch.values()) this.#host.device.free(ptr);
    this.#scratch.clear();
    if (this.#planPool !== 0n) this.#host.device.free(this.#planPool);
    this.#planPool = 0n;
    this.#freePlans.length = 0;
    this.#module.unload();
  }

  /**
   * Gives each lane its scratch, at set-up: allocating (and freeing) device memory may wait for the
   * kernels running on the GPU, and once calls run, a peer's kernel may be spinning on this rank.
   */
  prepare(lanes: readonly CudaLane[]): void {
    if (this.#planPool === 0n) {
      const bytes = planBytes(this.#host.worldSize);
      this.#planPool = this.#host.device.alloc(PLAN_POOL * bytes);
      for (let i = PLAN_POOL - 1; i >= 0; i--) this.#freePlans.push(this.#planPool + BigInt(i * bytes));
    }
    for (const lane of lanes) {
      if (this.#scratch.has(lane)) continue;
      // x_copy_slices' index past the scratch, where its grid may run.
      const W = this.#host.worldSize;
      const bytes = this.#sliceGrid() ? sliceIndexOffset(W) + SLICE_INDEX_BYTES : scratchBytes(W);
      const ptr = this.#host.device.alloc(bytes);
      // x_fused's blocks wait there for a word equal to the call's sequence number: none may be there.
      this.#host.device.memsetAsync(ptr, 0, bytes, lane.stream);
      lane.stream.synchronize();
      this.#scratch.set(lane, ptr);
    }
  }

  /** A plan's device buffer: from the pool while it lasts (no allocation beside running calls), else allocated. */
  #takePlanBuffer(): bigint {
    return this.#freePlans.pop() ?? this.#host.device.alloc(planBytes(this.#host.worldSize));
  }

  #givePlanBuffer(buf: bigint): void {
    const bytes = BigInt(planBytes(this.#host.worldSize));
    if (this.#planPool !== 0n && buf >= this.#planPool && buf < this.#planPool + BigInt(PLAN_POOL) * bytes) this.#freePlans.push(buf);
    else this.#host.device.free(buf);
  }

  #scratchOf(lane: CudaLane): bigint {
    const ptr = this.#scratch.get(lane);
    if (ptr === undefined) throw new UsageError(`rank ${this.#host.rank}: lane ${lane.index} has no MoE scratch (prepare() was not called)`);
    return ptr;
  }

  #paramsOf(lane: CudaLane, x: ExchangeCall, payload: Payload, plan: bigint, scratch = plan - BigInt(scratchPlanOffset(this.#host.worldSize))): XParams {
    const host = this.#host;
    const pad = host.pad();
    return {
      input: payload.input?.ptr ?? 0n,
      outPeers: payload.output?.peerTable ?? 0n,
      splits: (x.splits as GpuBuffer).ptr,
      outSplitsOffsets: (x.outSplitsOffsets as GpuBuffer).ptr,
      padPeers: pad.peerTable,
      pad: pad.ptr,
      plan,
      scratch,
      laneOffset: lane.offset,
      rowBytes: payload.rowBytes,
      // A call whose data the caller moves is checked as one input allocation on every rank (a
      // rank that copies names its output: that call is refused as a mismatch, on every rank).
      outId: payload.between !== undefined ? (payload.input?.symmetricId ?? -1) : (payload.output?.symmetricId ?? -1),
      inRows: x.inRows,
      outRows: x.outRows,
      timeoutNs: BigInt(Math.round(host.timeoutMs * 1e6)),
      align: x.align,
      kind: ExchangeKind[x.kind],
      experts: x.experts,
      rank: host.rank,
      world: host.worldSize,
      splitByPeer: this.#splitByPeer,
      input2: (payload.companion?.input as GpuBuffer | undefined)?.ptr ?? 0n,
      outPeers2: (payload.companion?.output as GpuBuffer | undefined)?.peerTable ?? 0n,
      rowBytes2: payload.companion?.rowBytes ?? 0,
      gatherRows: payload.gather?.ptr ?? 0n,
      gatherInputRows: payload.gather && payload.input ? Math.floor(payload.input.bytes / payload.rowBytes) : 0,
      ...(payload.scatter && payload.input ? scatterParams(payload.scatter, payload.input, payload.rowBytes) : {}),
    };
  }

  /**
   * One x_fused: its blocks sweep the send bytes (as a2av_1d's), as many as the input can use and
   * every rank on this GPU can keep resident at once (each block waits for its peers' packets).
   */
  #queueFused(stream: CudaStream, params: XParams, x: ExchangeCall, payload: Payload): void {
    const launcher = this.#launcher;
    writeXParams(launcher.view, params);
    const smem = fusedSharedBytes(this.#host.worldSize, x.experts, x.kind === 'dispatch');
    const fn = payload.gather ? this.#fns.fusedGather : this.#fns.fused;
    const known = this.#resident.get(fn) ?? new Map<number, number>();
    this.#resident.set(fn, known);
    let resident = known.get(smem);
    if (resident === undefined) {
      resident = Math.floor((fn.maxActiveBlocksPerSm(FUSED_THREADS, smem) * this.#host.device.smCount) / (this.#host.ranksOnDevice * laneShares(this.#host.laneCount)));
      known.set(smem, resident);
    }
    if (resident < 1) throw new UsageError(`rank ${this.#host.rank}: ${this.#host.ranksOnDevice} ranks on one GPU leave no room for a block of x_fused`);
    const tile = FUSED_THREADS * 16 * 4;
    const blocks = Math.max(1, Math.min(resident, payload.maxBlocks ?? Infinity, Math.ceil(gridBytes(payload) / tile)));
    // An early launch keeps the next call's blocks beside this call's: only where twice fit.
    if (this.#earlyLaunch && 2 * blocks <= resident) launcher.launchEarly(blocks, FUSED_THREADS, stream, smem, fn);
    else launcher.launch(blocks, FUSED_THREADS, stream, smem, fn);
  }

  #queue(stream: CudaStream, params: XParams, steps: ('exchange' | 'check' | 'copy' | 'done')[], payload: Payload): void {
    const launcher = this.#launcher;
    // Sized from what the input can hold: the counts stay on the device. Blocks loop over tiles.
    const bytes = gridBytes(payload) || 1;
    const aligned = payload.rowBytes % 16 === 0 && (payload.input?.ptr ?? 0n) % 16n === 0n;
    // A gathered payload takes the slice grid as a dispatch only (x_copy_slices_gather finds a send
    // row's source from its place in send order, which is its place in a dispatch's input) and under
    // 4 GiB of table rows (its quotients are 32-bit); else x_copy_gather.
    const gathered = GATHER_SLICES && payload.gather !== undefined && params.kind === ExchangeKind.dispatch && (payload.gather.bytes / 4) * payload.rowBytes < 2 ** 32;
    const slices = this.#sliceGrid() && aligned && (!payload.gather || gathered);
    // Read from the input's side (x_copy_scatter): its quotients are 32-bit too.
    const sc = payload.scatter;
    const scatterRows = sc && payload.input ? scatterParams(sc, payload.input, payload.rowBytes).scatterRows : 0;
    const scatters = SCATTERS && slices && gathered && scatterRows * payload.rowBytes < 2 ** 32;
    writeXParams(launcher.view, slices ? { ...params, sliceSpanLog2: sliceSpanLog2(bytes), gridBytes: bytes } : params);
    const device = this.#host.device;
    // The slice grid's kernels are launched early, each behind the one before, and its x_done lets
    // the next call's exchange (one block) wait beside it.
    const early = slices && this.#earlyLaunch && SLICES_EARLY;
    const go = (blocks: number, threads: number, fn: KernelFunction) =>
      early ? launcher.launchEarly(blocks, threads, stream, 0, fn) : launcher.launch(blocks, threads, stream, 0, fn);
    for (const step of steps) {
      if (step === 'exchange') go(1, EXCHANGE_THREADS, this.#fns.exchange);
      else if (step === 'check') go(1, 32 * Math.min(32, Math.ceil((2 * this.#host.worldSize) / 32)), this.#fns.check);
      else if (step === 'done') {
        const threads = Math.min(1024, 32 * Math.ceil(this.#host.worldSize / 32));
        if (early) launcher.launchEarly(1, threads, stream, 0, this.#fns.doneOpen, true);
        else launcher.launch(1, threads, stream, 0, this.#fns.done);
      } else if (scatters) {
        // Each (row, k)'s place (a thread an entry), then a block a slice of the input (kernels/exchange-slices.cuh).
        const budget = payload.maxBlocks ?? Infinity;
        go(Math.max(1, Math.min(budget, Math.ceil((scatterRows * sc!.topk) / SLICE_THREADS))), SLICE_THREADS, this.#fns.scatterIndex);
        go(Math.max(1, Math.min(budget, Math.ceil((scatterRows * payload.rowBytes) / SLICE_BYTES))), SLICE_THREADS, this.#fns.copyScatter);
      } else if (slices) {
        // The index (a warp a chunk), then a block two slices (kernels/exchange-slices.cuh).
        const chunks = this.#host.worldSize * params.experts;
        go(Math.max(1, Math.min(payload.maxBlocks ?? Infinity, Math.ceil(chunks / (SLICE_THREADS / 32)))), SLICE_THREADS, this.#fns.sliceIndex);
        const perBlock = params.kind === ExchangeKind.combine ? COMBINE_SLICES_A_BLOCK : SLICES_A_BLOCK;
        go(Math.max(1, Math.min(payload.maxBlocks ?? Infinity, Math.ceil(bytes / (perBlock * SLICE_BYTES)))), SLICE_THREADS, payload.gather ? this.#fns.slicesGather : this.#fns.slices);
      } else {
        const blocks = Math.max(1, Math.min(4 * device.smCount, payload.maxBlocks ?? Infinity, Math.ceil(bytes / (COPY_THREADS * 64))));
        launcher.launch(blocks, COPY_THREADS, stream, 0, payload.gather ? this.#fns.copyGather : this.#fns.copy);
      }
    }
  }
}
