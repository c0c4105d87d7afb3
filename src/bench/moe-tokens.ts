// `a2av bench --op moe-dispatch|moe-combine`: a token MoE group (createMoeGroup) timed per token
// count, DeepSeek-V3's shape by default (256 experts, top-8, hidden 7168 in bf16): µs per dispatch
// and per combine, GB/s by DeepEP's byte count (selections x hidden x 2 bytes), and the 1-D call
// moving the same rows between the same ranks beside them. Routing: every token picks topk
// distinct experts uniformly at random (seeded). Each token count is checked first
// (moe-token-check.ts): the counts, sampled received rows, and the combine of sampled tokens.
import type { BackendName, Comm, DeviceBuffer } from '../backends/backend.js';
import { CPU_MAX_BUFFER_BYTES } from '../backends/cpu/buffer.js';
import { formatBytes, formatBytesExact } from './units.js';
import { WrongResultError } from './verify.js';
import { UsageError } from '../errors.js';
import { createMoeGroup } from '../moe/group.js';
import type { MoeLayout } from '../moe/api.js';
import { tokenShape } from '../moe/shape.js';
import { runJob } from '../world/job.js';
import type { RankContext } from '../world/ranks.js';
import { Agreement } from '../collectives/agree.js';
import { measure, slowestRank } from './measure.js';
import { agreedCheck, captureBatch, timeReplay, usingBatch, type WrongElsewhere } from './rank.js';
import { stoppedError } from './run.js';
import { checkSameOptions } from './same-options.js';
import { mulberry32 } from './splits.js';
import { alignColumns, counted, formatGBps, formatMicros, formatRatio, hostShareNote, loopsOf } from './table.js';
import { hostShare } from './host-share.js';
import { checkCombine, checkDispatch, poisonCombine, poisonDispatch, tokenCheck, tokenRows } from './moe-token-check.js';

export type MoeTokenOp = 'moe-dispatch' | 'moe-combine';

/** Every top-k weight of the expanded combine: a power of two, so the check's products are exact. */
const WEIGHT = 0.125;

export interface MoeTokenArg {
  op: MoeTokenOp;
  /** Tokens per rank, one row of the table each. */
  tokens: number[];
  numExperts: number;
  topk: number;
  /** bf16 elements per row. */
  hidden: number;
  layout: MoeLayout;
  seed: number;
  repeats: number;
}

export interface MoeTokenRow {
  tokens: number;
  /** (token, k) selections on this rank... summed over ranks: DeepEP's count. */
  selections: number;
  /** DeepEP's bytes per rank: selections per rank x hidden x 2. */
  bytes: number;
  timeUs: number;
  timeMinUs: number;
  timeMaxUs: number;
  /** bytes / time. */
  GBps: number;
  /** The 1-D allToAllV of the same rows between the same ranks (eager), and its time over the op's. */
  oneDUs: number;
  vsOneD: number;
  /** cuda: µs per call replayed in a CUDA graph (the device's time, not the host's launch rate), the op's and the 1-D call's. */
  graphUs?: number;
  oneDGraphUs?: number;
}

export type MoeTokenReport = { type: 'row'; index: number; count: number; row: MoeTokenRow; device: string };

/** Rank q's expert ids for `tokens` tokens: topk distinct experts each, uniform. */
export function tokenRouting(seed: number, rank: number, tokens: number, numExperts: number, topk: number): BigInt64Array {
  const random = mulberry32((seed * 0x9e3779b1 + rank * 0x85ebca6b + tokens) >>> 0);
  const ids = new BigInt64Array(tokens * topk);
  for (let t = 0; t < tokens; t++) {
    const picked = new Set<number>();
    while (picked.size < topk) picked.add(Math.floor(random() * numExperts));
    [...picked].forEach((g, k) => (ids[t * topk + k] = BigInt(g)));
  }
  return ids;
}

