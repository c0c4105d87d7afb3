// `a2av plot`: the SVG of a small synthetic result (no GPU), its axes, and the errors for bad input.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { makeRow, type BenchResult, type BenchRow } from '../src/bench/table.js';
import { UsageError } from '../src/errors.js';
import { bandwidthAxis, bytesAxis, spreadLabels } from '../src/plot/axes.js';
import { loadPlotLibraries, renderSvg } from '../src/plot/render.js';
import { chartOf, parseResult } from '../src/plot/series.js';

const cli = fileURLToPath(new URL('../src/cli.js', import.meta.url));
const dir = mkdtempSync(join(tmpdir(), 'a2av-plot-'));
after(() => rmSync(dir, { recursive: true, force: true }));

const MiB = 2 ** 20;
const timing = (us: number) => ({ medianUs: us, minUs: us, maxUs: us });

/** cuda at three sizes with a peer-copy reference, nccl at four with none: a compareBackends table. */
function synthetic(): BenchResult {
  const cuda = [1, 2, 4].map((m) => ({
    backend: 'cuda',
    ...makeRow({ ranks: 2, bytes: m * MiB, time: timing(10 * m), ref: 'peer-copy', refTime: timing(8 * m), checked: ['eager'] }),
  }));
  const nccl = [1, 2, 4, 8].map((m) => ({
    backend: 'nccl',
    ...makeRow({ ranks: 2, bytes: m * MiB, time: timing(40 * m), ref: 'none', checked: ['eager'] }),
  }));
  // As JSON gives it back: NaN is null.
  const rows = JSON.parse(JSON.stringify([...cuda, ...nccl])) as BenchRow[];
  return { backend: 'cuda,nccl', ranks: 2, splits: 'uniform', rowBytes: 1024, device: 'Test GPU #0', date: '2026-12-01T10:00:00.000Z', rows };
}

/** The line paths: their series name, whether their group is dashed, and how many points they join. */
function linePaths(svg: string): { label: string; dashed: boolean; points: number }[] {
  const groups = [...svg.matchAll(/<g([^>]*)aria-label="line"[^>]*>(.*?)<\/g>/g)];
  return groups.flatMap(([, attrs, body]) =>
    [...body.matchAll(/<path d="([^"]*)"[^>]*aria-label="([^"]*)"/g)].map(([, d, label]) => ({
      label,
      dashed: /stroke-dasharray="[^"]+"/.test(attrs),
      points: d.split(/[ML]/).filter((s) => s !== '').length,
    })),
  );
}

function plotCli(...args: string[]) {
  return spawnSync(process.execPath, [cli, 'plot', ...args], { encoding: 'utf8' });
}

// The plotting libraries are optional (peer dependencies a production install leaves out): where
// they are absent, the tests that render skip and say so; `npm ci` installs them.
const noLibraries = await loadPlotLibraries().then(
  () => undefined,
  (err: Error) => `the optional plotting libraries are not installed (${err.message.split(':')[0]})`,
);

