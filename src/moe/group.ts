// Token-level MoE on the 2-D exchange: createMoeGroup sizes a group's buffers once, dispatch routes
// each token's top-k expert ids into the exchange's rank-major order on the device and moves the
// rows (comm.allToAllV2d), combine moves the expert outputs back (comm.allToAllV2dOffset, the
// reverse permutation) and reduces them on each token's own rank in top-k order. Per dispatch:
//   route   inSplits (rows per rank and expert, or per rank) and each (token, k)'s send row;
//   gather  the rows (on cuda, unless A2AV_MOE_GATHER=0: their token numbers; the exchange reads x), and
//           their metadata, into send order;
//   x       the exchange of the rows into recvX and, on every rank, of their metadata (compact: ids
//           and weights; expanded: the weight): one launch on cuda (its companion), two on cpu and nccl;
//   layout  counts, offsets, padding rows zeroed, metadata unpacked: only if the exchange ran.
// All on the caller's stream around the exchanges on the group's lane, so graph-capturable. Each
// step is one launch on a GPU and nothing waits on the host: at one token a call costs its
// launches (kernels/moe-tokens.cu says how the steps avoid memsets of their own).
import { BETWEEN, COMPANION, EXPLAINED, GATHER, ON_REPLAY, ONE_GPU_FUSED, SCATTER, type Comm, type DeviceBuffer, type Handle, type Lane, type Stream } from '../backends/backend.js';
import { checkArgsObject } from '../collectives/check.js';
import { ClosedError, CommAbortedError, HostMemoryError, UsageError } from '../errors.js';
import { moeGatherOn, moePullFromEnv } from '../knobs.js';
import type { MoeCombineArgs, MoeDispatchArgs, MoeDispatchResult, MoeGroup, MoeGroupOptions, MoeLayout, MoeRoute } from './api.js';
import { checkAgreedOptions, checkCombine, checkContext, checkDispatch, MOE_COMBINE_ARGS, MOE_DISPATCH_ARGS } from './check.js';
import type { ComputeFactory, TokenBuffers, TokenCompute } from './compute.js';
import { combineError, dispatchError, reusedRouteError, type DispatchFacts, type TokenLimit } from './errors.js';
import { HostCompute } from './host-compute.js';
import { KernelCompute } from './kernel-compute.js';
import type { TokenShape } from './shape.js';

/**
 * Collective: every rank calls it with the same options (else UsageError on every rank, naming the
 * option that differs), between phases of work (it allocates, and loads kernels on GPUs).
 */
export async function createMoeGroup(comm: Comm, options: MoeGroupOptions): Promise<MoeGroup> {
  return createMoeGroupWith(comm, options, await defaultCompute(comm));
}

async function defaultCompute(comm: Comm): Promise<ComputeFactory> {
  if (comm.backend === 'cpu') return (shape, bufs) => new HostCompute(shape, bufs);
  const { CudaTokenDevice, TOKEN_MODULE, tokenModuleOptions } = await import('./cuda-device.js');
  // On cuda the communicator loads the kernels once for the ranks sharing a GPU in one process
  // (backends/cuda/modules.ts) and keeps them; on nccl each rank loads its own.
  const shared = comm instanceof (await import('../backends/cuda/comm.js')).CudaComm ? await comm.kernelModule(TOKEN_MODULE, tokenModuleOptions()) : undefined;
  return (shape, bufs) => new KernelCompute(new CudaTokenDevice(shared), shape, bufs);
}

/** createMoeGroup with the compute given (the tests run the kernels compiled for the host this way). */
export async function createMoeGroupWith(comm: Comm, options: MoeGroupOptions, factory: ComputeFactory): Promise<MoeGroup> {
  const ctx = checkContext(comm);
  const shape = await checkAgreedOptions(comm, ctx, options);
  const lane = options.lane ?? comm.lane(0);
  const bufs = await allocate(comm, shape);
  // Rank 0 compiles the kernels (or fills the on-disk cache) first; then nobody launches until
  // every rank has loaded them: loading waits for the kernels on the GPU, and a peer's kernel that
  // waits for this rank would never end.
  if (comm.rank !== 0) await comm.barrier();
  const compute = factory(shape, bufs);
  if (comm.rank === 0) await comm.barrier();
  await comm.barrier();
  return new TokenGroup(comm, shape, lane, bufs, compute);
}

