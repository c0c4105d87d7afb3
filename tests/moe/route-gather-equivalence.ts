// mt_route_gather (one block, counts in shared memory) against mt_route then mt_gather, the
// kernels compiled for the host: the same inputs, buffers poisoned alike, and every buffer the
// steps after them read must come out byte for byte the same.
import assert from 'node:assert/strict';
import koffi from 'koffi';
import { SMALL_ENTRIES, THREADS, TOKEN_KERNELS, type TokenKernelName } from '../../src/moe/kernel-args.js';
import { tokenShape, type TokenShape } from '../../src/moe/shape.js';
import { HostKernels } from '../support/host-kernels.js';

export interface RouteCase {
  layout: 'expanded' | 'compact';
  world: number;
  expertsPerRank: number;
  topk: number;
  tokenCap: number;
  /** The call's token count; past tokenCap or negative: a bad count (only through the device count). */
  tokens: number;
  deviceCount: boolean;
  idx64: boolean;
  weights: boolean;
  /** true: token numbers (rowOf, the cuda default); false: the rows copied. */
  rowOf: boolean;
  rowBytes: number;
  /** Entries given an id that is not an expert. */
  badIds: number;
  /** Share of entries -1, and share sent to expert 0 (a hot expert). */
  none: number;
  hot: number;
}

type Random = () => number;

/** What one run of either path leaves in the buffers the exchange, layout and reduce read. */
type Outputs = Record<'inSplits' | 'slot' | 'rowOf' | 'send' | 'sendMeta' | 'routeTokens' | 'oso', Uint8Array>;

export function checkRouteGather(lib: string, c: RouteCase, random: Random): void {
  assert.ok(c.tokenCap * c.topk <= SMALL_ENTRIES, 'a case mt_route_gather takes');
  const N = c.world * c.expertsPerRank;
  const s = tokenShape({ world: c.world, rank: 0, layout: c.layout, experts: N, topk: c.topk, tokenCap: c.tokenCap, rowBytes: c.rowBytes, combineRowBytes: c.rowBytes, align: 1 });
  const entries = c.tokenCap * c.topk;
  const ids = new BigInt64Array(entries);
  for (let t = 0; t < c.tokenCap; t++) {
    for (let k = 0; k < c.topk; k++) {
      const r = random();
      ids[t * c.topk + k] = BigInt(r < c.none ? -1 : r < c.none + c.hot ? 0 : Math.floor(random() * N));
    }
  }
  for (let i = 0; i < c.badIds; i++) ids[Math.floor(random() * entries)] = BigInt(random() < 0.5 ? N + Math.floor(random() * 5) : -2 - Math.floor(random() * 5));
  const topkIdx = c.idx64 ? new Uint8Array(ids.buffer) : new Uint8Array(Int32Array.from(ids, Number).buffer);
  const weights = c.weights ? new Uint8Array(Float32Array.from({ length: entries }, () => random() * 4 - 2).buffer) : undefined;
  const x = new Uint8Array(c.tokenCap * c.rowBytes).map(() => Math.floor(random() * 256));
  const numTokens = new Uint8Array(BigInt64Array.of(BigInt(c.tokens)).buffer);
  const inputs = { topkIdx, weights, x, numTokens: c.deviceCount ? numTokens : undefined };
  const kernels = new HostKernels<TokenKernelName>(lib, 'mt_emulate', TOKEN_KERNELS);
  const poison = (bytes: number) => new Uint8Array(Math.max(bytes, 8)).fill(0xa5);
  const outputs = (): Outputs => ({
    inSplits: poison(8 * s.buckets),
    slot: poison(4 * entries),
    rowOf: poison(4 * s.sendRows),
    send: poison(s.sendRows * s.rowBytes),
    sendMeta: poison(s.sendRows * s.metaBytes),
    routeTokens: poison(8),
    oso: poison(16 * s.buckets),
  });
  const common = (o: Outputs) => ({
    ...inputs,
    ...o,
    rowOf: c.rowOf ? o.rowOf : undefined,
    send: c.rowOf ? undefined : o.send,
    tokens: c.deviceCount ? 0 : c.tokens,
    tokenCap: c.tokenCap,
    topk: c.topk,
    idx64: c.idx64,
    experts: N,
    expertsPerRank: c.expertsPerRank,
    compact: c.layout === 'compact',
    buckets: s.buckets,
    chunkTokens: s.chunkTokens,
    rowBytes: s.rowBytes,
    metaBytes: s.metaBytes,
  });
  const launch = (spec: TokenKernelName, kernel: string, args: Record<string, Uint8Array | number | boolean | undefined>, grid: number) => {
    const view = kernels.params(spec);
    for (const [i, [name, kind]] of TOKEN_KERNELS[spec].fields.entries()) {
      const v = args[name];
      if (kind === 'ptr') view.setBigUint64(8 * i, v === undefined ? 0n : BigInt(koffi.address(v as Uint8Array)), true);
      else view.setBigInt64(8 * i, BigInt(Number(v ?? 0)), true);
    }
    kernels.launch(spec, kernel, grid, THREADS);
  };
  const steps = outputs();
  const scratch = { hist: new Uint8Array(4 * s.chunks * s.buckets), local: new Uint8Array(4 * entries), starts: new Uint8Array(8 * s.buckets), fault: new Uint8Array(8), ticket: new Uint8Array(8) };
  launch('route', 'mt_route', { ...common(steps), ...scratch }, Math.min(s.chunks, Math.ceil(c.tokenCap / s.chunkTokens) || 1));
  launch('gather', 'mt_gather', { ...common(steps), ...scratch, place: true }, 4);
  const fused = outputs();
  launch('routeGather', 'mt_route_gather', common(fused), 1);
  for (const name of Object.keys(steps) as (keyof Outputs)[]) {
    const [a, b] = [steps[name], fused[name]];
    const at = a.findIndex((v, i) => v !== b[i]);
    assert.equal(at, -1, `${name}: byte ${at} differs (mt_route + mt_gather ${a[at]}, mt_route_gather ${b[at]}) in ${JSON.stringify(c)}`);
  }
  // The poison went where it should: the sends are written, and only the sends.
  const splits = new BigInt64Array(fused.inSplits.buffer);
  const n = c.tokens >= 0 && c.tokens <= c.tokenCap ? c.tokens * c.topk : 0;
  const badInCall = ids.subarray(0, n).some((id) => id < -1n || id >= BigInt(N));
  if (n === c.tokens * c.topk && !badInCall) {
    const sent = splits.reduce((a, b) => a + b, 0n);
    const slots = new Int32Array(fused.slot.buffer).subarray(0, c.tokens * c.topk);
    assert.equal(BigInt(slots.filter((v) => v >= 0).length), sent, 'one slot per row sent');
  } else {
    assert.ok(splits[0]! < 0n, 'a bad count or id leaves a negative first split');
  }
}