/** The rank program: every token count checked, then timed; rank 0 reports each row and returns them all. */
export async function moeTokenSweep(comm: Comm, arg: MoeTokenArg, ctx: RankContext): Promise<{ rows: MoeTokenRow[]; device: string; stoppedBy?: WrongElsewhere }> {
  const W = comm.worldSize;
  await checkSameOptions(comm, { command: 'bench', options: arg, flags: { numExperts: '--num-experts' } });
  if (arg.numExperts % W !== 0) throw new UsageError(`--num-experts ${arg.numExperts} is not a multiple of the ${W} ranks`);
  if (arg.topk > arg.numExperts) throw new UsageError(`--topk ${arg.topk} is more than the ${arg.numExperts} experts`);
  const E = arg.numExperts / W;
  const rowBytes = 2 * arg.hidden;
  const maxTokens = Math.max(...arg.tokens);
  const agree = await Agreement.create(comm, Math.max(4, arg.repeats));
  const held: DeviceBuffer[] = [];
  const own = (b: DeviceBuffer) => (held.push(b), b);
  // This rank's buffers first, then the collective ones (allocating while a peer spins can stall).
  const x = own(comm.alloc(maxTokens * rowBytes));
  const topkIdx = own(comm.alloc(8 * maxTokens * arg.topk));
  const weights = own(comm.alloc(4 * maxTokens * arg.topk));
  const expertCounts = own(comm.alloc(8 * E));
  const out = own(comm.alloc(maxTokens * rowBytes));
  const inSplits = own(comm.alloc(8 * W));
  const outSplitsOffsets = own(comm.alloc(16 * W));
  comm.write(x, tokenRows(comm.rank, maxTokens, arg.hidden));
  comm.write(weights, new Float32Array(maxTokens * arg.topk).fill(WEIGHT));
  // Read back by the first dispatch's check only.
  const expertOffsets = own(comm.alloc(8 * E));
  const numRecvRows = own(comm.alloc(8));
  const group = await createMoeGroup(comm, { numExperts: arg.numExperts, topk: arg.topk, maxTokensPerRank: maxTokens, rowBytes, layout: arg.layout });
  const recvX = own(await comm.allocSymmetric(group.recvRows * rowBytes));
  // Symmetric, so that the combine reads the expert outputs where they lie (moe/group.ts).
  const y = own(await comm.allocSymmetric(group.recvRows * group.combineRowBytes));
  const oneDOut = own(await comm.allocSymmetric(group.recvRows * rowBytes));
  const stream = comm.lane(0).stream;
  const rows: MoeTokenRow[] = [];
  try {
    for (const [index, tokens] of arg.tokens.entries()) {
      const all = Array.from({ length: W }, (_, q) => tokenRouting(arg.seed, q, tokens, arg.numExperts, arg.topk));
      comm.write(topkIdx, all[comm.rank]!);
      const dispatch = () => group.dispatch({ x, topkIdx, topkWeights: weights, numTokens: tokens, recvX, expertCounts, stream });
      const layoutOut = arg.layout === 'expanded' ? { expertOffsets } : { numRecvRows };
      const first = group.dispatch({ x, topkIdx, topkWeights: weights, numTokens: tokens, recvX, expertCounts, ...layoutOut, stream });
      first.done.wait();
      const check = tokenCheck({ comm, op: 'moe-dispatch', layout: arg.layout, all, expertsPerRank: E, topk: arg.topk, hidden: arg.hidden, tokens, align: group.expertAlignment });
      const bufs = { recvX, expertCounts, expertOffsets, numRecvRows };
      const stopped = (stoppedBy: WrongElsewhere) => ({ rows: comm.rank === 0 ? rows : [], device: comm.deviceName, stoppedBy });
      // eager: the first call (and its layout outputs); graph: a graph's replays (counts and rows).
      const checks = {
        dispatch: (form: 'eager' | 'graph') => agreedCheck(agree, { op: 'moe-dispatch', form, bytesPerRank: tokens * rowBytes }, () => checkDispatch({ ...check, form }, bufs, form === 'eager')),
        combine: (form: 'eager' | 'graph') => agreedCheck(agree, { op: 'moe-combine', form, bytesPerRank: tokens * rowBytes }, () => checkCombine({ ...check, op: 'moe-combine', form }, out, WEIGHT)),
      };
      let stoppedBy = checks.dispatch('eager');
      if (stoppedBy) return stopped(stoppedBy);
      const route = first.route;
      // The expert outputs are the rows each expert received: each token's combine then adds up its
      // own row. Only the rows the layout spans are read (recvX holds the worst case).
      comm.copy(y, recvX, Math.min(group.recvRows, check.receive.rows) * rowBytes, stream);
      const combine = () => group.combine({ y, route, out, topkWeights: arg.layout === 'expanded' ? weights : undefined, dtype: 'bf16', stream });
      combine().wait();
      stoppedBy = checks.combine('eager');
      if (stoppedBy) return stopped(stoppedBy);
      const op = arg.op === 'moe-dispatch' ? () => void dispatch().done : () => void combine();
      // As the size sweep's first size (bench/rank.ts): the first count's first loops run while the
      // process is still starting up, several times slower; time them once more and keep the second.
      if (index === 0) measure(comm, stream, op, { repeats: arg.repeats, agree });
      const t = slowestRank(agree, measure(comm, stream, op, { repeats: arg.repeats, agree }));
      const selections = all.reduce((s, ids) => s + ids.length, 0) / W;
      const bytes = selections * arg.hidden * 2;
      // cuda: the op and the 1-D call in graphs too; the op's graph is checked as the first call is,
      // its outputs poisoned before the replays.
      const graphOf = async (call: () => void, checked?: { poison: () => void; check: () => WrongElsewhere | undefined }): Promise<number | WrongElsewhere | undefined> => {
        if (comm.backend !== 'cuda') return undefined;
        // Fewer calls a graph than the 1-D sweep's: a dispatch is four or five kernels.
        const batch = await captureBatch(comm, stream, call, bytes, 10);
        // The finder's error waits until usingBatch has met the others (its barrier), as they do.
        let found: unknown;
        const got = await usingBatch(comm, batch, (b) => {
          checked?.poison();
          b.replay.launch(stream).wait();
          try {
            return checked?.check() ?? timeReplay(comm, agree, stream, { repeats: arg.repeats }, b).medianUs;
          } catch (err) {
            if (!(err instanceof WrongResultError)) throw err;
            found = err;
            return undefined;
          }
        });
        if (found !== undefined) throw found;
        return got;
      };
      const graphUs = await graphOf(op, arg.op === 'moe-dispatch'
        ? { poison: () => poisonDispatch(check, bufs), check: () => checks.dispatch('graph') }
        : { poison: () => poisonCombine(check, out), check: () => checks.combine('graph') });
      if (typeof graphUs === 'object') return stopped(graphUs);
      // The 1-D call of the same rows: this rank's selections per destination rank (one row per
      // (token, k) in expanded; per (token, rank) in compact), there for dispatch, back for combine.
      const perRank = rowsPerRank(all, W, E, arg.topk, arg.layout);
      const mine = arg.op === 'moe-dispatch' ? perRank[comm.rank]! : perRank.map((r) => r[comm.rank]!);
      comm.write(inSplits, BigInt64Array.from(mine, (n) => BigInt(n)));
      // Its input holds the group's worst case (GiBs at W = 8): sized from it, the 1-D call's copy
      // grid launched a block per 4 KiB of that and took 9 ms at any token count on one GPU.
      const sizeHintBytes = Math.max(1, mine.reduce((sum, n) => sum + n, 0) * rowBytes);
      const oneD = () => void comm.allToAllV({ input: recvX, output: oneDOut, inSplits, outSplitsOffsets, rowBytes, sizeHintBytes, stream });
      if (index === 0) measure(comm, stream, oneD, { repeats: arg.repeats, agree });
      const oneDUs = slowestRank(agree, measure(comm, stream, oneD, { repeats: arg.repeats, agree })).medianUs;
      const oneDGraphUs = (await graphOf(oneD)) as number | undefined;
      const row: MoeTokenRow = { tokens, selections, bytes, timeUs: t.medianUs, timeMinUs: t.minUs, timeMaxUs: t.maxUs, GBps: bytes / (t.medianUs * 1e3), oneDUs, vsOneD: oneDUs / t.medianUs };
      if (graphUs !== undefined) Object.assign(row, { graphUs, oneDGraphUs });
      rows.push(row);
      if (comm.rank === 0) ctx.report({ type: 'row', index, count: arg.tokens.length, row, device: comm.deviceName } satisfies MoeTokenReport);
    }
  } finally {
    agree.close();
    await group.close();
    for (const b of held) comm.free(b);
  }
  return { rows: comm.rank === 0 ? rows : [], device: comm.deviceName };
}

