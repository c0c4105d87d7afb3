import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { spread } from '../src/bench/measure.js';
import { formatGBps, formatJson, formatRatio, formatTable, makeRow, type BenchResult, type RefKind } from '../src/bench/table.js';

const t = (medianUs: number, minUs = medianUs, maxUs = medianUs) => ({ medianUs, minUs, maxUs });

const result: BenchResult = {
  backend: 'cuda',
  ranks: 4,
  splits: 'uniform',
  rowBytes: 1024,
  device: 'H200 #0',
  date: '2025-01-01T00:00:00.000Z',
  repeats: 5,
  rows: [
    makeRow({ ranks: 4, bytes: 512 << 10, time: t(25, 24.5, 26.25), graph: t(18.5), ref: 'copy', refTime: t(2.5), checked: ['eager', 'graph'] }),
    makeRow({ ranks: 4, bytes: 4 * 2 ** 30, time: t(11392.123, 11390, 11400.5), graph: t(11380), ref: 'copy', refTime: t(9000), checked: ['eager', 'graph'] }),
  ],
};

/** A one-row result of `backend` with reference `ref`, no graph. */
function single(backend: string, ref: RefKind): BenchResult {
  const refTime = ref === 'none' ? undefined : t(40);
  return { ...result, backend, rows: [makeRow({ ranks: 2, bytes: 1 << 20, time: t(50, 49, 52), ref, refTime, checked: ['eager'] })] };
}