describe('a2av plot', () => {
  test('one path per series with its points; the reference dashed and named after its kind', { skip: noLibraries }, async () => {
    const svg = await renderSvg(chartOf([{ source: 'r.json', result: synthetic() }]));
    assert.match(svg, /^<\?xml[^>]*>\n<svg [^>]*xmlns="http:\/\/www\.w3\.org\/2000\/svg"/);
    const paths = linePaths(svg).sort((a, b) => a.label.localeCompare(b.label));
    assert.deepEqual(paths, [
      { label: 'cuda', dashed: false, points: 3 },
      { label: 'nccl', dashed: false, points: 4 },
      { label: 'peer-copy ref', dashed: true, points: 3 },
    ]);
    assert.match(svg, /a2av bench: Test GPU, 2 ranks, all-to-all-v, uniform splits, 1 KiB rows, 2026-12-01/);
    assert.match(svg, /GB\/s/);
    assert.match(svg, /input bytes per rank/);
  });

  test('over three decades every y tick has its label, the 5s (0.5, 5, 50) too: a log scale\'s own tick format blanks them there', { skip: noLibraries }, async () => {
    const points = [0.07, 0.4, 3, 40].map((gbps, i) => ({ bytes: 4096 << (2 * i), gbps }));
    const svg = await renderSvg({ title: 'wide', timing: 'eager', omitted: [], series: [{ label: 'cpu', reference: false, colourOf: 0, points }] });
    const y = bandwidthAxis(0.07, 40);
    assert.deepEqual(y.ticks.map(y.label), ['0.05', '0.1', '0.2', '0.5', '1', '2', '5', '10', '20', '50']);
    const texts = [...svg.matchAll(/<text[^>]*>([^<]*)<\/text>/g)].map((m) => m[1]);
    for (const v of y.ticks) assert.ok(texts.includes(y.label(v)), `y tick ${v} labelled: ${texts.join('|')}`);
  });

  test('a long line name is drawn whole: the picture widens past its 860 px rather than cut it at the edge', { skip: noLibraries }, async () => {
    const width = (svg: string) => Number(/^<\?xml[^>]*>\n<svg [^>]*width="(\d+)"/.exec(svg)![1]);
    assert.equal(width(await renderSvg(chartOf([{ source: 'r.json', result: synthetic() }]))), 860, 'short names keep the usual width');
    const roundtrip = { ...synthetic(), op: 'roundtrip' as const, experts: 16, align: 8, splits: 'zipf', seed: 9, ranks: 3 };
    const chart = chartOf([{ source: 'u.json', result: synthetic() }, { source: 'rt.json', result: roundtrip }]);
    const longest = chart.series.map((s) => s.label).sort((a, b) => b.length - a.length)[0]!;
    assert.ok(longest.length > 60, longest);
    const svg = await renderSvg(chart);
    // At 11 px bold a character takes under 7 px: the label, from its line's end (the plot's right edge), fits.
    const right = /<svg [^>]*width="\d+"[^>]*>/.exec(svg.slice(svg.indexOf('<svg', 10)))![0];
    const plotWidth = Number(/width="(\d+)"/.exec(right)![1]);
    assert.equal(width(svg), plotWidth);
    assert.ok(plotWidth >= 58 + 640 + 8 + 7 * longest.length, `${plotWidth} px for a ${longest.length}-character name`);
    assert.ok(svg.includes(`>${longest.replace(/&/g, '&amp;')}<`), 'the name is one text, whole');
  });

  test('the x axis is ticked at powers of two bytes, evenly spaced on a log scale', { skip: noLibraries }, async () => {
    const svg = await renderSvg(chartOf([{ source: 'r.json', result: synthetic() }]));
    const ticks = /<g[^>]*aria-label="x-axis tick"[^>]*>(.*?)<\/g>/.exec(svg)![1];
    const xs = [...ticks.matchAll(/translate\(([\d.]+),/g)].map((m) => Number(m[1]));
    assert.equal(xs.length, 4, '1, 2, 4, 8 MiB');
    const steps = xs.slice(1).map((x, i) => x - xs[i]);
    for (const step of steps) assert.ok(Math.abs(step - steps[0]) < 1e-6, `even steps: ${steps}`);
    const labels = /<g[^>]*aria-label="x-axis tick label"[^>]*>(.*?)<\/g>/.exec(svg)![1];
    assert.deepEqual([...labels.matchAll(/>([^<]+)<\/text>/g)].map((m) => m[1]), ['1 MiB', '2 MiB', '4 MiB', '8 MiB']);
  });

  test('axes: powers of two, labels thinned to fit; GB/s ticked 1-2-5', () => {
    const x = bytesAxis(512 * 1024, 4 * 2 ** 30, 430);
    assert.ok(x.ticks.every((t) => Number.isInteger(Math.log2(t))));
    assert.deepEqual([x.ticks[0], x.ticks.at(-1)], [512 * 1024, 4 * 2 ** 30]);
    assert.deepEqual(x.ticks.map(x.label).filter((l) => l !== ''), ['1 MiB', '4 MiB', '16 MiB', '64 MiB', '256 MiB', '1 GiB', '4 GiB']);
    const narrow = bytesAxis(512 * 1024, 4 * 2 ** 30, 300);
    assert.deepEqual(narrow.ticks.map(narrow.label).filter((l) => l !== ''), ['1 MiB', '16 MiB', '256 MiB', '4 GiB']);
    // A one-size sweep: its size in the middle, a power of two either side, labelled.
    const one = bytesAxis(64 * 1024, 64 * 1024, 430);
    assert.deepEqual(one.domain, [32 * 1024, 128 * 1024]);
    assert.deepEqual(one.ticks.map(one.label), ['32 KiB', '64 KiB', '128 KiB']);
    const y = bandwidthAxis(11, 657);
    assert.deepEqual({ domain: y.domain, ticks: y.ticks }, { domain: [10, 1000], ticks: [10, 20, 50, 100, 200, 500, 1000] });
  });

  test('line labels move apart just enough, inside the frame', () => {
    assert.deepEqual(spreadLabels([100, 104, 300], 12, 0, 400), [96, 108, 300]);
    assert.deepEqual(spreadLabels([5, 0], 12, 0, 400), [12, 0]);
    assert.deepEqual(spreadLabels([399], 12, 0, 390), [390]);
  });

  test('several files: what tells them apart names their lines', () => {
    const zipf = { ...synthetic(), splits: 'zipf' };
    const chart = chartOf([{ source: 'a.json', result: synthetic() }, { source: 'b.json', result: zipf }]);
    assert.match(chart.title, /2 ranks/);
    assert.doesNotMatch(chart.title, /splits/);
    assert.deepEqual(chart.series.map((s) => s.label), [
      'cuda (uniform splits)', 'nccl (uniform splits)', 'peer-copy ref (uniform splits)',
      'cuda (zipf splits)', 'nccl (zipf splits)', 'peer-copy ref (zipf splits)',
    ]);
    // zipf's seed and the dispatch's alignment tell runs apart too.
    const seeds = chartOf([{ source: 'a.json', result: { ...zipf, seed: 1 } }, { source: 'b.json', result: { ...zipf, seed: 2 } }]);
    assert.deepEqual(seeds.series.slice(0, 1).concat(seeds.series.slice(3, 4)).map((s) => s.label), ['cuda (zipf splits (seed 1))', 'cuda (zipf splits (seed 2))']);
    const dispatch = { ...synthetic(), op: 'dispatch' as const, experts: 16, align: 1 };
    const aligns = chartOf([{ source: 'a.json', result: dispatch }, { source: 'b.json', result: { ...dispatch, align: 128 } }]);
    assert.deepEqual([aligns.series[0].label, aligns.series[3].label], ['cuda (dispatch, 16 experts per rank)', 'cuda (dispatch, 16 experts per rank, align 128)']);
    const same = chartOf([{ source: 'dir/a.json', result: synthetic() }, { source: 'dir/b.json', result: synthetic() }]);
    assert.equal(same.series[0].label, 'cuda (a)');
  });

  test('two inputs alike in every field get distinct labels: the file name, else the path, else the place', () => {
    const three = [{ source: 'x/a.json', result: synthetic() }, { source: 'y/a.json', result: synthetic() }, { source: 'x/b.json', result: synthetic() }];
    assert.deepEqual(chartOf(three).series.filter((s) => s.label.startsWith('cuda')).map((s) => s.label), ['cuda (x/a.json)', 'cuda (y/a.json)', 'cuda (b)']);
    const twice = chartOf([{ source: 'a.json', result: synthetic() }, { source: 'a.json', result: synthetic() }]).series.map((s) => s.label);
    assert.equal(new Set(twice).size, twice.length, twice.join(' | '));
    // Files that differ in one field but share it with another: the name tells the alike apart.
    const four = chartOf([
      { source: 'a.json', result: synthetic() }, { source: 'b.json', result: synthetic() }, { source: 'c.json', result: { ...synthetic(), ranks: 4 } },
    ]).series.filter((s) => s.label.startsWith('cuda')).map((s) => s.label);
    assert.deepEqual(four, ['cuda (2 ranks, a)', 'cuda (2 ranks, b)', 'cuda (4 ranks)']);
  });

  test('the other benches\' results are named as what they are, and what plot draws is said', () => {
    const moe = { backend: 'cpu', ranks: 2, op: 'moe-dispatch', numExperts: 256, topk: 8, hidden: 7168, layout: 'expanded', device: 'cpu thread', date: 'd',
      rows: [{ tokens: 1, selections: 8, bytes: 114688, timeUs: 10 }] };
    const allReduce = { backend: 'cpu', ranks: 2, dtype: 'f32', device: 'cpu thread', date: 'd', rows: [{ bytes: 4096, count: 1024, timeUs: 10 }] };
    const draws = "a2av plot draws only the all-to-all sweeps of 'a2av bench --json' (--op alltoallv, dispatch, combine, roundtrip)";
    assert.throws(() => parseResult(JSON.stringify(moe), 'm.json'),
      { name: 'UsageError', message: `m.json: an 'a2av bench --op moe-dispatch' result (a token MoE group per token count); ${draws}` });
    assert.throws(() => parseResult(JSON.stringify([allReduce, { ...allReduce, backend: 'nccl' }]), 'r.json'),
      { name: 'UsageError', message: `r.json: an 'a2av bench allreduce' result; ${draws}` });
    const pipeline = { op: 'pipeline', shape: { name: 'tiny' }, ranks: 2, device: 'cpu thread', date: 'd', rows: [{ backend: 'cpu', arm: 'one-lane', itPerSec: 100 }] };
    assert.throws(() => parseResult(JSON.stringify(pipeline), 'p.json'),
      { name: 'UsageError', message: `p.json: an 'a2av bench pipeline' result (it/s per training arm, not a sweep over sizes); ${draws}` });
    // A result short of fields says which.
    assert.throws(() => parseResult(JSON.stringify({ backend: 'cpu', ranks: 2, rows: [] }), 's.json'), /^UsageError: s\.json: not an a2av bench result: no device, splits, rowBytes \(/);
  });

  test('the output is checked before anything is read: .svg, a folder that exists, the same file not given twice', () => {
    const good = join(dir, 'first.json');
    writeFileSync(good, JSON.stringify(synthetic()));
    for (const [args, message] of [
      [[good, '-o', join(dir, 'x.png')], `${join(dir, 'x.png')}: plots are written as SVG; name the file *.svg`],
      [[good, '-o', '/nonexistent/x.svg'], '/nonexistent/x.svg: cannot write (ENOENT on /nonexistent)'],
      [[good, '-o', dir + '/'], `${dir}/: plots are written as SVG; name the file *.svg`],
      [[good, good, '-o', join(dir, 'dup.svg')], `${good} is given twice: its lines would be drawn on each other`],
    ] as const) {
      const run = plotCli(...args);
      assert.equal(run.status, 1, run.stderr);
      assert.equal(run.stderr.trim(), `a2av: ${message}`);
    }
  });

  test('graph times: the measured lines at the sizes replayed from a graph, the references eager; none anywhere is refused', { skip: noLibraries }, async () => {
    // cuda replayed 1 and 2 MiB from a graph (not 4); nccl has no graph at all.
    const result = synthetic();
    result.rows = result.rows.map((r) => (r.backend === 'cuda' && r.bytes <= 2 * MiB ? { ...r, graphUs: r.timeUs / 2 } : r));
    const chart = chartOf([{ source: 'g.json', result }], 'graph');
    assert.equal(chart.timing, 'graph');
    assert.deepEqual(chart.series.map((s) => s.label), ['cuda', 'peer-copy ref']);
    assert.deepEqual(chart.series[0].points.map((p) => p.bytes), [MiB, 2 * MiB]);
    const eagerRow = result.rows.find((r) => r.backend === 'cuda' && r.bytes === MiB)!;
    assert.equal(chart.series[0].points[0].gbps, MiB / (eagerRow.timeUs / 2) / 1e3);
    assert.equal(chart.series[1].points.length, 3, 'the reference keeps every size, eager');
    assert.deepEqual(chartOf([{ source: 'g.json', result }]).series.map((s) => s.points.length), [3, 4, 3]);
    assert.deepEqual(chart.omitted, ['nccl'], 'nccl, which has no graph times, is named as left out');
    assert.deepEqual(chartOf([{ source: 'g.json', result }]).omitted, []);
    const svg = await renderSvg(chart);
    assert.match(svg, /CUDA graph replays\); dashed: the same-run reference, eager; no graph times, not drawn: nccl/);
    const mixed = join(dir, 'mixed.json');
    writeFileSync(mixed, JSON.stringify(result));
    const drawn = plotCli(mixed, '--time', 'graph', '-o', join(dir, 'mixed.svg'));
    assert.equal(drawn.status, 0, drawn.stderr);
    assert.match(drawn.stderr, /^a2av: not drawn, no graph times \(bench replays from a CUDA graph on cuda only\): nccl; --time eager draws them$/m);
    assert.deepEqual(linePaths(svg).map((l) => [l.label, l.points]), [['peer-copy ref', 3], ['cuda', 2]]);
    assert.throws(() => chartOf([{ source: 'e.json', result: synthetic() }], 'graph'), (err: unknown) => err instanceof UsageError && /^e\.json: no graph times/.test(err.message));
    const file = join(dir, 'eager-only.json');
    writeFileSync(file, JSON.stringify(synthetic()));
    const refused = plotCli(file, '--time', 'graph', '-o', join(dir, 'g.svg'));
    assert.notEqual(refused.status, 0);
    assert.equal(refused.stderr.trim().split('\n').length, 1, refused.stderr);
    assert.match(refused.stderr, /no graph times/);
  });

  test('a2av bench --plot draws the sweep it ran and says where', { skip: noLibraries, timeout: 60_000 }, () => {
    const out = join(dir, 'bench.svg');
    const r = spawnSync(process.execPath, [cli, 'bench', '--backend', 'cpu', '--min', '512K', '--max', '1M', '--plot', out], { encoding: 'utf8', timeout: 60_000 });
    assert.equal(r.status, 0, r.stderr);
    assert.match(r.stderr, new RegExp(`^a2av: plot written to ${out.replace(/[.*+?^${}()|[\]\\/]/g, '\\$&')}$`, 'm'));
    assert.deepEqual(linePaths(readFileSync(out, 'utf8')).map((p) => [p.label, p.points]).sort(), [['cpu', 2], ['rank-copy ref', 2]]);
  });

  test('bad input is a usage error that names the file', () => {
    assert.throws(() => parseResult('{"hello": 1}', 'x.json'), (err: unknown) => err instanceof UsageError && /^x\.json: not an a2av bench result/.test(err.message));
    assert.throws(() => parseResult(JSON.stringify({ ...synthetic(), rows: [] }), 'e.json'), /^UsageError: e\.json: no rows/);
    assert.throws(() => parseResult('not json', 'n.json'), /n\.json: not JSON/);
  });

  test('the CLI writes the SVG, and exits non-zero with one line for bad input', { skip: noLibraries }, () => {
    const good = join(dir, 'good.json');
    writeFileSync(good, JSON.stringify(synthetic()));
    const out = join(dir, 'out.svg');
    const ok = plotCli(good, '-o', out);
    assert.equal(ok.status, 0, ok.stderr);
    assert.equal(linePaths(readFileSync(out, 'utf8')).length, 3);

    const notBench = join(dir, 'package.json');
    writeFileSync(notBench, JSON.stringify({ name: 'x', version: '1.0.0' }));
    const empty = join(dir, 'empty.json');
    writeFileSync(empty, JSON.stringify({ ...synthetic(), rows: [] }));
    for (const [file, message] of [[notBench, /not an a2av bench result/], [empty, /no rows/], [join(dir, 'missing.json'), /cannot read \(ENOENT\)/]] as const) {
      const bad = plotCli(file, '-o', join(dir, 'bad.svg'));
      assert.notEqual(bad.status, 0);
      assert.match(bad.stderr, new RegExp(`^a2av: ${file.replace(/[.*+?^${}()|[\]\\/]/g, '\\$&')}: `));
      assert.match(bad.stderr, message);
      assert.equal(bad.stderr.trim().split('\n').length, 1, bad.stderr);
    }
    const noOutput = plotCli(good);
    assert.notEqual(noOutput.status, 0);
    assert.match(noOutput.stderr, /--output/);
  });
});
