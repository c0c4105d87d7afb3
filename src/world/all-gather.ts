// Small collectives over the rendezvous store, for setup (never on the data path).
import type { Store } from './store.js';

/** Every rank contributes `value`; returns all ranks' values in rank order. */
export async function allGather(
  store: Store,
  key: string,
  rank: number,
  worldSize: number,
  value: Uint8Array,
  timeoutMs: number,
): Promise<Uint8Array[]> {
  await store.set(`${key}/${rank}`, value);
  const out: Uint8Array[] = [];
  for (let r = 0; r < worldSize; r++) out.push(await store.get(`${key}/${r}`, timeoutMs));
  return out;
}

export function encodeJson(v: unknown): Uint8Array {
  return new TextEncoder().encode(JSON.stringify(v));
}
export function decodeJson<T>(b: Uint8Array): T {
  return JSON.parse(new TextDecoder().decode(b)) as T;
}