async function allocate(comm: Comm, s: TokenShape): Promise<TokenBuffers> {
  const gathers = gathersRows(comm);
  const made: DeviceBuffer[] = [];
  // Each buffer by its name, so a refusal says which one and from what; a failure frees the ones
  // made before it (a group that failed keeps nothing).
  const alloc = async (name: string, bytes: number, how: string, symmetric = false): Promise<DeviceBuffer> => {
    try {
      const buf = symmetric ? await comm.allocSymmetric(bytes) : comm.alloc(bytes);
      made.push(buf);
      return buf;
    } catch (err) {
      for (const buf of made) comm.free(buf);
      if (err instanceof HostMemoryError) throw new HostMemoryError(err.rank, bytes, `createMoeGroup: its ${name} buffer (${how})`, { cause: err });
      if (!(err instanceof UsageError) || err instanceof ClosedError) throw err;
      throw new UsageError(`rank ${comm.rank}: createMoeGroup: its ${name} buffer of ${bytes} bytes (${how}): ${err.message}`, { cause: err });
    }
  };
  const n = s.buckets;
  const tokens = `maxTokensPerRank ${s.tokenCap}`;
  const sent = `${s.sendRows} rows sent at most: ${tokens} × ${s.sendRows / s.tokenCap} a token`;
  const bufs: TokenBuffers = {
    hist: await alloc('hist', 4 * s.chunks * n, 'token counts per chunk and bucket'),
    local: await alloc('local', 4 * s.tokenCap * s.topk, `${tokens} × topk ${s.topk}`),
    slot: await alloc('slot', 4 * s.tokenCap * s.topk, `${tokens} × topk ${s.topk}`),
    starts: await alloc('starts', 8 * n, 'a word per bucket'),
    inSplits: await alloc('inSplits', 8 * n, 'a word per bucket'),
    fault: await alloc('fault', 8, 'a word'),
    routeTicket: await alloc('routeTicket', 8, 'a word'),
    reduceTicket: await alloc('reduceTicket', 8, 'a word'),
    routeTokens: await alloc('routeTokens', 8, 'a word'),
    metaOso: await alloc('metaOso', 16 * n, 'two words per bucket'),
    combineOso: await alloc('combineOso', 16 * n, 'two words per bucket'),
    ...(gathers
      ? { rowOf: await alloc('rowOf', 4 * s.sendRows, sent), dests: await alloc('dests', 8 * s.tokenCap * s.topk, `${tokens} × topk ${s.topk}`) }
      : { send: await alloc('send', s.sendRows * s.rowBytes, `${sent}, of rowBytes ${s.rowBytes}`) }),
    sendMeta: await alloc('sendMeta', s.sendRows * s.metaBytes, `${sent}, of ${s.metaBytes} bytes of metadata`),
    recvMeta: await alloc('recvMeta', s.recvRows * s.metaBytes, `${s.recvRows} rows received at most, of ${s.metaBytes} bytes of metadata`, true),
    // Symmetric: a pulling combine reads where its rows landed in each peer's (compute.ts pullFrom).
    routeOso: await alloc('routeOso', 16 * n, 'two words per bucket', true),
    back: await alloc('back', s.sendRows * s.combineRowBytes, `${sent}, of combineRowBytes ${s.combineRowBytes}`, true),
  };
  // What the kernels leave so after every call (compute.ts), and where they start: device memory starts as anything.
  for (const b of [bufs.fault, bufs.routeTicket, bufs.reduceTicket]) comm.write(b, new Uint8Array(b.bytes));
  comm.write(bufs.combineOso, new Uint8Array(bufs.combineOso.bytes).fill(0xff));
  return bufs;
}

/**
 * Whether the exchange reads each row from x through rowOf (backend.ts GATHER, the x_*_gather
 * kernels) rather than from a copy in send order (cpu and nccl: always the copy). On cuda unless
 * A2AV_MOE_GATHER=0: a 4096-token dispatch on two H200s took 749 µs against the copy's 876
 * (expanded; compact 240 against 299), at W = 8 on one H200 2655 against 3279; 128 tokens and
 * fewer within 1-2 µs either way, W = 8's 128 tokens 13 µs slower (docs/perf.md; measured before
 * ranks on one GPU read the rows through x_copy_slices_gather). A per-rank choice: the exchange is
 * the same either way.
 */
function gathersRows(comm: Comm): boolean {
  return comm.backend === 'cuda' && moeGatherOn();
}

