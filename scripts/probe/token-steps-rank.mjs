// Rank program of scripts/probe/token-steps.mjs: a token MoE group whose compute records a mark on
// the call's stream around each of its steps, so a dispatch splits into route+gather / exchange /
// layout and a combine into exchange / reduce. On cuda a mark is a timing event (a record between
// two kernels also keeps the second from launching early, so the sum can exceed the plain call's
// time: both are printed); on cpu a host clock, which only exercises this program.
import { createMoeGroupWith } from '../../dist/src/moe/group.js';
import { HostCompute } from '../../dist/src/moe/host-compute.js';
import { tokenRouting } from '../../dist/src/bench/moe-tokens.js';

/** Marks recorded in order; a call's marks are named, and each step is the time since the previous mark. */
class Marks {
  #pool = [];
  #used = 0;
  /** [name, mark] pairs of the calls since the last reset. */
  list = [];
  /** Off: mark() records nothing (the plain call's timing). */
  on = false;
  constructor(device, size) {
    this.device = device;
    // Made before any call: making driver objects while a peer's kernel spins on this rank can stall.
    if (device) for (let i = 0; i < size; i++) this.#pool.push(device.createEvent(true));
  }
  mark(stream, name) {
    if (!this.on) return;
    if (!this.device) return void this.list.push([name, performance.now()]);
    const e = this.#pool[this.#used++];
    if (e === undefined) throw new Error('token-steps: more marks than the pool holds (raise the pool)');
    e.record(stream);
    this.list.push([name, e]);
  }
  reset() {
    this.list = [];
    this.#used = 0;
  }
  /** ms between two marks. */
  between(a, b) {
    return this.device ? b.elapsedSince(a) : b - a;
  }
  destroy() {
    for (const e of this.#pool) e.destroy();
  }
}

/** The group's compute with a mark before the first step of a dispatch and after every step. */
class MarkedCompute {
  /** Steps left out of the calls (graph ablation): their buffers keep what the last full call wrote. */
  skip = new Set();
  /** Each step's latest arguments, to time it alone. */
  last = {};
  constructor(inner, marks) {
    this.inner = inner;
    this.marks = marks;
  }
  // A new routing: its routing and gather as one step (one launch where the kernels allow).
  routeAndGather(s, r, g) {
    this.last.routeAndGather = [r, g];
    this.marks.mark(s, 'start');
    if (!this.skip.has('route')) this.inner.routeAndGather(s, r, g);
    this.marks.mark(s, 'route+gather');
  }
  // Only for a reused route, which this probe never makes.
  gather(s, c) {
    this.inner.gather(s, c);
  }
  layout(s, c) {
    this.last.layout = c;
    this.marks.mark(s, 'exchange');
    if (!this.skip.has('layout')) this.inner.layout(s, c);
    this.marks.mark(s, 'layout');
  }
  reduce(s, c) {
    this.marks.mark(s, 'exchange');
    if (!this.skip.has('reduce')) this.inner.reduce(s, c);
    this.marks.mark(s, 'reduce');
  }
  close() {
    this.inner.close();
  }
}

const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];

/** Per step, the median over the calls of the time since the mark before it (µs). */
function steps(marks, calls) {
  const per = new Map();
  let call = -1;
  let prev;
  for (const [name, m] of marks.list) {
    if (name === 'start') {
      call++;
      prev = m;
      continue;
    }
    const us = marks.between(prev, m) * 1000;
    prev = m;
    if (!per.has(name)) per.set(name, []);
    per.get(name).push(us);
  }
  if (call + 1 !== calls) throw new Error(`token-steps: ${call + 1} calls marked, ${calls} made`);
  return Object.fromEntries([...per].map(([k, v]) => [k, median(v)]));
}

// Graph µs per call with steps left out: what each step adds where launches cost what a graph's do.
const DISPATCH_CUTS = { all: [], 'no layout': ['layout'], 'no route, gather': ['route'], 'exchange only': ['route', 'layout'] };
const COMBINE_CUTS = { all: [], 'exchange only': ['reduce'] };

async function ablation(comm, stream, marked, call, cuts) {
  const out = {};
  const perGraph = 10;
  for (const [name, skip] of Object.entries(cuts)) {
    marked.skip = new Set(skip);
    await comm.barrier();
    const replay = comm.capture(stream, () => {
      for (let i = 0; i < perGraph; i++) call();
    });
    marked.skip = new Set();
    try {
      replay.launch(stream).wait();
      await comm.barrier();
      const reps = 20;
      const ms = comm.timeLoop(stream, reps, () => void replay.launch(stream), 2);
      out[name] = (ms * 1000) / (reps * perGraph);
    } finally {
      replay.close();
    }
  }
  return out;
}

