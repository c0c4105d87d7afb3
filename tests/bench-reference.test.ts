// The sweep's reference, without a GPU: which one a placement of ranks gets, and what the
// peer-copy reference moves (exactly the bytes each rank sends to ranks on other GPUs, to where the
// exchange puts them) — the GPU run only adds the copies' speed.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { Comm, CopyOffsets, DeviceBuffer, PeerCopyArgs, Stream } from '../src/backends/backend.js';
import type { Agreement } from '../src/collectives/agree.js';
import { copyBytes, copyPairs, peerCopies, planReference, referenceWork, sendPieces, type ReferencePlan } from '../src/bench/reference.js';
import { makeSplits } from '../src/bench/splits.js';
import { measure } from '../src/bench/measure.js';

const buffer = (bytes: number, symmetric = false): DeviceBuffer => ({ bytes, symmetric, symmetricId: symmetric ? 0 : -1, freed: false });
const stream: Stream = { kind: 'stream' };

/** Rank `rank` of ranks whose devices are named `devices` (one per rank); records its copies. */
function fakeRank(rank: number, devices: string[], peerCopy: boolean) {
  const calls: { peer?: PeerCopyArgs; local?: { bytes: number } }[] = [];
  const comm = {
    rank,
    worldSize: devices.length,
    deviceName: devices[rank],
    ranksOnDevice: devices.filter((d) => d === devices[rank]).length,
    copy: (_dst: DeviceBuffer, _src: DeviceBuffer, bytes: number, _stream?: unknown, at?: CopyOffsets) => calls.push({ local: { bytes, ...(at ? { at } : {}) } }),
    ...(peerCopy ? { copyToPeer: (args: PeerCopyArgs) => calls.push({ peer: args }) } : {}),
  } as unknown as Comm;
  // The all-gather of device keys: equal names, equal keys.
  const agree = { gather: () => devices.map((d) => [devices.indexOf(d)]) } as unknown as Agreement;
  return { comm, agree, calls };
}

describe('planReference', () => {
  it('ranks on one device: the copy, timed by its lowest rank only', () => {
    const devices = ['H200 #0', 'H200 #0', 'H200 #0'];
    const plans = devices.map((_, r) => planReference(fakeRank(r, devices, true).comm, fakeRank(r, devices, true).agree));
    assert.deepEqual(plans.map((p) => p.kind), ['copy', 'copy', 'copy']);
    assert.deepEqual(plans.map((p) => p.timesCopy), [true, false, false]);
  });

  it('peer copies are timed without a lead-in call only where ranks share a device (one engine queues their copies)', () => {
    const one = ['H200 #0', 'H200 #1'];
    assert.equal(planReference(fakeRank(0, one, true).comm, fakeRank(0, one, true).agree).leadIn, 1, 'a rank a GPU: the lead-in lines the ranks up');
    const two = ['H200 #0', 'H200 #1', 'H200 #0', 'H200 #1'];
    assert.equal(planReference(fakeRank(1, two, true).comm, fakeRank(1, two, true).agree).leadIn, 0);
    const same = ['H200 #0', 'H200 #0'];
    assert.equal(planReference(fakeRank(0, same, true).comm, fakeRank(0, same, true).agree).leadIn, 1, 'the one-GPU copy keeps it');
  });

  it('cpu: every rank times a copy of its own bytes, at once (the ranks run on the host\'s cores)', () => {
    const devices = ['cpu thread', 'cpu thread', 'cpu thread'];
    const plans = devices.map((_, r) => {
      const { comm, agree } = fakeRank(r, devices, false);
      return planReference(Object.assign(Object.create(comm), { backend: 'cpu' }), agree);
    });
    assert.deepEqual(plans.map((p) => [p.kind, p.timesCopy]), [['rank-copy', true], ['rank-copy', true], ['rank-copy', true]]);
    assert.equal(copyBytes('rank-copy', 700, 3), 700, 'its own bytes, not its device\'s');
    assert.equal(copyBytes('copy', 700, 3), 2100);
    assert.deepEqual([copyPairs('rank-copy', 3), copyPairs('copy', 3), copyPairs('peer-copy', 3)], [3, 1, 0]);
  });

  it('ranks on several GPUs: peer copies where peers are addressable, else none', () => {
    const devices = ['H200 #0', 'H200 #0', 'H200 #1', 'H200 #1'];
    const { comm, agree } = fakeRank(2, devices, true);
    assert.deepEqual(planReference(comm, agree), { kind: 'peer-copy', deviceOf: [0, 0, 2, 2], timesCopy: false, leadIn: 0 });
    const nccl = fakeRank(2, devices, false);
    assert.equal(planReference(nccl.comm, nccl.agree).kind, 'none');
  });
});