/** A route: the group's routing as of one dispatch, and that dispatch's capacities. */
class TokenRoute implements MoeRoute {
  /** The latest dispatch along this route: a combine of a refused one reports that dispatch's error. */
  dispatched: Handle | undefined;
  /** The dispatch that worked this routing out: a later dispatch along a refused one reports its error. */
  routed: Handle | undefined;
  constructor(
    readonly layout: MoeLayout,
    readonly group: TokenGroup,
    readonly tokenCap: number,
    /** The rows of the latest dispatch's recvX along it (capped at the group's recvRows): the combine's y has its layout. */
    public recvCap: number,
    /** The count's device buffer, if it was one (tokenCap is then the most it could be, bounded by `limit`). */
    readonly numTokens: DeviceBuffer | undefined,
    readonly limit: TokenLimit,
  ) {}

  get deviceCount(): boolean {
    return this.numTokens !== undefined;
  }
}

class TokenGroup implements MoeGroup {
  readonly layout: MoeLayout;
  readonly numExperts: number;
  readonly expertsPerRank: number;
  readonly topk: number;
  readonly maxTokensPerRank: number;
  readonly rowBytes: number;
  readonly combineRowBytes: number;
  readonly expertAlignment: number;
  readonly recvRows: number;
  readonly #comm: Comm;
  readonly #shape: TokenShape;
  readonly #lane: Lane;
  readonly #bufs: TokenBuffers;
  readonly #compute: TokenCompute;
  /**
   * Whether a combine whose y is symmetric reads it in place: cuda with every rank on one GPU
   * (across GPUs the reads cross NVLink, not yet measured there: A2AV_MOE_PULL=always takes them);
   * A2AV_MOE_PULL=never keeps the copy back. The same on every rank: every rank of a job on one GPU
   * sees ranksOnDevice === worldSize, and the launcher gives every rank the same environment.
   */
  readonly #pulls: boolean;
  /**
   * The route of the routing now on the device (in the order calls are queued): the latest
   * dispatch without `route`, eager or a graph's replay. Only it can be used.
   */
  #route: TokenRoute | undefined;
  #closed = false;

  constructor(comm: Comm, shape: TokenShape, lane: Lane, bufs: TokenBuffers, compute: TokenCompute) {
    const pull = moePullFromEnv();
    this.#pulls = comm.backend === 'cuda' && (pull === 'always' || (pull === 'auto' && comm.ranksOnDevice === comm.worldSize));
    this.#comm = comm;
    this.#shape = shape;
    this.#lane = lane;
    this.#bufs = bufs;
    this.#compute = compute;
    this.layout = shape.layout;
    this.numExperts = shape.experts;
    this.expertsPerRank = shape.expertsPerRank;
    this.topk = shape.topk;
    this.maxTokensPerRank = shape.tokenCap;
    this.rowBytes = shape.rowBytes;
    this.combineRowBytes = shape.combineRowBytes;
    this.expertAlignment = shape.align;
    this.recvRows = shape.recvRows;
  }

