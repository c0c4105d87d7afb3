// One rank's MoE group and buffers for the token-level cases, driven only through comm.write /
// comm.read so the same code checks every backend (and the kernels compiled for the host).
import type { Comm, DeviceBuffer, Handle, Lane, Stream } from '../../src/backends/backend.js';
import type { MoeDispatchResult, MoeGroup, MoeRoute } from '../../src/moe/api.js';
import { createMoeGroup, createMoeGroupWith } from '../../src/moe/group.js';
import { ConformanceError } from './harness.js';
import { biasBits, combined, DTYPE_BYTES, outputBits, receiveLayout, tokenRow, weightOf, type Dtype, type Routing, type TokenJob } from './moe-token-reference.js';
import { poisonBytes } from './reference.js';

/** Bytes past every output's rows that a call must leave alone. */
const CANARY = 13;

export interface RigOptions {
  job: TokenJob;
  /** f32 elements of a combine row (bf16, f16: twice as many). */
  hidden: number;
  /** Rows recvX holds (default: the group's recvRows, which nothing overflows). */
  recvRows?: number;
  lane?: Lane;
  /** A host build of kernels/moe-tokens.cu (tests/moe/emulate.cpp) to compute with, on cpu. */
  emulator?: string;
  /** y from allocSymmetric: on cuda the combine reads each expert output in place (moe/group.ts). */
  symmetricY?: boolean;
}

export interface CallData {
  seed: number;
  call: number;
  routings: Routing[];
}

export class TokenRig {
  readonly outputs: Record<'recvX' | 'recvIdx' | 'recvWeights' | 'counts' | 'offsets' | 'recvCount', DeviceBuffer>;
  #salt = 0;

  private constructor(
    readonly comm: Comm,
    readonly group: MoeGroup,
    readonly job: TokenJob,
    readonly hidden: number,
    readonly inputs: Record<'x' | 'topkIdx' | 'weights' | 'numTokens' | 'y' | 'out' | 'bias', DeviceBuffer>,
    recvX: DeviceBuffer,
  ) {
    const { topk: K, experts: E } = job;
    const rows = Math.floor(recvX.bytes / job.rowBytes);
    this.outputs = { recvX, recvIdx: comm.alloc(rows * K * 8 + CANARY), recvWeights: comm.alloc(rows * K * 4 + CANARY), counts: comm.alloc(8 * E + CANARY), offsets: comm.alloc(8 * E + CANARY), recvCount: comm.alloc(8 + CANARY) };
  }

  /** Collective. */
  static async create(comm: Comm, o: RigOptions): Promise<TokenRig> {
    const job = o.job;
    const options = {
      numExperts: job.world * job.experts,
      topk: job.topk,
      maxTokensPerRank: job.maxTokens,
      rowBytes: job.rowBytes,
      layout: job.layout,
      expertAlignment: job.layout === 'expanded' ? job.align : undefined,
      combineRowBytes: 4 * o.hidden,
      lane: o.lane,
    };
    let group: MoeGroup;
    if (o.emulator !== undefined) {
      const { emulatedTokenCompute } = await import('../moe/emulated-device.js');
      group = await createMoeGroupWith(comm, options, emulatedTokenCompute(o.emulator));
    } else group = await createMoeGroup(comm, options);
    const T = job.maxTokens;
    const rowOut = 4 * o.hidden;
    const recvRows = o.recvRows ?? group.recvRows;
    const recvX = await comm.allocSymmetric(recvRows * job.rowBytes);
    const y = o.symmetricY ? await comm.allocSymmetric(recvRows * rowOut) : comm.alloc(recvRows * rowOut);
    const inputs = {
      x: comm.alloc(T * job.rowBytes),
      topkIdx: comm.alloc(T * job.topk * 8),
      weights: comm.alloc(T * job.topk * 4),
      numTokens: comm.alloc(8),
      y,
      out: comm.alloc(T * rowOut + CANARY),
      bias: comm.alloc(T * rowOut),
    };
    return new TokenRig(comm, group, job, o.hidden, inputs, recvX);
  }