describe('bench table', () => {
  it('derives bandwidths and the ratio from the median times', () => {
    const row = result.rows[0];
    assert.equal(row.algbwGBps, (512 * 1024) / 25e-6 / 1e9);
    assert.equal(row.busbwGBps, (row.algbwGBps * 3) / 4);
    assert.equal(row.refRatio, 0.1);
    assert.deepEqual([row.timeMinUs, row.timeMaxUs], [24.5, 26.25]);
  });

  it('aligns columns with human units: time with its spread, graph, reference, what was checked', () => {
    const lines = formatTable(result).trimEnd().split('\n');
    assert.match(lines[0], /^# a2av bench: cuda, 4 ranks, uniform splits, 1024-byte rows, H200 #0, 2025-01-01/);
    assert.match(lines[1], /^# time µs = median of 5 timed loops of about 20 ms each \(slowest rank in each\), min-max = the fastest and slowest loop$/);
    // --iters fixed the calls a loop: said, and kept in the JSON.
    assert.match(formatTable({ ...result, iters: 100 }), /^# time µs = median of 5 timed loops of 100 calls \(slowest rank in each\)/m);
    assert.equal(JSON.parse(formatJson({ ...result, iters: 100 })).iters, 100);
    assert.equal(lines[2], "# algbw = input bytes per rank / time; busbw = algbw × (W-1)/W, nccl-tests' all-to-all factor");
    assert.match(lines[3], /^# ref = copy: the device copying the bytes all its ranks send \(cuMemcpyDtoD/);
    assert.match(lines[4], /^# checked = calls whose result matched a host reference .* exit status 1 and names the first wrong byte$/);
    // Uneven splits: the factor is said to be a convention.
    assert.match(formatTable({ ...result, splits: 'zipf', seed: 1 }), /^# algbw = .*nccl-tests' all-to-all factor \(uniform traffic's: with zipf splits the share sent to other ranks differs\)$/m);
    const table = lines.slice(5);
    assert.match(table[0], /^\s*bytes\s+time µs\s+min-max µs\s+graph µs\s+algbw GB\/s\s+busbw GB\/s\s+ref µs\s+ref ratio\s+checked$/);
    assert.equal(new Set(table.map((l) => l.length)).size, 1, 'all lines the same width');
    assert.match(table[1], /^\s*512 KiB\s+25\.00\s+24\.50-26\.25\s+18\.50\s+21\.0\s+15\.7\s+2\.50\s+0\.10\s+eager\+graph$/);
    assert.match(table[2], /^\s*4 GiB\s+11392\.1\s+11390\.0-11400\.5\s+11380\.0\s+377\.0\s+282\.8\s+9000\.0\s+0\.79\s+eager\+graph$/);
  });

  it('writes the JSON form with the documented keys', () => {
    const parsed = JSON.parse(formatJson(result));
    assert.deepEqual(Object.keys(parsed), ['backend', 'ranks', 'splits', 'rowBytes', 'device', 'date', 'repeats', 'rows']);
    assert.deepEqual(Object.keys(parsed.rows[0]), [
      'bytes', 'timeUs', 'timeMinUs', 'timeMaxUs', 'graphUs', 'graphMinUs', 'graphMaxUs', 'algbwGBps', 'busbwGBps',
      'ref', 'refUs', 'refMinUs', 'refMaxUs', 'refRatio', 'checked',
    ]);
    assert.equal(parsed.rows[0].ref, 'copy');
    assert.deepEqual(parsed.rows[0].checked, ['eager', 'graph']);
    assert.equal(formatTable(parsed), formatTable(result), 'the table of the JSON read back is the same table');
  });

  it('cpu: no graph column, and null graph times in JSON', () => {
    const cpu = single('cpu', 'copy');
    const lines = formatTable(cpu).trimEnd().split('\n');
    const titles = lines.find((l) => /^\s*bytes/.test(l))!;
    assert.doesNotMatch(titles, /graph/);
    assert.match(titles, /^\s*bytes\s+time µs\s+min-max µs\s+algbw GB\/s\s+busbw GB\/s\s+ref µs\s+ref ratio\s+checked$/);
    assert.match(lines.at(-1)!, /^\s*1 MiB\s+50\.00\s+49\.00-52\.00\s+21\.0\s+10\.5\s+40\.00\s+0\.80\s+eager$/);
    const row = JSON.parse(formatJson(cpu)).rows[0];
    assert.deepEqual([row.graphUs, row.graphMinUs, row.graphMaxUs], [null, null, null]);
  });

  it('cpu: ranks that outnumber the host\'s cores are noted in the header (the times then depend on the scheduler)', () => {
    const note = /^# note: 4 cpu ranks on 2 cores: each waits for a core as well as for its peers, so the times depend on the scheduler/m;
    assert.match(formatTable({ ...single('cpu', 'rank-copy'), ranks: 4, cores: 2 }), note);
    assert.doesNotMatch(formatTable({ ...single('cpu', 'rank-copy'), ranks: 4, cores: 4 }), /^# note:/m);
    assert.doesNotMatch(formatTable({ ...single('cpu', 'rank-copy'), ranks: 4 }), /^# note:/m, 'results written before cores were recorded');
    assert.equal(JSON.parse(formatJson({ ...single('cpu', 'rank-copy'), cores: 2 })).cores, 2);
  });

  it('cpu: a host busy with other work when the run started is noted (its load average past the cores the ranks leave)', () => {
    const busy = /^# note: the host was busy when the run started \(load average 1\.9 on 2 cores, before the 2 ranks ran\): the ranks wait for cores/m;
    assert.match(formatTable({ ...single('cpu', 'rank-copy'), ranks: 2, cores: 2, load: 1.9 }), busy);
    assert.doesNotMatch(formatTable({ ...single('cpu', 'rank-copy'), ranks: 2, cores: 2, load: 0.3 }), /^# note:/m);
    // One rank has no peers to wait for.
    assert.match(formatTable({ ...single('cpu', 'rank-copy'), ranks: 1, cores: 2, load: 1.9 }), /^# note: the host was busy .*before the 1 rank ran\): the rank waits for a core, so the times/m);
    assert.doesNotMatch(formatTable({ ...single('cpu', 'rank-copy'), ranks: 2, cores: 8, load: 5.2 }), /^# note:/m, 'six cores free for two ranks');
    assert.equal(JSON.parse(formatJson({ ...single('cpu', 'rank-copy'), cores: 2, load: 1.9 })).load, 1.9);
  });

  it('names the peer-copy reference across GPUs in the header and the JSON', () => {
    const multi = single('cuda', 'peer-copy');
    const head = formatTable(multi).split('\n').filter((l) => l.startsWith('#'));
    assert.ok(head.some((l) => /^# ref = peer-copy: every rank at once copying what it sends to ranks on other GPUs .*bound of the exchange; ref ratio = ref µs \/ time µs \(>= 1: faster than the reference\)$/.test(l)), head.join('\n'));
    assert.ok(!head.some((l) => /ref = copy/.test(l)));
    assert.equal(JSON.parse(formatJson(multi)).rows[0].ref, 'peer-copy');
  });

  it("without a reference (nccl across GPUs): '-' in the ref cells, null in JSON, and the header says why", () => {
    const none = single('nccl', 'none');
    const lines = formatTable(none).trimEnd().split('\n');
    assert.ok(lines.some((l) => /^# ref = -: no same-run reference \(nccl across GPUs/.test(l)));
    assert.match(lines.at(-1)!, /\s+-\s+-\s+eager$/);
    const row = JSON.parse(formatJson(none)).rows[0];
    assert.deepEqual([row.ref, row.refUs, row.refRatio], ['none', null, null]);
  });

  it('GB/s below 1 keeps two significant digits rather than reading 0.0', () => {
    assert.deepEqual([0.0096, 0.48, 0, 1.04, 377.04].map(formatGBps), ['0.0096', '0.48', '0.0', '1.0', '377.0']);
    // In plain decimals however small, so a column never mixes 8.4e-7 with 0.0000014; a rounding
    // that carries keeps two digits.
    assert.deepEqual([8.4e-7, 1.4e-6, 0.0996, 0.996].map(formatGBps), ['0.00000084', '0.0000014', '0.10', '1.0']);
    assert.deepEqual([3.1e-7, 0.00031, 0.05, 0.96].map(formatRatio), ['0.00000031', '0.00031', '0.050', '0.96']);
  });

  it('zipf results carry their seed, in the header and the JSON; uniform ones have none', () => {
    const zipf: BenchResult = { ...result, splits: 'zipf', seed: 7 };
    assert.match(formatTable(zipf).split('\n')[0], /^# a2av bench: cuda, 4 ranks, zipf splits \(seed 7\), 1024-byte rows/);
    assert.equal(JSON.parse(formatJson(zipf)).seed, 7);
    assert.equal(JSON.parse(formatJson(result)).seed, undefined);
  });

  it('a table mixing references gets a ref column', () => {
    const mixed: BenchResult = { ...result, rows: [...single('cuda', 'peer-copy').rows, ...single('nccl', 'none').rows] };
    const titles = formatTable(mixed).split('\n').find((l) => /^\s*bytes/.test(l))!;
    assert.match(titles, /busbw GB\/s\s+ref\s+ref µs/);
    assert.doesNotMatch(formatTable(result), /GB\/s\s+ref\s+ref µs/, 'one reference: said once, in the header');
  });

  it('still prints results written before spread, reference and checks were recorded', () => {
    const old = {
      backend: 'cuda', ranks: 2, splits: 'uniform', rowBytes: 1024, device: 'NVIDIA H200 #0', date: '2026-11-29T11:55:11.781Z',
      rows: [{ bytes: 512 << 10, timeUs: 6.78, graphUs: 6.05, algbwGBps: 77.4, busbwGBps: 38.7, refUs: 4.15, refRatio: 0.61 }],
    } as unknown as BenchResult;
    const lines = formatTable(old).trimEnd().split('\n');
    assert.match(lines[1], /^# algbw = /);
    assert.match(lines[2], /^# ref = copy: /);
    assert.match(lines[3], /^\s*bytes\s+time µs\s+graph µs\s+algbw GB\/s\s+busbw GB\/s\s+ref µs\s+ref ratio$/);
    assert.match(lines[4], /^\s*512 KiB\s+6\.78\s+6\.05\s+77\.4\s+38\.7\s+4\.15\s+0\.61$/);
  });
});

describe('spread of the timed loops', () => {
  it('median, fastest and slowest', () => {
    assert.deepEqual(spread([5, 1, 4, 2, 3]), { medianUs: 3, minUs: 1, maxUs: 5 });
    assert.deepEqual(spread([4, 1]), { medianUs: 2.5, minUs: 1, maxUs: 4 });
  });
});