/** rows[src][dst]: rows src sends dst, one per (token, k) (expanded) or per (token, rank) (compact). */
function rowsPerRank(all: readonly BigInt64Array[], W: number, E: number, topk: number, layout: MoeLayout): number[][] {
  return all.map((ids) => {
    const n = new Array<number>(W).fill(0);
    for (let t = 0; t < ids.length / topk; t++) {
      const ranks = new Set<number>();
      for (let k = 0; k < topk; k++) ranks.add(Math.floor(Number(ids[t * topk + k]) / E));
      if (layout === 'expanded') for (let k = 0; k < topk; k++) n[Math.floor(Number(ids[t * topk + k]) / E)]! += 1;
      else for (const r of ranks) n[r]! += 1;
    }
    return n;
  });
}

export interface MoeTokenResult {
  backend: BackendName;
  ranks: number;
  op: MoeTokenOp;
  numExperts: number;
  topk: number;
  hidden: number;
  layout: MoeLayout;
  /** The routing's seed (--seed) and the timed loops (--repeats): what a rerun needs. */
  seed: number;
  repeats: number;
  device: string;
  /** cpu: the host's cores and its load at the start (host-share.ts). */
  cores?: number;
  load?: number;
  date: string;
  /** A run a signal ended: which, and how many of its token counts it had finished (the rows). */
  interrupted?: string;
  rows: MoeTokenRow[];
}

