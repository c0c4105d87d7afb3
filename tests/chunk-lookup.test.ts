// How x_copy_slices and x_fused find the chunk of each 16-byte word they copy (kernels/exchange.cuh):
// x_copy_slices' index entries (xs_chunk_entries), x_chunk_at and x_chunk_from, the window its spans
// across chunks take (xs_base, xs_find, x_chunk_at past it), and x_fused's biased chunks (bias_chunk,
// biased_search, biased_chunk_from), compiled by nvcc for the host and run on fresh random chunk tables (empty chunks, runs of them, one-row
// chunks, a table of one chunk, tables longer than the window) against the chunk computed here:
// the one whose byte range holds the word. Skipped with a message where nvcc is missing (CI has it).
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { randomInt } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { kernelsDir } from '../src/jit/module.js';
import { Rng } from './conformance/reference.js';
import { nvcc } from './support/kernel-source.js';

const seed = process.env.A2AV_SEED !== undefined ? Number(process.env.A2AV_SEED) : randomInt(2 ** 31);
const SLICE = 256 * 16;

interface Table {
  rb: number;
  rows: number[];
}

/** Up to `most` chunks of 16-byte-multiple rows, a third of them empty; `short`: 0-2 rows each. */
function randomTable(rng: Rng, most: number, short = false): Table {
  const n = 1 + rng.int(most);
  const rb = 16 * (1 + rng.int(rng.int(2) === 0 ? 4 : 64));
  const rows: number[] = Array.from({ length: n }, () => (rng.int(3) === 0 ? 0 : short ? rng.int(3) : rng.int(4) === 0 ? 1 + rng.int(3) : rng.int(40)));
  if (!rows.some((r) => r > 0)) rows[rng.int(n)] = 1;
  return { rb, rows };
}

/**
 * Compiles a program that reads each table (n, rb, rows) into its running sums `cum` and `total`
 * bytes, then runs `perTable` (C++ printing one line), and returns its lines, a table each.
 */