  dispatch(a: MoeDispatchArgs): MoeDispatchResult {
    this.#usable('dispatch', a);
    const reused = a.route === undefined ? undefined : this.#current(a.route, 'dispatch');
    const p = checkDispatch(checkContext(this.#comm), this.#shape, a, reused);
    const [s, b, sh, comm] = [a.stream ?? this.#lane.stream, this.#bufs, this.#shape, this.#comm];
    const compute = this.#compute;
    const gather = { place: reused === undefined, topkIdx: a.topkIdx, idx64: p.idx64, x: a.x, weights: a.topkWeights, tokenCap: p.tokenCap };
    if (reused === undefined) compute.routeAndGather(s, { topkIdx: a.topkIdx, idx64: p.idx64, numTokens: p.numTokens, tokens: p.tokens, tokenCap: p.tokenCap }, gather);
    else compute.gather(s, gather);
    let route = reused;
    // A combine follows the latest dispatch: its y is checked against this recvX, not the first's.
    if (route !== undefined) route.recvCap = p.recvCap;
    if (route === undefined) {
      const fresh = new TokenRoute(sh.layout, this, p.tokenCap, p.recvCap, p.numTokens, p.limit);
      this.#route = route = fresh;
      // A capture's replay works this routing out again on the device: its route is then the current one.
      comm[ON_REPLAY]?.(() => {
        this.#route = fresh;
      });
    }
    // The rows this call sends where the routing is even, to size the exchange's launch by (its
    // input holds the worst case; blocks past the hint loop).
    const sends = Math.ceil(p.tokenCap * sh.evenRowsPerToken);
    const exchange = { inSplits: b.inSplits, expertsPerRank: sh.exchangeExperts, majorAlign: sh.exchangeAlign, lane: this.#lane, stream: s };
    const rows = { ...exchange, output: a.recvX, outSplitsOffsets: b.routeOso, rowBytes: sh.rowBytes, sizeHintBytes: sends * sh.rowBytes };
    // The metadata moves with every dispatch, whether or not this rank wants it back (expanded
    // without recvTopkWeights): every rank then runs the same exchanges, whatever its peers pass.
    const meta = { input: b.sendMeta, output: b.recvMeta, rowBytes: sh.metaBytes };
    const parts: Handle[] = [];
    const along = route;
    const routed = route.routed;
    const explain = reused === undefined ? (err: unknown) => dispatchError(err, sh, this.#facts(along)) : (err: unknown) => reusedRouteError(err, () => outcome(routed), sh, this.#facts(along));
    const queue = () => {
      if (comm.backend === 'cuda') {
        // The metadata rides along the rows' exchange (one launch); the rows from x through rowOf, or from send.
        // On one GPU each x row is read once for all its send rows (SCATTER: the slots name them).
        const from = b.rowOf ? { input: a.x, [GATHER]: b.rowOf, [SCATTER]: { slots: b.slot, dests: b.dests!, tokens: b.routeTokens, topk: sh.topk, rows: p.tokenCap } } : { input: b.send! };
        parts.push(comm.allToAllV2d(Object.assign({ ...rows, ...from }, { [COMPANION]: meta, [ONE_GPU_FUSED]: sh.sendRows * sh.rowBytes < DISPATCH_FUSED_BELOW })));
      } else {
        parts.push(comm.allToAllV2d({ ...rows, input: b.send! }));
        parts.push(unlessAborted(() => comm.allToAllV2d({ ...exchange, ...meta, outSplitsOffsets: b.metaOso, sizeHintBytes: sends * sh.metaBytes })));
      }
    };
    // A replay of this dispatch reports its refusal as the eager handle below does.
    if (comm[EXPLAINED]) comm[EXPLAINED](explain, queue);
    else queue();
    this.#follow(parts, s);
    compute.layout(s, { recvX: a.recvX, recvIdx: a.recvTopkIdx, idx64: p.idx64, recvWeights: a.recvTopkWeights, counts: a.expertCounts, offsets: a.expertOffsets, numRecvRows: a.numRecvRows });
    const done = joined(parts, comm.record(s), explain);
    route.dispatched = done;
    route.routed ??= done;
    return { route, done };
  }

  combine(a: MoeCombineArgs): Handle {
    this.#usable('combine', a);
    const route = this.#current(a.route, 'combine');
    const hidden = checkCombine(checkContext(this.#comm), this.#shape, a, route);
    const [s, b, sh, compute] = [a.stream ?? this.#lane.stream, this.#bufs, this.#shape, this.#compute];
    const reduce = { out: a.out, weights: a.topkWeights, bias: a.bias, dtype: a.dtype, hidden, tokenCap: route.tokenCap };
    // Where y is symmetric, each term is read where its expert rank left it, between the exchange's
    // agreement and its completion (compute.ts pullFrom); else the exchange brings the rows back and
    // the reduction reads them there.
    const pull = this.#pulls ? compute.pullFrom?.(a.y) : undefined;
    const how = pull !== undefined
      ? { [BETWEEN]: { launch: (stream: Stream) => pull(stream, reduce) } }
      : { [ONE_GPU_FUSED]: sh.sendRows * sh.combineRowBytes < COMBINE_FUSED_BELOW };
    // The dispatch this combine follows (a later one along the route may be refused otherwise).
    const dispatched = route.dispatched;
    const explain = (err: unknown) => combineError(err, () => outcome(dispatched));
    const queue = () => this.#comm.allToAllV2dOffset(Object.assign({
      input: a.y,
      output: b.back,
      inSplitsOffsets: b.routeOso,
      outSplitsOffsets: b.combineOso,
      expertsPerRank: sh.exchangeExperts,
      rowBytes: sh.combineRowBytes,
      lane: this.#lane,
      stream: s,
      // What this rank sent in the dispatch: what it gets back where the routing is even.
      sizeHintBytes: Math.ceil(route.tokenCap * sh.evenRowsPerToken) * sh.combineRowBytes,
    }, how));
    // A replay of this combine reports its refusal as the eager handle below does.
    const h = this.#comm[EXPLAINED] ? this.#comm[EXPLAINED](explain, queue) : queue();
    this.#follow([h], s);
    if (pull === undefined) compute.reduce(s, reduce);
    return joined([h], this.#comm.record(s), explain);
  }

  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    // Peers may still be writing into this rank's symmetric buffers: meet them first. A peer that
    // gave up (timeout) never comes, so a failed meeting only delays the release.
    await this.#comm.barrier().catch(() => {});
    this.#compute.close();
    for (const buf of Object.values(this.#bufs)) this.#comm.free(buf);
  }

  /** Orders `stream` after the exchanges; on the lane's own stream they are already before it. */
  #follow(parts: Handle[], stream: Stream): void {
    if (stream !== this.#lane.stream) for (const h of parts) h.waitOn(stream);
  }

  /** What a refusal of a dispatch along `route` is told with on this rank. */
  #facts(route: TokenRoute): DispatchFacts {
    const comm = this.#comm;
    return {
      rank: comm.rank,
      deviceCount: route.deviceCount,
      tokenCap: route.tokenCap,
      limit: route.limit,
      readCount(): bigint | undefined {
        // After the refusal the count is what the call read, unless the program wrote another since
        // (dispatchError names it only if it is still out of range); a freed buffer reads nothing.
        try {
          return route.numTokens && new BigInt64Array(comm.read(route.numTokens, 0, 8).slice().buffer)[0];
        } catch {
          return undefined;
        }
      },
    };
  }

  #current(route: MoeRoute, what: string): TokenRoute {
    if (route === undefined) throw new UsageError(`rank ${this.#comm.rank}: MoE ${what}: route is missing (pass the route of this group's latest dispatch)`);
    if (!(route instanceof TokenRoute) || route.group !== this) throw new UsageError(`rank ${this.#comm.rank}: MoE ${what}: the route is not one of this group's`);
    if (route !== this.#route) throw new UsageError(`rank ${this.#comm.rank}: MoE ${what}: the route was replaced by a later dispatch (a group keeps one routing)`);
    return route;
  }

  #usable(what: 'dispatch' | 'combine', args: unknown): void {
    if (this.#closed) throw new UsageError(`rank ${this.#comm.rank}: this MoE group is closed`);
    // A closed communicator is a ClosedError, as every call on it is, not a message about the
    // buffers its close() freed: lane() is the one call of each backend that checks only that.
    this.#comm.lane(this.#lane.index);
    checkArgsObject(checkContext(this.#comm), `MoE ${what}`, args, what === 'dispatch' ? MOE_DISPATCH_ARGS : MOE_COMBINE_ARGS);
  }
}

/**
 * A call after the first exchange of a dispatch. Where a collective runs when called (cpu), a
 * timeout in the first has already aborted the communicator: the first's handle reports it.
 */
function unlessAborted(call: () => Handle): Handle {
  try {
    return call();
  } catch (err) {
    if (!(err instanceof CommAbortedError)) throw err;
    return { wait: () => { throw err; }, waitOn: () => {} };
  }
}

/** What a handle's wait() throws, or undefined where it returns. */
function outcome(h: Handle | undefined): unknown {
  try {
    h?.wait();
    return undefined;
  } catch (err) {
    return err;
  }
}

/**
 * One handle for a call's exchanges and the group's work after them: wait() reports the
 * exchanges' outcome (as the group's error), then waits for the rest; waitOn orders after all.
 */
function joined(parts: Handle[], after: Handle, explain: (err: unknown) => unknown): Handle {
  let failure: unknown;
  return {
    wait(): void {
      if (failure !== undefined) throw failure;
      for (const h of parts) {
        try {
          h.wait();
        } catch (err) {
          failure = explain(err);
          throw failure;
        }
      }
      after.wait();
    },
    waitOn(stream: Stream): void {
      after.waitOn(stream);
    },
  };
}

/**
 * Where every rank is on one GPU, whether the exchanges stay in the cuda backend's one-kernel path
 * (backend.ts ONE_GPU_FUSED; the same on every rank: from the group's shape). Measured at W = 8 on one
 * H200, DeepSeek-V3 shape, graph µs at 1 / 128 / 4096 tokens (docs/perf.md): dispatch in one kernel
 * 85 / 225 / 4428 against three launches 52 / 209 / 3279; since x_fused lost 10 µs of its path, at
 * 1 / 8 / 32 / 128 tokens 28 / 30 / 49 / 143 (expanded) against 38 / 41 / 53 / 110, so while a rank's
 * rows out at most are under 4 MiB (32 tokens: 3.5 MiB; 64, not measured, 7 MiB); combine 35 / 223 / 5044 against
 * 42 / 202 / 3767, so while a rank's rows back at most (maxTokensPerRank's) are under 1 MiB: between
 * 1 token's 112 KiB and 128 tokens' 14 MiB, not measured in between.
 */
const COMBINE_FUSED_BELOW = 1 << 20;
const DISPATCH_FUSED_BELOW = 4 << 20;