/**
 * The largest buffer, a rank's recvX (every rank's tokens to it), against the cpu backend's largest:
 * checked here (and by the CLI before its progress starts), not by the ranks' allocation, whose
 * error names no flag and comes after seconds of allocating the smaller buffers.
 */
export function refuseCpuBuffer(arg: MoeTokenArg, ranks: number): void {
  const tokens = Math.max(...arg.tokens);
  if (arg.numExperts % ranks !== 0) return; // the ranks refuse it, by name
  const rowBytes = 2 * arg.hidden;
  const s = tokenShape({ world: ranks, rank: 0, layout: arg.layout, experts: arg.numExperts, topk: arg.topk, tokenCap: tokens, rowBytes, combineRowBytes: rowBytes, align: 1 });
  const bytes = s.recvRows * rowBytes;
  if (bytes <= CPU_MAX_BUFFER_BYTES) return;
  const flags = arg.layout === 'expanded' ? '--tokens, --topk or --hidden' : '--tokens or --hidden';
  throw new UsageError(`bench ${arg.op}: ${tokens} tokens a rank (the largest of --tokens) on cpu: a rank's recvX holds up to ${s.recvRows} rows ` +
    `of ${formatBytes(rowBytes)} (--hidden ${arg.hidden} bf16), ${formatBytesExact(bytes)}, past the cpu backend's ${formatBytes(CPU_MAX_BUFFER_BYTES)} per buffer: lower ${flags}`);
}

/**
 * Runs the sweep; rank 0's result (undefined on a launched job's other ranks). `onRow` gets each
 * token count as it finishes, with the result as far as it goes (what an interrupted run can still show).
 */