function runLookup(perTable: string, tables: readonly Table[]): string[] {
  const dir = mkdtempSync(join(tmpdir(), 'a2av-chunks-'));
  try {
    writeFileSync(
      join(dir, 'lookup.cu'),
      `#include <cstdio>\n#include <vector>\n#include "exchange.cuh"\n` +
        // Chunks go out as runs (chunk:words): a word each would be hundreds of MB for the large tables.
        `static long long run_k = -1, run_n = 0;\n` +
        `static void word(long long k) { if (k == run_k) { ++run_n; return; } if (run_n) printf("%lld:%lld ", run_k, run_n); run_k = k; run_n = 1; }\n` +
        `static void end_runs() { if (run_n) printf("%lld:%lld ", run_k, run_n); run_k = -1; run_n = 0; }\n` +
        `int main() {\n` +
        `  long long n, rb;\n` +
        `  while (scanf("%lld %lld", &n, &rb) == 2) {\n` +
        `    std::vector<i64> cum(n); i64 sum = 0;\n` +
        `    for (i64 k = 0; k < n; ++k) { long long r; scanf("%lld", &r); cum[k] = sum; sum += r; }\n` +
        `    const i64 total = sum * rb;\n` +
        perTable +
        `  }\n}\n`,
    );
    execFileSync(nvcc!, ['-std=c++17', `-I${kernelsDir()}`, join(dir, 'lookup.cu'), '-o', join(dir, 'lookup')]);
    const input = tables.map((c) => `${c.rows.length} ${c.rb} ${c.rows.join(' ')}`).join('\n') + '\n';
    return execFileSync(join(dir, 'lookup'), { input, encoding: 'utf8', maxBuffer: 1 << 28 }).split('\n');
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

/** A table with its routes: E experts a rank, each chunk's source and destination rows, every rank's output base. */
interface Routed extends Table {
  E: number;
  src: number[];
  dst: number[];
  out: bigint[];
}

/**
 * Compiles a program that reads each routed case (n, rb, E, one more number `param`, then rows,
 * src, dst and the output bases) into vectors `rows`, `src`, `dst`, their running sums `cum`, `out`
 * and `sum` rows, then runs `perCase` (C++ printing one line); returns its lines, a case each.
 */
function runRouted<C extends Routed>(param: { name: string; of: (c: C) => number }, perCase: string, cases: readonly C[]): string[] {
  const dir = mkdtempSync(join(tmpdir(), 'a2av-routed-'));
  try {
    writeFileSync(
      join(dir, 'routed.cu'),
      `#include <cstdio>\n#include <vector>\n#include "exchange.cuh"\nint main() {\n` +
        `  long long n, rb, E, ${param.name};\n` +
        `  while (scanf("%lld %lld %lld %lld", &n, &rb, &E, &${param.name}) == 4) {\n` +
        `    std::vector<i64> rows(n), src(n), dst(n), cum(n); std::vector<u8*> out(n / E); i64 sum = 0;\n` +
        `    for (auto* v : {&rows, &src, &dst}) for (auto& x : *v) { long long y; scanf("%lld", &y); x = y; }\n` +
        `    for (auto& o : out) { unsigned long long y; scanf("%llu", &y); o = (u8*)y; }\n` +
        `    for (i64 k = 0; k < n; ++k) { cum[k] = sum; sum += rows[k]; }\n` +
        perCase +
        `  }\n}\n`,
    );
    execFileSync(nvcc!, ['-std=c++17', `-I${kernelsDir()}`, join(dir, 'routed.cu'), '-o', join(dir, 'routed')]);
    const input = cases.map((c) => [c.rows.length, c.rb, c.E, param.of(c), ...c.rows, ...c.src, ...c.dst, ...c.out].join(' ')).join('\n') + '\n';
    return execFileSync(join(dir, 'routed'), { input, encoding: 'utf8', maxBuffer: 1 << 28 }).split('\n');
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

/** Asserts the runs `got` ("chunk:words" each) name, word by word, the chunk of `table` that holds each word. */
function checkChunks(got: string, table: Table, label: string): void {
  const want: [number, number][] = table.rows.flatMap((r, k) => (r > 0 ? [[k, (r * table.rb) / 16] as [number, number]] : []));
  const runs = got
    .trim()
    .split(/\s+/)
    .filter((w) => w !== '')
    .map((w) => w.split(':').map(Number) as [number, number]);
  let word = 0;
  for (let i = 0; i < Math.max(runs.length, want.length); i++) {
    const [k, n] = runs[i] ?? [-1, 0];
    const [wk, wn] = want[i] ?? [-1, 0];
    const at = `${label}: from word ${word} (byte ${16 * word})`;
    assert.ok(k === wk && n === wn, `${at} found chunk ${k} for ${n} words, held by chunk ${wk} for ${wn}`);
    word += n;
  }
}

const labelOf = (c: Table, i: number) => `seed ${seed} (A2AV_SEED reruns it): table ${i}, ${c.rows.length} chunks of ${c.rb}-byte rows`;

test('x_chunk_at + x_chunk_from: every word of every slice finds the chunk that holds it', (t) => {
  if (nvcc === undefined) return t.skip('nvcc not found: the lookup cannot be compiled here (CI has nvcc)');
  const rng = new Rng(seed);
  const tables: Table[] = [{ rb: 16, rows: [1] }, { rb: 4096, rows: [0, 0, 3, 0, 0, 1, 0] }, { rb: 16, rows: Array.from({ length: 256 }, () => 1) }];
  // Chunks shorter and longer than a slice.
  for (let i = 0; i < 40; i++) tables.push(randomTable(rng, 256));
  // Slice by slice as the first form of the kernel walked: x_chunk_at for the slice's first byte,
  // x_chunk_from for each word.
  const lines = runLookup(
    `    for (i64 lo = 0; lo < total; lo += ${SLICE}) {\n` +
      `      const i64 k0 = x_chunk_at(cum.data(), n, rb, lo);\n` +
      `      for (i64 x = lo; x < lo + ${SLICE} && x < total; x += 16) word(x_chunk_from(cum.data(), n, rb, k0, x));\n` +
      `    }\n` +
      `    end_runs(); printf("\\n");\n`,
    tables,
  );
  tables.forEach((c, i) => checkChunks(lines[i]!, c, labelOf(c, i)));
});

test('x_copy_slices\' window (xs_base, xs_find, x_chunk_at past it): every word of every slice finds the chunk that holds it', (t) => {
  if (nvcc === undefined) return t.skip('nvcc not found: the lookup cannot be compiled here (CI has nvcc)');
  const rng = new Rng(seed);
  // Small tables (the whole plan in the window), large ones (samples, then a window), and large ones
  // of short and empty chunks, so that slices run past their window.
  const tables: Table[] = [
    { rb: 16, rows: Array.from({ length: 256 }, () => 1) },
    { rb: 16, rows: Array.from({ length: 257 }, () => 1) },
    { rb: 16, rows: Array.from({ length: 2000 }, (_, k) => (k % 7 === 0 ? 1 : 0)) },
    { rb: 4096, rows: [...Array.from({ length: 600 }, () => 0), 3, ...Array.from({ length: 600 }, () => 0)] },
  ];
  for (let i = 0; i < 40; i++) tables.push(randomTable(rng, [256, 1024, 18432][rng.int(3)]!, rng.int(2) === 0));
  // As the kernel: per slice, the window (all chunks, or XS_WINDOW from the slice's sample), each
  // word looked up in it, or in the whole table past it. Prints the chunks, and how many words went
  // past their window (so the test knows the fallback ran).
  const lines = runLookup(
    `    const i64 stride = xs_stride(n);\n` +
      `    std::vector<i64> sample; for (i64 j = 0; j * stride < n; ++j) sample.push_back(cum[j * stride]);\n` +
      `    long long past = 0;\n` +
      `    for (i64 lo = 0; lo < total; lo += ${SLICE}) {\n` +
      `      const i64 base = n <= XS_WINDOW ? 0 : xs_base(sample.data(), n, rb, lo);\n` +
      `      const int count = (int)(n - base < XS_WINDOW ? n - base : XS_WINDOW);\n` +
      `      std::vector<i64> w(count + 1);\n` +
      `      for (int i = 0; i < count; ++i) w[i] = cum[base + i];\n` +
      `      w[count] = base + count < n ? cum[base + count] : xs_sentinel(rb);\n` +
      `      for (i64 x = lo; x < lo + ${SLICE} && x < total; x += 16) {\n` +
      `        const int i = xs_find(w.data(), count, rb, x);\n` +
      `        if (i < 0) ++past;\n` +
      `        word(i >= 0 ? base + i : x_chunk_at(cum.data(), n, rb, x));\n` +
      `      }\n` +
      `    }\n` +
      `    end_runs(); printf("| %lld\\n", past);\n`,
    tables,
  );
  let pastAll = 0;
  tables.forEach((c, i) => {
    const [words, past] = lines[i]!.split('|');
    pastAll += Number(past);
    checkChunks(words!, c, labelOf(c, i));
  });
  assert.ok(pastAll > 0, 'some words lay past their window (the table of 2000 short chunks has them), so the fallback was checked');
});

test('x_copy_slices\' index (xs_chunk_entries): a span in one chunk maps every byte to its source and destination; a span into the next chunk is a split entry where both come from the input in order, else names its first chunk; one across more is looked up', (t) => {
  if (nvcc === undefined) return t.skip('nvcc not found: the index cannot be compiled here (CI has nvcc)');
  const rng = new Rng(seed);
  interface Case extends Routed {
    span: number;
    /** Split entries allowed (x_slice_index: a dispatch's grid). */
    splits: boolean;
  }
  const cases: Case[] = [];
  for (let i = 0; i < 60; i++) {
    const table = randomTable(rng, [8, 256, 2048][rng.int(3)]!, rng.int(3) === 0);
    const n = table.rows.length;
    // E divides n: the chunks are W ranks' E experts.
    const divisors = Array.from({ length: n }, (_, d) => d + 1).filter((d) => n % d === 0);
    const E = rng.pick(divisors);
    const W = n / E;
    let cum = 0;
    const combine = rng.int(2) === 0;
    const src = table.rows.map((r) => {
      const s = combine ? rng.int(1000) : cum;
      cum += r;
      return s;
    });
    const dst = table.rows.map(() => rng.int(1000));
    // Output bases far apart, one in five cases with a rank's base off 16-byte alignment.
    const out = Array.from({ length: W }, (_, q) => (BigInt(q + 1) << 32n) + (rng.int(5) === 0 ? 8n : 0n));
    cases.push({ ...table, E, src, dst, out, span: 16 << rng.int(9), splits: rng.int(4) !== 0 });
  }
  // Per case: prints each span's entry (dst src) and how often it was written.
  const lines = runRouted(
    { name: 'spanSplits', of: (c: Case) => 2 * c.span + (c.splits ? 1 : 0) },
    `    const PlanArrays plan{rows.data(), src.data(), dst.data(), cum.data()};\n` +
      `    const u8* input = (const u8*)(1ull << 44);\n` +
      `    const i64 span = spanSplits >> 1; const bool splits = (spanSplits & 1) != 0;\n` +
      `    int shift = 0; while ((1ll << shift) < span) ++shift;\n` +
      `    const i64 spans = (sum * rb + span - 1) / span;\n` +
      `    std::vector<XsEntry> got(spans, XsEntry{0, 0}); std::vector<int> writes(spans, 0);\n` +
      `    XsIndexOf of; of.plan = plan; of.n = n; of.E = (int)E; of.rb = rb; of.total = sum * rb; of.shift = shift; of.entries = spans; of.out = out.data(); of.input = input; of.splits = splits;\n` +
      `    // Chunks in reverse and each by 3 \"lanes\": the entries must not depend on the order.\n` +
      `    for (i64 k = n - 1; k >= 0; --k) for (int t = 0; t < 3; ++t)\n` +
      `      xs_chunk_entries(of, k, t, 3, [&](i64 i, XsEntry e) { got[i] = e; ++writes[i]; });\n` +
      `    for (i64 i = 0; i < spans; ++i) printf("%lld %lld %d ", (long long)got[i].dst, (long long)got[i].src, writes[i]);\n` +
      `    printf("\\n");\n`,
    cases,
  );
  const INPUT = 1n << 44n;
  let whole = 0;
  let across = 0;
  let twoChunks = 0;
  let splits = 0;
  cases.forEach((c, i) => {
    const label = `${labelOf(c, i)}, E ${c.E}, span ${c.span}${c.splits ? '' : ', no split entries'}`;
    const got = lines[i]!.trim().split(/\s+/).filter((w) => w !== '').map(BigInt);
    // Each byte's chunk (16-byte steps: rows are whole words) and where it goes and comes from.
    const starts: number[] = [];
    let sum = 0;
    for (const r of c.rows) starts.push((sum += r) - r);
    const total = sum * c.rb;
    // The last chunk starting at or before x (empty chunks start where the next one does).
    const chunkOf = (x: number) => {
      let [lo, hi] = [0, c.rows.length - 1];
      while (lo < hi) {
        const mid = (lo + hi + 1) >> 1;
        if (starts[mid]! * c.rb <= x) lo = mid;
        else hi = mid - 1;
      }
      return lo;
    };
    assert.equal(got.length, 3 * Math.ceil(total / c.span), `${label}: an entry a span`);
    for (let s = 0; s * c.span < total; s++) {
      const [dst, src, writes] = [got[3 * s]!, got[3 * s + 1]!, got[3 * s + 2]!];
      assert.equal(writes, 1n, `${label}: span ${s}'s entry written once`);
      const lo = s * c.span;
      const hi = Math.min(lo + c.span, total);
      const k = chunkOf(lo);
      const oneChunk = chunkOf(hi - 16) === k;
      const aligned = c.out[Math.floor(k / c.E)]! % 16n === 0n;
      const named = !oneChunk && aligned && chunkOf(hi - 16) === k + 1;
      // Both chunks' bytes from the input in order (a dispatch's), the second's output aligned too:
      // one split entry serves the span (xs_split_entry; the bases here fit its 48 bits).
      const inOrder = (q: number) => c.src[q] === starts[q];
      if (c.splits && named && inOrder(k) && inOrder(k + 1) && c.out[Math.floor((k + 1) / c.E)]! % 16n === 0n) {
        const split = starts[k + 1]! * c.rb - lo;
        const word = BigInt.asUintN(64, src);
        assert.equal(dst & 1n, 1n, `${label}: span ${s} into the next chunk, in order, is a split entry`);
        assert.equal(Number(word >> 48n), split, `${label}: span ${s}'s split entry holds where chunk ${k + 1} begins`);
        // Where x_copy_slices sends byte x of it (exchange.cuh xs_split_to), on each side of the split.
        const to = (x: number) => (x - lo < Number(word >> 48n) ? dst - 1n : word & ((1n << 48n) - 1n));
        for (const x of new Set([lo, lo + split - 16, lo + split, hi - 16])) {
          const q = x < lo + split ? k : k + 1;
          const want = c.out[Math.floor(q / c.E)]! + BigInt(c.dst[q]! * c.rb) + BigInt(x - starts[q]! * c.rb);
          assert.equal(to(x) + BigInt(x), want, `${label}: byte ${x} of split span ${s} goes to chunk ${q}'s place`);
        }
        splits++;
        across++;
        continue;
      }
      if (!oneChunk || !aligned) {
        assert.equal(dst, 1n, `${label}: span ${s} (${oneChunk ? 'unaligned output' : 'across chunks'}) is marked XS_STRADDLES`);
        // A span from an aligned chunk into the next one names its first chunk (x_copy_slices
        // copies it from those two); across more chunks, or an empty one, it is looked up.
        assert.equal(src, named ? BigInt(k) : -1n, `${label}: span ${s} names ${named ? `its first byte's chunk, ${k}` : 'no chunk: the lookup'}`);
        if (named) twoChunks++;
        across++;
        continue;
      }
      whole++;
      // One entry serves the whole span, and both sides move with x: its ends check every byte.
      for (const x of new Set([lo, hi - 16])) {
        const off = BigInt(x - starts[k]! * c.rb);
        assert.equal(dst + BigInt(x), c.out[Math.floor(k / c.E)]! + BigInt(c.dst[k]! * c.rb) + off, `${label}: byte ${x}'s destination`);
        assert.equal(src + BigInt(x), INPUT + BigInt(c.src[k]! * c.rb) + off, `${label}: byte ${x}'s source`);
      }
    }
  });
  assert.ok(whole > 0 && splits > 0 && twoChunks > 0 && across > twoChunks + splits, `every kind of span was checked (${whole} in one chunk, ${splits} split entries, ${twoChunks} into the next by its chunk, ${across - twoChunks - splits} looked up)`);
});

test('x_fused\'s biased chunks (bias_chunk, biased_search, biased_chunk_from): every word of every tile goes from its source to its destination', (t) => {
  if (nvcc === undefined) return t.skip('nvcc not found: the chunks cannot be compiled here (CI has nvcc)');
  const rng = new Rng(seed);
  interface Case extends Routed {
    threads: number;
  }
  const withRoutes = (table: Table, E: number, threads: number): Case => ({
    ...table,
    E,
    threads,
    // A combine's sources lie anywhere in its input; destinations anywhere in the receiver's output.
    src: table.rows.map(() => rng.int(5000)),
    dst: table.rows.map(() => rng.int(5000)),
    out: Array.from({ length: table.rows.length / E }, (_, q) => BigInt(q + 1) << 36n),
  });
  // x_fused's plans (at most 256 chunks), and 2048 one-word chunks, where a thread's words lie 512
  // chunks apart and every step past the first word takes the search.
  const cases: Case[] = [withRoutes({ rb: 16, rows: Array.from({ length: 2048 }, () => 1) }, 256, 512)];
  for (let i = 0; i < 60; i++) {
    const table = randomTable(rng, 256, rng.int(3) === 0);
    const n = table.rows.length;
    const E = rng.pick(Array.from({ length: n }, (_, d) => d + 1).filter((d) => n % d === 0));
    cases.push(withRoutes(table, E, rng.pick([32, 128, 512])));
  }
  // As copy_tile_biased: per tile of threads x 16 x A2AV_COPY_UNROLL bytes, the chunk at its first
  // byte, then each thread's words in order, each from the chunk the thread's last word was in.
  // Prints every word's (dst src), as runs.
  const lines = runRouted(
    { name: 'nt', of: (c: Case) => c.threads },
    `    std::vector<i64> bs(n), bd(n), bsrc(n);\n` +
      `    const XChunks c{rows.data(), src.data(), dst.data(), cum.data(), out.data(), (const u8*)(1ull << 44), n, rb, (int)E};\n` +
      `    const BiasedChunks b{bs.data(), bd.data(), bsrc.data(), n};\n` +
      `    for (i64 k = n - 1; k >= 0; --k) bias_chunk(b, c, k);\n` +
      `    const i64 total = sum * rb, tile = nt * 16 * A2AV_COPY_UNROLL;\n` +
      `    std::vector<i64> gd(total / 16, 0), gs(total / 16, 0);\n` +
      `    for (i64 lo = 0; lo < total; lo += tile) {\n` +
      `      const i64 hi = lo + tile < total ? lo + tile : total, k0 = biased_search(b.start, n, 0, lo);\n` +
      `      for (i64 t = 0; t < nt; ++t) {\n` +
      `        i64 k = k0;\n` +
      `        for (int u = 0; u < A2AV_COPY_UNROLL; ++u) {\n` +
      `          const i64 x = lo + (u * nt + t) * 16;\n` +
      `          if (x >= hi) continue;\n` +
      `          k = biased_chunk_from(b.start, n, k, x);\n` +
      `          gd[x / 16] = b.dst[k] + x; gs[x / 16] = b.src[k] + x;\n` +
      `        }\n` +
      `      }\n` +
      `    }\n` +
      // Runs of words whose destination and source lie the same distance from the word (a chunk's).
      `    for (i64 w = 0, r = 0; w < total / 16; w += r) {\n` +
      `      for (r = 1; w + r < total / 16 && gd[w + r] - gd[w] == 16 * r && gs[w + r] - gs[w] == 16 * r; ++r) {}\n` +
      `      printf("%lld:%lld:%lld ", (long long)(gd[w] - 16 * w), (long long)(gs[w] - 16 * w), (long long)r);\n` +
      `    }\n` +
      `    printf("\\n");\n`,
    cases,
  );
  const INPUT = 1n << 44n;
  cases.forEach((c, i) => {
    const label = `${labelOf(c, i)}, E ${c.E}, ${c.threads} threads`;
    const got = lines[i]!
      .trim()
      .split(/\s+/)
      .filter((w) => w !== '')
      .map((w) => w.split(':').map(BigInt) as [bigint, bigint, bigint]);
    // Each non-empty chunk is a run: its words all at one distance from their destination and source.
    const want: [bigint, bigint, bigint][] = [];
    let x = 0;
    c.rows.forEach((r, k) => {
      const [d, s, n] = [c.out[Math.floor(k / c.E)]! + BigInt(c.dst[k]! * c.rb - x), INPUT + BigInt(c.src[k]! * c.rb - x), BigInt((r * c.rb) / 16)];
      // Chunks that follow on in both input and output make one run.
      const last = want.at(-1);
      if (last !== undefined && last[0] === d && last[1] === s) last[2] += n;
      else if (r > 0) want.push([d, s, n]);
      x += r * c.rb;
    });
    let word = 0n;
    for (let j = 0; j < Math.max(got.length, want.length); j++) {
      const [d, s, n] = got[j] ?? [0n, 0n, 0n];
      const [wd, ws, wn] = want[j] ?? [0n, 0n, 0n];
      const at = `${label}: from byte ${16n * word}`;
      assert.equal(d, wd, `${at}: destination off by ${d - wd}`);
      assert.equal(s, ws, `${at}: source off by ${s - ws}`);
      assert.equal(n, wn, `${at}: ${n} words at that distance, the chunk holds ${wn}`);
      word += n;
    }
  });
});