// A dispatch's local steps alone, each repeated in a graph with the latest call's arguments (its
// layout reads that call's exchange's offsets again). A combine's reduce cannot: it resets its gate.
async function alone(comm, stream, marked) {
  const inner = marked.inner;
  const [r, g] = marked.last.routeAndGather;
  const steps = {
    'alone: routeAndGather': () => inner.routeAndGather(stream, r, g),
    // The two-kernel path the one-block routing replaces for small calls (both computes have route()).
    'alone: route then gather': () => {
      inner.route(stream, r);
      inner.gather(stream, g);
    },
    'alone: layout': () => inner.layout(stream, marked.last.layout),
  };
  const out = {};
  for (const [name, step] of Object.entries(steps)) {
    const replay = comm.capture(stream, () => {
      for (let i = 0; i < 10; i++) step();
    });
    try {
      replay.launch(stream).wait();
      out[name] = (comm.timeLoop(stream, 20, () => void replay.launch(stream), 2) * 1000) / 200;
    } finally {
      replay.close();
    }
  }
  return out;
}

export async function tokenSteps(comm, arg) {
  const { tokens: counts, numExperts = 256, topk = 8, hidden = 7168, layout = 'expanded', iters = 50, seed = 7 } = arg;
  const W = comm.worldSize;
  const E = numExperts / W;
  const rowBytes = 2 * hidden;
  const maxTokens = Math.max(...counts);
  const cuda = comm.backend !== 'cpu';
  const device = cuda ? (await import('../../dist/src/cuda/device.js')).CudaDevice.current() : undefined;
  // Four marks a dispatch (start, route+gather, exchange, layout), three a combine.
  const marks = new Marks(device, 4 * iters);
  let factory;
  let marked;
  if (cuda) {
    const { KernelCompute } = await import('../../dist/src/moe/kernel-compute.js');
    const { CudaTokenDevice } = await import('../../dist/src/moe/cuda-device.js');
    factory = (shape, bufs) => (marked = new MarkedCompute(new KernelCompute(new CudaTokenDevice(), shape, bufs), marks));
  } else {
    factory = (shape, bufs) => (marked = new MarkedCompute(new HostCompute(shape, bufs), marks));
  }
  const x = comm.alloc(maxTokens * rowBytes);
  const topkIdx = comm.alloc(8 * maxTokens * topk);
  const weights = comm.alloc(4 * maxTokens * topk);
  const expertCounts = comm.alloc(8 * E);
  const out = comm.alloc(maxTokens * rowBytes);
  comm.write(x, new Uint8Array(maxTokens * rowBytes).fill(0x3c));
  comm.write(weights, new Float32Array(maxTokens * topk).fill(0.125));
  const group = await createMoeGroupWith(comm, { numExperts, topk, maxTokensPerRank: maxTokens, rowBytes, layout }, factory);
  const recvX = await comm.allocSymmetric(group.recvRows * rowBytes);
  const y = comm.alloc(group.recvRows * group.combineRowBytes);
  comm.write(y, new Uint8Array(group.recvRows * group.combineRowBytes).fill(0x3c));
  const stream = comm.lane(0).stream;
  const rows = [];
  for (const T of counts) {
    comm.write(topkIdx, tokenRouting(seed, comm.rank, T, numExperts, topk));
    const dispatch = () => group.dispatch({ x, topkIdx, topkWeights: weights, numTokens: T, recvX, expertCounts, stream });
    // A combine takes the latest dispatch's route.
    let route;
    const fresh = () => {
      const d = dispatch();
      d.done.wait();
      route = d.route;
    };
    fresh();
    const combine = () => group.combine({ y, route, out, topkWeights: layout === 'expanded' ? weights : undefined, dtype: 'bf16', stream });
    combine().wait();
    const row = { tokens: T };
    for (const [op, call] of [['dispatch', () => void dispatch().done], ['combine', () => void combine()]]) {
      // The plain call first: no marks.
      const plainMs = comm.timeLoop(stream, iters, call, 3);
      await comm.barrier();
      marks.on = true;
      for (let i = 0; i < iters; i++) {
        if (op === 'combine') marks.mark(stream, 'start');
        call();
      }
      marks.on = false;
      comm.record(stream).wait(); // every mark has happened
      row[op] = { plainUs: (plainMs * 1000) / iters, steps: steps(marks, iters) };
      marks.reset();
      row[op].graph = await ablation(comm, stream, marked, call, op === 'dispatch' ? DISPATCH_CUTS : COMBINE_CUTS);
      if (op === 'dispatch') Object.assign(row[op].graph, await alone(comm, stream, marked));
      fresh();
      await comm.barrier();
    }
    rows.push(row);
  }
  marks.destroy();
  return rows;
}
