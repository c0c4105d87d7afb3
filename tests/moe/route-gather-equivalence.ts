// mt_route_gather (one block, counts in shared memory) against mt_route then mt_gather, the
// kernels compiled for the host and launched by the group's KernelCompute: the same inputs, buffers
// poisoned alike, and every buffer the steps after them read must come out byte for byte the same.
import assert from 'node:assert/strict';
import type { DeviceBuffer } from '../../src/backends/backend.js';
import type { GatherCall, RouteCall, TokenBuffers } from '../../src/moe/compute.js';
import { SMALL_ENTRIES, type TokenKernelName } from '../../src/moe/kernel-args.js';
import { KernelCompute } from '../../src/moe/kernel-compute.js';
import { tokenShape } from '../../src/moe/shape.js';
import { EmulatedTokenDevice } from './emulated-device.js';

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
  // Host bytes standing in for device buffers: the device below reads them back for their addresses.
  const held = new Map<DeviceBuffer, Uint8Array>();
  const buf = (bytes: Uint8Array): DeviceBuffer => {
    const b = { bytes: bytes.byteLength, symmetric: false, symmetricId: -1, freed: false };
    held.set(b, bytes);
    return b;
  };
  const launched: string[] = [];
  class Device extends EmulatedTokenDevice {
    override launch(spec: TokenKernelName, kernel: string, grid: number, block: number): void {
      launched.push(kernel);
      super.launch(spec, kernel, grid, block);
    }
  }
  const dispatch = (o: Outputs, how: (k: KernelCompute, r: RouteCall, g: GatherCall) => void): void => {
    const scratch = (bytes: number) => buf(new Uint8Array(bytes));
    const bufs = {
      hist: scratch(4 * s.chunks * s.buckets),
      local: scratch(4 * entries),
      starts: scratch(8 * s.buckets),
      fault: scratch(8),
      routeTicket: scratch(8),
      reduceTicket: scratch(8),
      metaOso: scratch(16 * s.buckets),
      combineOso: scratch(16 * s.buckets),
      recvMeta: scratch(8),
      back: scratch(8),
      inSplits: buf(o.inSplits),
      slot: buf(o.slot),
      routeTokens: buf(o.routeTokens),
      routeOso: buf(o.oso),
      sendMeta: buf(o.sendMeta),
      ...(c.rowOf ? { rowOf: buf(o.rowOf) } : { send: buf(o.send) }),
    } satisfies TokenBuffers;
    const compute = new KernelCompute(new Device(lib, (b) => held.get(b)!), s, bufs);
    const [idx, xs] = [buf(topkIdx), buf(x)];
    const r: RouteCall = { topkIdx: idx, idx64: c.idx64, numTokens: c.deviceCount ? buf(numTokens) : undefined, tokens: c.tokens, tokenCap: c.tokenCap };
    const g: GatherCall = { place: true, topkIdx: idx, idx64: c.idx64, x: xs, weights: weights && buf(weights), tokenCap: c.tokenCap };
    how(compute, r, g);
  };
  const stream = { kind: 'stream' } as const;
  const steps = outputs();
  dispatch(steps, (k, r, g) => {
    k.route(stream, r);
    k.gather(stream, g);
  });
  const fused = outputs();
  launched.length = 0;
  dispatch(fused, (k, r, g) => k.routeAndGather(stream, r, g));
  assert.deepEqual(launched, ['mt_route_gather'], 'the small routing takes the one-block kernel');
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