export async function runMoeTokenBench(
  opts: MoeTokenArg & { backend: BackendName; ranks: number; timeoutMs?: number },
  onRow: (r: MoeTokenReport, soFar: MoeTokenResult) => void = () => {},
): Promise<MoeTokenResult | undefined> {
  const date = new Date().toISOString();
  const share = hostShare(opts.backend);
  const { backend, ranks, timeoutMs, ...arg } = opts;
  if (backend === 'cpu') refuseCpuBuffer(arg, ranks);
  const resultOf = (device: string, rows: MoeTokenRow[]): MoeTokenResult =>
    ({ backend, ranks, op: arg.op, numExperts: arg.numExperts, topk: arg.topk, hidden: arg.hidden, layout: arg.layout, seed: arg.seed, repeats: arg.repeats, device, ...share, date, rows });
  const rows: MoeTokenRow[] = [];
  const { rank, result } = await runJob<MoeTokenArg, { rows: MoeTokenRow[]; device: string; stoppedBy?: WrongElsewhere }>(
    { backend, ranks, timeoutMs, onReport: (_r, m) => {
      const r = m as MoeTokenReport;
      rows.push(r.row);
      onRow(r, resultOf(r.device, rows));
    } },
    new URL(import.meta.url),
    'moeTokenSweep',
    arg,
  );
  // Threads: the rank that found a wrong result threw, and runRanks rejected with its error; a
  // launched rank whose check passed exits non-zero too.
  if (result.stoppedBy) throw stoppedError(result.stoppedBy, rank);
  if (rank !== 0) return undefined;
  return resultOf(result.device, result.rows);
}

export function formatMoeTokenTable(results: readonly MoeTokenResult[]): string {
  const first = results[0]!;
  const lines = [
    `# a2av bench ${first.op}: ${results.map((r) => r.backend).join(',')}, ${counted(first.ranks, 'rank')}, ${counted(first.numExperts, 'expert')}, top-${first.topk}, hidden ${first.hidden} bf16, ` +
      `${first.layout}, routing seed ${first.seed}, ${first.device}, ${first.date}`,
    `# time µs = median of ${loopsOf(first.repeats)} (slowest rank in each); bytes = DeepEP's count: selections per rank x hidden x 2; GB/s = bytes / time`,
    '# graph µs = per call replayed in a CUDA graph (cuda; checked as the first call is, its outputs poisoned before the replays); 1d µs = allToAllV of the same rows between the same ranks, same run',
    '# vs 1d = 1d µs / time µs (eager); checked first, each row: expertCounts = the ids\' histogram, sampled recvX rows are the tokens the ids send there, the combine of sampled tokens adds up their own rows to the bit',
    ...(first.layout === 'compact' ? ['# compact moves a row per (token, rank), fewer than the selections DeepEP\'s count takes (bytes, GB/s); 1d µs moves the same rows as compact does'] : []),
    ...results.flatMap((r) => hostShareNote(r.ranks, r) ?? []),
    ...results.flatMap((r) => (r.interrupted === undefined ? [] : [`# interrupted: ${r.backend}: ${r.interrupted}; its rows are the token counts it finished`])),
  ];
  const head = ['tokens', 'backend', 'time µs', 'min-max µs', 'graph µs', 'bytes', 'GB/s', '1d µs', '1d graph µs', 'vs 1d'];
  const table = first.rows.flatMap((_, i) =>
    results.flatMap((r) => {
      const x = r.rows[i];
      if (!x) return [];
      const g = (us: number | undefined) => (us === undefined ? '-' : formatMicros(us));
      return [[String(x.tokens), r.backend, formatMicros(x.timeUs), `${formatMicros(x.timeMinUs)}-${formatMicros(x.timeMaxUs)}`, g(x.graphUs), String(Math.round(x.bytes)), formatGBps(x.GBps), formatMicros(x.oneDUs), g(x.oneDGraphUs), formatRatio(x.vsOneD)]];
    }),
  );
  return [...lines, ...alignColumns([head, ...table], [1])].join('\n') + '\n';
}