describe('the peer-copy reference', () => {
  const rowBytes = 7;
  const deviceOf = [0, 0, 2, 2, 4];
  const w = deviceOf.length;

  for (const kind of ['uniform', 'zipf'] as const) {
    it(`${kind}: every rank copies what it sends to other GPUs, from where it sits to where the exchange puts it`, () => {
      const splits = makeSplits({ kind, worldSize: w, bytesPerRank: 3000, rowBytes, seed: 11 });
      const all = Array.from({ length: w }, (_, me) => peerCopies(me, deviceOf, splits, rowBytes).map((c) => ({ ...c, me })));
      let crossing = 0;
      for (let src = 0; src < w; src++) for (let dst = 0; dst < w; dst++) if (deviceOf[src] !== deviceOf[dst]) crossing += splits.rows[src][dst];
      assert.equal(all.flat().reduce((sum, c) => sum + c.bytes, 0), crossing * rowBytes, 'all the crossing bytes, nothing else');
      for (const c of all.flat()) {
        assert.notEqual(deviceOf[c.peer], deviceOf[c.me], 'no copy within a device');
        const row = splits.rows[c.me];
        assert.equal(c.srcOffset, row.slice(0, c.peer).reduce((a, b) => a + b, 0) * rowBytes);
        assert.equal(c.dstOffset, splits.rows.slice(0, c.me).reduce((sum, r) => sum + r[c.peer], 0) * rowBytes);
        assert.equal(c.bytes, row[c.peer] * rowBytes);
        assert.ok(c.bytes > 0, 'empty sends are left out');
      }
    });
  }

  it('queues each copy through Comm.copyToPeer into the output, from the input, on the stream', () => {
    const splits = makeSplits({ kind: 'uniform', worldSize: 2, bytesPerRank: 700, rowBytes, seed: 1 });
    const { comm, calls } = fakeRank(0, ['H200 #0', 'H200 #1'], true);
    const plan: ReferencePlan = { kind: 'peer-copy', deviceOf: [0, 1], timesCopy: false, leadIn: 1 };
    const input = buffer(700);
    const output = buffer(800, true);
    const work = referenceWork(comm, plan, { input, output }, splits, rowBytes, stream);
    assert.ok(work, 'every rank times the peer copies');
    work();
    assert.deepEqual(calls, [{ peer: { dst: output, dstOffset: 0, peer: 1, src: input, srcOffset: 350, bytes: 350, stream } }]);
  });

  it('the rank-copy reference: each rank copies its own bytes, a copy per peer\'s chunk as the exchange sends them', () => {
    const splits = makeSplits({ kind: 'zipf', worldSize: 3, bytesPerRank: 700, rowBytes, seed: 1 });
    const devices = ['cpu thread', 'cpu thread', 'cpu thread'];
    for (const rank of [0, 2]) {
      const { comm, calls } = fakeRank(rank, devices, false);
      const plan: ReferencePlan = { kind: 'rank-copy', deviceOf: [0, 0, 0], timesCopy: true, leadIn: 1 };
      referenceWork(comm, plan, { input: buffer(700), output: buffer(800, true), copy: { src: buffer(1000), dst: buffer(1000) } }, splits, rowBytes, stream)!();
      let at = 0;
      const expected = splits.rows[rank].filter((n) => n > 0).map((n) => {
        const piece = { local: { bytes: n * rowBytes, at: { dstOffset: at, srcOffset: at } } };
        at += n * rowBytes;
        return piece;
      });
      assert.deepEqual(calls, expected);
      assert.equal(at, splits.rowsPerRank * rowBytes, 'every byte it sends');
    }
  });

  it('rank-copy pieces wrap round a buffer smaller than the bytes sent, split where they cross its end', () => {
    assert.deepEqual(sendPieces([3, 0, 5], 10, 60), [{ offset: 0, bytes: 30 }, { offset: 30, bytes: 30 }, { offset: 0, bytes: 20 }]);
    assert.deepEqual(sendPieces([0, 0], 4, 16), []);
  });

  it('the copy reference: the lowest rank copies all its device ranks\' bytes in chunks of its buffer', () => {
    const splits = makeSplits({ kind: 'uniform', worldSize: 3, bytesPerRank: 700, rowBytes, seed: 1 });
    const devices = ['cpu thread', 'cpu thread', 'cpu thread'];
    const { comm, calls } = fakeRank(0, devices, false);
    const plan: ReferencePlan = { kind: 'copy', deviceOf: [0, 0, 0], timesCopy: true, leadIn: 1 };
    referenceWork(comm, plan, { input: buffer(700), output: buffer(800, true), copy: { src: buffer(1000), dst: buffer(1000) } }, splits, rowBytes, stream)!();
    assert.deepEqual(calls, [{ local: { bytes: 1000 } }, { local: { bytes: 1000 } }, { local: { bytes: 100 } }]);
    const other = fakeRank(1, devices, false);
    assert.equal(referenceWork(other.comm, { ...plan, timesCopy: false }, { input: buffer(700), output: buffer(800, true) }, splits, rowBytes, stream), undefined);
  });
});

describe('measure', () => {
  it('queues the lead-in calls it is given before each timed loop (default one)', () => {
    const leadIns: number[] = [];
    const comm = {
      timeLoop: (_s: Stream, _iters: number, _fn: () => void, leadIn = 0) => {
        leadIns.push(leadIn);
        return 30;
      },
    } as unknown as Comm;
    measure(comm, stream, () => {}, { repeats: 2, fixedIters: 3 });
    assert.deepEqual(leadIns.slice(-2), [1, 1]);
    leadIns.length = 0;
    measure(comm, stream, () => {}, { repeats: 3, fixedIters: 3, leadIn: 0 });
    assert.deepEqual(leadIns.slice(-3), [0, 0, 0]);
  });
});