  /** Writes this rank's tokens, ids (int64 or int32) and weights of call `d`. */
  prepare(d: CallData, idx64: boolean): void {
    const { comm, job } = this;
    const r = d.routings[comm.rank];
    const x = new Uint8Array(Math.max(r.tokens, 1) * job.rowBytes);
    for (let t = 0; t < r.tokens; t++) x.set(tokenRow(d.seed, d.call, comm.rank, t, job.rowBytes), t * job.rowBytes);
    comm.write(this.inputs.x, x);
    if (r.ids.length > 0) {
      comm.write(this.inputs.topkIdx, idx64 ? BigInt64Array.from(r.ids, BigInt) : Int32Array.from(r.ids));
      comm.write(this.inputs.weights, Float32Array.from({ length: r.ids.length }, (_, i) => weightOf(d.seed, d.call, comm.rank, Math.floor(i / job.topk), i % job.topk)));
    }
    comm.write(this.inputs.numTokens, BigInt64Array.of(BigInt(r.tokens)));
  }

  poison(salt: number): void {
    this.#salt = salt & 0xff;
    for (const buf of [...Object.values(this.outputs), this.inputs.out]) this.comm.write(buf, poisonBytes(this.#salt, buf.bytes));
  }

  /** count: 'host' passes the token count, 'device' the int64 count in numTokens. */
  dispatch(o: { count: 'host' | 'device'; idx64: boolean; weights: boolean; tokens: number; route?: MoeRoute; stream?: Stream }): MoeDispatchResult {
    const compact = this.job.layout === 'compact';
    return this.group.dispatch({
      x: this.inputs.x,
      topkIdx: this.inputs.topkIdx,
      topkIdxType: o.idx64 ? 'int64' : 'int32',
      topkWeights: o.weights ? this.inputs.weights : undefined,
      numTokens: o.route ? undefined : o.count === 'host' ? o.tokens : this.inputs.numTokens,
      recvX: this.outputs.recvX,
      recvTopkIdx: compact ? this.outputs.recvIdx : undefined,
      recvTopkWeights: o.weights ? this.outputs.recvWeights : undefined,
      expertCounts: this.outputs.counts,
      expertOffsets: compact ? undefined : this.outputs.offsets,
      numRecvRows: this.outputs.recvCount,
      route: o.route,
      stream: o.stream,
    });
  }

  /** o.weights: this rank asked for the weights back; o.sends(q): rank q passed topkWeights (default: as this rank), else its rows' weights read 0. */
  verifyDispatch(d: CallData, o: { idx64: boolean; weights: boolean; sends?: (q: number) => boolean }, label: string): void {
    const { comm, job } = this;
    const { experts: E, topk: K, rowBytes } = job;
    const me = comm.rank;
    const fail = (what: string): never => {
      throw new ConformanceError(`${label}: rank ${me} ${what}`);
    };
    const { rows, starts } = receiveLayout(job, d.routings, me);
    const sent = o.sends ?? (() => o.weights);
    // Per-expert counts: the histogram of every rank's topkIdx (compact: tokens that chose it).
    const hist = new Array<number>(E).fill(0);
    for (const r of d.routings) for (let i = 0; i < r.tokens * K; i++) if (r.ids[i] >= me * E && r.ids[i] < (me + 1) * E) hist[r.ids[i] - me * E]++;
    this.#expectWords('expertCounts', this.outputs.counts, 8, hist, fail);
    if (job.layout === 'expanded') this.#expectWords('expertOffsets', this.outputs.offsets, 8, starts, fail);
    this.#expectWords('numRecvRows', this.outputs.recvCount, 8, [rows.length], fail);
    const got = comm.read(this.outputs.recvX, 0, this.outputs.recvX.bytes);
    const poison = poisonBytes(this.#salt, got.length);
    const zero = new Uint8Array(rowBytes);
    for (let row = 0; row * rowBytes < got.length; row++) {
      const who = rows[row];
      const want = row >= rows.length ? poison.subarray(row * rowBytes) : who === null ? zero : tokenRow(d.seed, d.call, who.src, who.token, rowBytes);
      const at = row * rowBytes;
      const n = Math.min(rowBytes, got.length - at);
      for (let i = 0; i < n; i++) {
        if (got[at + i] !== want[i]) fail(`recvX byte ${at + i} (row ${row}: ${row >= rows.length ? 'past the rows received' : who === null ? 'padding' : `token ${who.token} of rank ${who.src}`}) is ${got[at + i]}, expected ${want[i]}`);
      }
    }
    // As a set: each expert's rows are exactly its (source, token) pairs, whatever their order.
    if (rowBytes >= 8) {
      const view = new DataView(got.buffer);
      const pairs = (list: (typeof rows)[number][]) => list.map((w) => `${w!.src}:${w!.token}`).sort().join(' ');
      for (let e = 0; e < (job.layout === 'expanded' ? E : 1); e++) {
        const mine = rows.filter((w) => w !== null && (job.layout === 'compact' || w.expert === e));
        const at = job.layout === 'expanded' ? starts[e] : 0;
        const seen = mine.map((_, i) => ({ src: view.getUint32((at + i) * rowBytes, true), token: view.getUint32((at + i) * rowBytes + 4, true) }));
        if (pairs(seen as typeof rows) !== pairs(mine)) fail(`expert ${e}: received (source, token) pairs differ`);
      }
    }
    if (job.layout === 'compact') {
      const ids = rows.flatMap((w) => d.routings[w!.src].ids.slice(w!.token * K, (w!.token + 1) * K).map((id) => (id >= 0 && Math.floor(id / E) === me ? id - me * E : -1)));
      this.#expectWords('recvTopkIdx', this.outputs.recvIdx, o.idx64 ? 8 : 4, ids, fail);
      if (o.weights) {
        const w = rows.flatMap((r) => d.routings[r!.src].ids.slice(r!.token * K, (r!.token + 1) * K).map((id, k) => (id >= 0 && Math.floor(id / E) === me && sent(r!.src) ? weightOf(d.seed, d.call, r!.src, r!.token, k) : 0)));
        this.#expectF32('recvTopkWeights', w, fail);
      }
    } else if (o.weights) {
      this.#expectF32('recvTopkWeights', rows.map((r) => (r === null || !sent(r.src) ? 0 : weightOf(d.seed, d.call, r.src, r.token, r.k))), fail);
    }
  }

  /** Writes y, the expert outputs in recvX's layout (padding rows all ones: a read of them shows). */
  writeOutputs(d: CallData, dtype: Dtype): void {
    const { comm, job } = this;
    const me = comm.rank;
    const H = (4 * this.hidden) / DTYPE_BYTES[dtype];
    const { rows } = receiveLayout(job, d.routings, me);
    const y = new Uint8Array(this.inputs.y.bytes).fill(0xff);
    const view = new DataView(y.buffer);
    rows.forEach((w, r) => {
      if (w === null) return;
      const where = job.layout === 'compact' ? me : me * job.experts + w.expert;
      for (let h = 0; h < H; h++) {
        const bits = outputBits(dtype, d.seed, d.call, w.src, w.token, where, h);
        if (dtype === 'f32') view.setUint32((r * H + h) * 4, bits, true);
        else view.setUint16((r * H + h) * 2, bits, true);
      }
    });
    comm.write(this.inputs.y, y);
    const T = d.routings[me].tokens;
    const bias = new Uint8Array(Math.max(1, T * 4 * this.hidden));
    const bv = new DataView(bias.buffer);
    for (let i = 0; i < T * H; i++) {
      const bits = biasBits(dtype, d.seed, d.call, Math.floor(i / H), i % H);
      if (dtype === 'f32') bv.setUint32(4 * i, bits, true);
      else bv.setUint16(2 * i, bits, true);
    }
    comm.write(this.inputs.bias, bias);
  }

  combine(o: { route: MoeRoute; dtype: Dtype; weights: boolean; bias: boolean; stream?: Stream }): Handle {
    return this.group.combine({
      y: this.inputs.y,
      route: o.route,
      out: this.inputs.out,
      topkWeights: o.weights ? this.inputs.weights : undefined,
      dtype: o.dtype,
      bias: o.bias ? this.inputs.bias : undefined,
      stream: o.stream,
    });
  }

  verifyCombine(d: CallData, o: { dtype: Dtype; weights: boolean; bias: boolean }, label: string): void {
    const { comm, job } = this;
    const me = comm.rank;
    const H = (4 * this.hidden) / DTYPE_BYTES[o.dtype];
    const want = combined(job, d.routings[me], me, { ...o, hidden: H, seed: d.seed, call: d.call });
    const size = DTYPE_BYTES[o.dtype];
    const got = comm.read(this.inputs.out, 0, this.inputs.out.bytes);
    const view = new DataView(got.buffer);
    want.forEach((bits, i) => {
      const g = size === 4 ? view.getUint32(4 * i, true) : view.getUint16(2 * i, true);
      if (g !== bits) throw new ConformanceError(`${label}: rank ${me} out[${Math.floor(i / H)}][${i % H}] (${o.dtype}) has bits ${g.toString(16)}, expected ${bits.toString(16)}`);
    });
    const poison = poisonBytes(this.#salt, got.length);
    for (let i = want.length * size; i < got.length; i++) if (got[i] !== poison[i]) throw new ConformanceError(`${label}: rank ${me} out byte ${i}, past the ${want.length / H} tokens, was written`);
  }

  /** Every output still holds its poison (a refused call). */
  verifyUntouched(label: string, what: DeviceBuffer[] = [...Object.values(this.outputs), this.inputs.out]): void {
    for (const buf of what) {
      const got = this.comm.read(buf, 0, buf.bytes);
      const poison = poisonBytes(this.#salt, buf.bytes);
      const i = got.findIndex((b, k) => b !== poison[k]);
      if (i >= 0) throw new ConformanceError(`${label}: rank ${this.comm.rank} output byte ${i} of a ${buf.bytes}-byte buffer was written by a refused call`);
    }
  }

  #expectWords(what: string, buf: DeviceBuffer, size: 4 | 8, want: number[], fail: (w: string) => never): void {
    const got = this.comm.read(buf, 0, buf.bytes);
    const view = new DataView(got.buffer);
    want.forEach((v, i) => {
      const g = size === 8 ? Number(view.getBigInt64(8 * i, true)) : view.getInt32(4 * i, true);
      if (g !== v) fail(`${what}[${i}] is ${g}, expected ${v} (expected [${want.join(', ')}])`);
    });
    const poison = poisonBytes(this.#salt, got.length);
    for (let i = want.length * size; i < got.length; i++) if (got[i] !== poison[i]) fail(`${what} byte ${i}, past its ${want.length} entries, was written`);
  }

  #expectF32(what: string, want: number[], fail: (w: string) => never): void {
    const buf = this.outputs.recvWeights;
    const got = this.comm.read(buf, 0, buf.bytes);
    const f = new Float32Array(got.buffer, 0, want.length);
    want.forEach((v, i) => {
      if (!Object.is(f[i], v) && !(f[i] === 0 && v === 0)) fail(`${what}[${i}] is ${f[i]}, expected ${v}`);
    });
    const poison = poisonBytes(this.#salt, got.length);
    for (let i = 4 * want.length; i < got.length; i++) if (got[i] !== poison[i]) fail(`${what} byte ${i}, past its ${want.length} entries, was written`);
  }

  async close(): Promise<void> {
    await this.group.close();
  }
}
