// A2AV_DRIVER_TRACE=1, ranks as threads of one process: each rank thread notes in shared memory the
// driver call it is in, its last few, and the last call it queued on a lane; when a rank fails,
// runRanks prints every rank's notes. A peer's timeout names the rank it waited for; these say
// where that rank stood meanwhile: blocked inside the driver, or waiting on its own stream.

/** Int32 slots a rank: the call in progress (index + 1, 0: none), calls made, the last lane call queued, ring position, ring. */
const RING = 12;
const SLOTS = 4 + RING;

export interface DriverTraceBuffer {
  buffer: SharedArrayBuffer;
  ranks: number;
}

export function createDriverTrace(ranks: number): DriverTraceBuffer {
  return { buffer: new SharedArrayBuffer(4 * SLOTS * ranks), ranks };
}

let mine: { view: Int32Array; base: number } | undefined;

/** In a rank thread, before its communicator starts the driver. */
export function traceThisRank(trace: DriverTraceBuffer, rank: number): void {
  mine = { view: new Int32Array(trace.buffer), base: rank * SLOTS };
}

/** `fn` wrapped to note its calls where this thread traces (else `fn` itself). */
export function traced<F extends (...args: any[]) => number>(index: number, fn: F): F {
  const t = mine;
  if (t === undefined) return fn;
  const { view, base } = t;
  return ((...args: unknown[]) => {
    const pos = view[base + 3]!;
    view[base + 4 + (pos % RING)] = index;
    view[base + 3] = pos + 1;
    view[base + 1]!++;
    Atomics.store(view, base, index + 1);
    try {
      return fn(...args);
    } finally {
      Atomics.store(view, base, 0);
    }
  }) as F;
}

/** Where this thread traces: the lane call it just queued (negative: the last of a graph replay). */
export function noteLaneCall(seq: number): void {
  if (mine !== undefined) Atomics.store(mine.view, mine.base + 2, seq);
}

/** Every rank's notes, a line each, with the driver's function names. */
export function describeDriverTrace(trace: DriverTraceBuffer, names: readonly string[]): string {
  const view = new Int32Array(trace.buffer);
  const lines: string[] = [];
  for (let r = 0; r < trace.ranks; r++) {
    const base = r * SLOTS;
    const now = Atomics.load(view, base);
    const pos = view[base + 3]!;
    const last: string[] = [];
    for (let i = Math.max(0, pos - RING); i < pos; i++) last.push(names[view[base + 4 + (i % RING)]!] ?? '?');
    lines.push(`rank ${r}: ${now === 0 ? 'not in the driver' : `inside ${names[now - 1]}`}; last lane call queued ${view[base + 2]! < 0 ? `${-view[base + 2]!} (a replay)` : view[base + 2]}; ${view[base + 1]} driver calls, the last: ${last.join(' ')}`);
  }
  return lines.join('\n');
}

/**
 * Driver calls seen to wait for every kernel in the context (docs/perf.md), so a peer's call that
 * spins for this rank holds them until its timeout; what to do instead, as the README says.
 */
const WAITS_FOR_THE_GPU: Record<string, string> = {
  cuGraphInstantiate: 'capture on every rank, then meet (comm.barrier()) before any rank launches a replay',
  cuMemFree: 'free buffers between phases of work, not while a peer may wait in a collective for this rank',
  cuModuleGetFunction: 'load the kernels you launch beside the collectives before they start, or set CUDA_MODULE_LOADING=EAGER',
  cuModuleLoadData: 'load the kernels you launch beside the collectives before they start, or set CUDA_MODULE_LOADING=EAGER',
};

/** What a rank stuck inside `name` may be waiting for, when the driver call is one that waits for the GPU. */
export function stuckHint(name: string): string {
  const advice = WAITS_FOR_THE_GPU[name];
  return advice === undefined ? '' : ` (${name} can wait for every kernel on the GPU, a peer's call waiting for this rank among them: ${advice})`;
}

/**
 * Watches the notes while the ranks run: when a rank has been inside one driver call for `stuckMs`
 * (its count of calls unchanged), writes every rank's notes once for that stretch. Shows a rank
 * blocked in the driver while its peers wait for it (a failure's notes come after the fact).
 * Returns the function that stops the watch.
 */
export function watchDriverTrace(trace: DriverTraceBuffer, names: readonly string[], write: (text: string) => void, stuckMs = 2000): () => void {
  const view = new Int32Array(trace.buffer);
  const since = new Array<{ calls: number; at: number; told: boolean } | undefined>(trace.ranks);
  const timer = setInterval(() => {
    const now = Date.now();
    for (let r = 0; r < trace.ranks; r++) {
      const inside = Atomics.load(view, r * SLOTS);
      const calls = view[r * SLOTS + 1]!;
      const s = since[r];
      if (inside === 0 || s === undefined || s.calls !== calls) {
        since[r] = inside === 0 ? undefined : { calls, at: now, told: false };
        continue;
      }
      if (!s.told && now - s.at >= stuckMs) {
        s.told = true;
        const name = names[inside - 1] ?? '?';
        write(`a2av: rank ${r} has been inside ${name} for ${now - s.at} ms (A2AV_DRIVER_TRACE)${stuckHint(name)}; every rank now:\n${describeDriverTrace(trace, names)}\n`);
      }
    }
  }, Math.max(50, stuckMs / 8));
  timer.unref();
  return () => clearInterval(timer);
}
