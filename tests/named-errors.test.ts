// Named errors: every class is exported with a stable code and survives the trip from a rank's
// thread; a missing library says the way out first, then every place searched, one per line.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import * as api from '../src/index.js';
import { A2avError, LibraryNotFoundError, PeerAccessError, RankExitedError } from '../src/errors.js';
import { cudaUnavailableReason } from '../src/cuda/probe.js';
import { MismatchCode, StatusCode, entryError } from '../src/collectives/status.js';
import { combineError, dispatchError, type DispatchFacts, type TokenLimit } from '../src/moe/errors.js';
import { loadLibrary } from '../src/native/find-library.js';
import { reviveError, serializeError } from '../src/world/error-transfer.js';
import { runRanks, type RankFailure } from '../src/world/threads.js';

/** A token MoE group's shape as the errors read it: 256 experts on 2 ranks, top-8, 64 tokens a rank. */
const group = { layout: 'expanded' as const, experts: 256, expertsPerRank: 128, topk: 8, tokenCap: 64 };

describe('a timeout says how far the missing peer got, as its wait tells', () => {
  const timeout = (site: number, available: bigint) =>
    entryError({ code: StatusCode.timeout, rank: 0, peer: 2, needed: 7n, available, reportedBy: 0, expert: site }, 50).message;
  it('waiting for its splits: it did not start the call', () => {
    assert.match(timeout(1, 5n), /call 7 on the lane, waiting for the peer's splits; the peer has not started it: the last it started is call 5\)/);
    assert.match(timeout(1, 0n), /waiting for the peer's splits; the peer has started no call on this lane\)/);
  });
  it('waiting for its completion: it started the call and stopped inside it', () => {
    assert.match(timeout(2, 6n), /call 7 on the lane, waiting for the peer's completion signals; the peer started it but has not finished it/);
  });
  it('other waits: the last call its word showed', () => {
    assert.match(timeout(3, 6n), /MoE exchange, round 1: waiting for the sender's counts; the peer got no further than call 6\)/);
  });
});

describe('error classes', () => {
  it('are exported from the package, each with its own code', () => {
    const classes = Object.entries(api).filter(([, v]) => typeof v === 'function' && v.prototype instanceof A2avError);
    const names = classes.map(([name]) => name);
    for (const name of ['KernelSourcesNotFoundError', 'PeerAccessError', 'RankExitedError', 'UnsupportedDeviceError', 'LibraryNotFoundError']) {
      assert.ok(names.includes(name), `${name} exported`);
    }
    const samples: A2avError[] = [
      new api.KernelSourcesNotFoundError(['/a/kernels']),
      new api.PeerAccessError(0, 1),
      new api.RankExitedError(2, 7),
      new api.UnsupportedDeviceError(3, 'unified addressing'),
    ];
    assert.deepEqual(samples.map((e) => e.code), ['A2AV_KERNELS_NOT_FOUND', 'A2AV_NO_PEER_ACCESS', 'A2AV_RANK_EXITED', 'A2AV_UNSUPPORTED_DEVICE']);
    assert.deepEqual(samples.map((e) => e.name), ['KernelSourcesNotFoundError', 'PeerAccessError', 'RankExitedError', 'UnsupportedDeviceError']);
  });

  it('a mismatch names the field that differs, with rank 0\'s value and the other rank\'s, and blames neither', () => {
    const at = { problem: 'mismatch' as const, rank: 1, peer: 0, needed: 2n, available: 1n, reportedBy: 3 };
    const said = (field: api.MismatchField, op: string, needed = 2n, available = 1n) => new api.SplitsError({ ...at, op, field, needed, available }).message;
    // The rule names the first rank that differs from rank 0: the odd one out is either of the two.
    const first = "(rank 1 is the first rank whose call differs from rank 0's; either may be the odd one out)";
    assert.equal(said('rowBytes', 'allToAllV', 16n, 8n), `rank 0 and rank 1 disagree: rowBytes 8 on rank 0, 16 on rank 1 ${first} (reported by rank 3, in its allToAllV)`);
    assert.equal(said('output', 'allToAllV2d', 5n, 4n), `rank 0 and rank 1 disagree: output symmetric buffer 4 on rank 0, 5 on rank 1 ${first} (reported by rank 3, in its allToAllV2d)`);
    assert.equal(said('kind', 'allToAllV2d', 3n, 2n), `rank 0 and rank 1 disagree: rank 0's call is an allToAllV2d, rank 1's an allToAllV2dOffset (a plan's exchange and moves are its operation's) ${first} (reported by rank 3, in its allToAllV2d)`);
    assert.equal(said('expertsPerRank', 'allToAllV2d', 16n, 8n), `rank 0 and rank 1 disagree: expertsPerRank 8 on rank 0, 16 on rank 1 ${first} (reported by rank 3, in its allToAllV2d)`);
    assert.equal(said('majorAlign', 'allToAllV2d'), `rank 0 and rank 1 disagree: majorAlign 1 on rank 0, 2 on rank 1 ${first} (reported by rank 3, in its allToAllV2d)`);
    assert.equal(said('count', 'allReduce', 7n, 9n), `rank 0 and rank 1 disagree: count 9 on rank 0, 7 on rank 1 ${first} (reported by rank 3, in its allReduce)`);
    assert.equal(said('dtype', 'allReduce'), `rank 0 and rank 1 disagree: dtype f32 on rank 0, bf16 on rank 1 ${first} (reported by rank 3, in its allReduce)`);
    assert.equal(said('dtype', 'allReduce', 9n, 1n), `rank 0 and rank 1 disagree: dtype f32 on rank 0, code 9 on rank 1 ${first} (reported by rank 3, in its allReduce)`);
    assert.equal(said('plan', 'allToAllV2d', 0n, 5n), `rank 0 and rank 1 disagree: rank 0 made a move of the exchange plan made by call 5 on the lane, rank 1 a direct call ${first} (reported by rank 3, in its allToAllV2d)`);
    assert.equal(new api.SplitsError({ ...at, field: 'count' }).field, 'count');
  });

  it('a mismatch found in a plan\'s exchange or move names that call, not the direct one', () => {
    // What the backends name these calls (cuda, cpu and nccl alike), as their status records are decoded.
    const entry = { code: StatusCode.mismatch, rank: 1, peer: 0, needed: 9n, available: 8n, reportedBy: 0, expert: MismatchCode.rowBytes };
    const move = entryError(entry, 1000, 'a move of the exchange plan of allToAllV2d on lane 0, call 7') as api.SplitsError;
    assert.deepEqual([move.op, move.call, move.field], ['allToAllV2d', 'plan.move', 'rowBytes']);
    assert.match(move.message, /\(reported by rank 0, in its plan.move of a planAllToAllV2d plan\)$/);
    const made = entryError({ ...entry, expert: MismatchCode.plan, needed: -1n, available: 0n }, 1000, 'the exchange plan of allToAllV2dOffset on lane 1') as api.SplitsError;
    assert.deepEqual([made.op, made.call], ['allToAllV2dOffset', 'planAllToAllV2dOffset']);
    assert.match(made.message, /rank 0 made a direct call, rank 1 an exchange plan's exchange .* \(reported by rank 0, in its planAllToAllV2dOffset\)$/);
    const oneD = entryError(entry, 1000, 'a move of the exchange plan of allToAllV on lane 0') as api.SplitsError;
    assert.match(oneD.message, /in its plan.move of a planAllToAllV plan\)$/);
    // Another kind on rank 1 while rank 0 moves a dispatch plan: both sides by their operation, as
    // every rank reads them (the same text on each), the reporting rank's own call last.
    const kinds = entryError({ ...entry, expert: MismatchCode.kind, needed: 3n, available: 2n }, 1000, 'a move of the exchange plan of allToAllV2d on lane 0') as api.SplitsError;
    assert.match(kinds.message, /^rank 0 and rank 1 disagree: rank 0's call is an allToAllV2d, rank 1's an allToAllV2dOffset \(a plan's exchange and moves are its operation's\) .*\(reported by rank 0, in its plan.move of a planAllToAllV2d plan\)$/);
    const peerSide = entryError({ ...entry, expert: MismatchCode.kind, needed: 3n, available: 2n, reportedBy: 2 }, 1000, 'allToAllV2d on lane 0, call 3') as api.SplitsError;
    assert.equal(peerSide.message.split(' (reported by')[0], kinds.message.split(' (reported by')[0], 'every rank gives the same account of the two calls');
    const direct = entryError(entry, 1000, 'allToAllV2d on lane 0, call 3') as api.SplitsError;
    assert.deepEqual([direct.op, direct.call], ['allToAllV2d', undefined]);
    assert.match(direct.message, /\(reported by rank 0, in its allToAllV2d\)$/);
  });

  it('a mismatch with no field named says what the operation compares', () => {
    const at = { problem: 'mismatch' as const, rank: 1, peer: 0, needed: 2n, available: 1n, reportedBy: 0 };
    assert.equal(
      new api.SplitsError({ ...at, op: 'allReduce' }).message,
      "rank 0 and rank 1 disagree (count, element type or output buffer differ: 1 on rank 0, 2 on rank 1) (rank 1 is the first rank whose call differs from rank 0's; either may be the odd one out) (reported by rank 0, in its allReduce)",
    );
    assert.match(new api.SplitsError({ ...at, op: 'allToAllV2d' }).message, /^rank 0 and rank 1 disagree \(call kind, row size, output buffer, experts or alignment differ: 1 on rank 0, 2 on rank 1\)/);
    assert.match(new api.SplitsError(at).message, /^rank 0 and rank 1 disagree/);
  });

  it('one row is one row', () => {
    const one = new api.SplitsError({ problem: 'output-overflow', rank: 1, peer: 0, expert: -1, needed: 1n, available: 0n, reportedBy: 0 });
    assert.equal(one.message, 'rank 1: receives 1 row (passing the output at peer 0) but the output holds 0 (reported by rank 0)');
  });

  it('a combine chunk at a negative offset or past the input is named as a chunk, not as rows needed', () => {
    const at = { problem: 'input-overflow' as const, rank: 1, peer: 0, expert: 2, available: 256n, reportedBy: 0, op: 'allToAllV2dOffset' };
    assert.equal(
      new api.SplitsError({ ...at, needed: -5n }).message,
      'rank 1: the chunk for peer 0, expert 2 starts at offset -5, before the input (offsets count rows from its start) (reported by rank 0)',
    );
    assert.equal(
      new api.SplitsError({ ...at, needed: 300n }).message,
      "rank 1: the chunk for peer 0, expert 2 ends at row 300 (its offset + rows), past the input's 256 rows (every chunk, an empty one too, must lie within the input) (reported by rank 0)",
    );
    // Offset + rows past int64: the chunk's end, not a sum of splits, is what overflowed.
    assert.match(new api.SplitsError({ ...at, needed: 0x7fffffffffffffffn }).message, /^rank 1: the chunk for peer 0, expert 2 ends past row 2\^63-1 \(its offset \+ rows overflow int64\)/);
    // The other calls' input-overflow is still a sum of splits.
    assert.equal(new api.SplitsError({ ...at, op: 'allToAllV2d', needed: 300n }).message, 'rank 1: splits need 300 input rows but the input holds 256 (peer 0, expert 2) (reported by rank 0)');
    // Past 2^32 rows the likeliest cause is int32 splits, two of which read as one int64.
    assert.equal(
      new api.SplitsError({ ...at, op: 'allToAllV2d', needed: (4n << 32n) | 3n }).message,
      'rank 1: splits need 17179869187 input rows but the input holds 256 (peer 0, expert 2); splits are read as int64 (BigInt64Array): int32 splits read two at a time (reported by rank 0)',
    );
  });

  it('a bad expert id names its entry and the ids allowed, and has no cause (the exchange saw only a stand-in split)', () => {
    // The exchange's refusal of rank 1's topkIdx entry 9 (token 1, k 1 of 8): a negative count -1 - 9.
    const refused = new api.SplitsError({ problem: 'negative', rank: 1, peer: 0, expert: 0, needed: -10n, available: 0n, reportedBy: 0 });
    const err = dispatchError(refused, group);
    assert.ok(err instanceof api.MoeRoutingError, String(err));
    assert.deepEqual([err.problem, err.rank, err.token, err.k], ['expert-id', 1, 1, 1]);
    assert.equal(err.message, "rank 1: MoE dispatch: topkIdx[1][1] is neither -1 nor an expert id of the job (expected -1 or 0..255); ids are read as int64 unless dispatch is given topkIdxType: 'int32' (reported by rank 0); nothing was written");
    assert.equal(err.cause, undefined);
  });

  it('a refused device token count names the count and what the call takes on its rank, and where to find them on the others', () => {
    const refused = new api.SplitsError({ problem: 'negative', rank: 1, peer: 0, expert: 0, needed: -(2n ** 40n), available: 0n, reportedBy: 1 });
    const facts = (count: bigint | undefined, limit: TokenLimit = 'maxTokensPerRank', tokenCap = 64): DispatchFacts => ({ rank: 1, deviceCount: true, tokenCap, limit, readCount: () => count });
    const own = dispatchError(refused, group, facts(65n)) as api.MoeRoutingError;
    assert.ok(own instanceof api.MoeRoutingError, String(own));
    assert.deepEqual([own.problem, own.rank, own.numTokens, own.capacity, own.cause], ['token-count', 1, 65n, 64n, undefined]);
    assert.equal(own.message, 'rank 1: MoE dispatch: the device token count (numTokens) is 65, more than 64: its call takes 0..64 tokens (maxTokensPerRank 64) (reported by rank 1); nothing was written');
    const negative = dispatchError(refused, group, facts(-3n, 'x', 10)) as api.MoeRoutingError;
    assert.deepEqual([negative.numTokens, negative.capacity], [-3n, 10n]);
    assert.match(negative.message, /is -3, negative: its call takes 0\.\.10 tokens \(x holds 10 tokens\)/);
    // A count back in range was written since the call: not named, the capacity still is.
    const changed = dispatchError(refused, group, facts(5n)) as api.MoeRoutingError;
    assert.deepEqual([changed.numTokens, changed.capacity], [undefined, 64n]);
    assert.match(changed.message, /is negative or more than 64: its call takes 0\.\.64 tokens/);
    // A peer of rank 1: neither is known there.
    const fromPeer = dispatchError(new api.SplitsError({ ...refused, reportedBy: 0 }), group, { ...facts(undefined), rank: 0 }) as api.MoeRoutingError;
    assert.deepEqual([fromPeer.rank, fromPeer.numTokens, fromPeer.capacity], [1, undefined, undefined]);
    assert.equal(fromPeer.message, "rank 1: MoE dispatch: the device token count (numTokens) is negative or more than its call takes (at most maxTokensPerRank, 64); rank 1's own error names the count and what its call takes (reported by rank 0); nothing was written");
  });

  it('a compact capacity refusal\'s cause names no expert: the exchange\'s one bucket a rank is no expert of the job', () => {
    const refused = new api.SplitsError({ problem: 'output-overflow', rank: 2, peer: 1, expert: 0, needed: 9n, available: 8n, reportedBy: 0 });
    const compact = dispatchError(refused, { ...group, layout: 'compact' }) as api.MoeCapacityError;
    assert.ok(compact instanceof api.MoeCapacityError && compact.cause instanceof api.SplitsError, String(compact));
    assert.deepEqual([compact.expert, compact.cause.expert, compact.cause.rank, compact.cause.peer], [-1, -1, 2, 1]);
    assert.doesNotMatch(compact.cause.message, /expert/);
    const expanded = dispatchError(refused, group) as api.MoeCapacityError;
    assert.equal(expanded.cause, refused);
    // The expanded count is the layout's, padding included; the compact one is the rows that travel.
    assert.match(expanded.message, /: its layout takes 9 rows \(every local expert's block, with the alignment padding\), recvX holds 8 \(reported by rank 0\)/);
    assert.match(compact.message, /: the rank would receive 9 rows, recvX holds 8 /);
  });

  it('a token combine whose ranks differ names both ranks and says that y must be of one kind on every rank', () => {
    const refused = new api.SplitsError({ problem: 'mismatch', rank: 2, peer: 0, needed: 7n, available: 5n, reportedBy: 1, op: 'allToAllV2dOffset' });
    const err = combineError(refused);
    assert.ok(err instanceof api.UsageError, String(err));
    assert.match((err as Error).message, /^rank 0 and rank 2 made different combines: pass y of the same kind on every rank/);
    assert.match((err as Error).message, /rank 0 and rank 2 disagree/);
    const other = new api.SplitsError({ problem: 'output-overflow', rank: 2, peer: 0, needed: 7n, available: 5n, reportedBy: 1 });
    assert.equal(combineError(other), other);
  });

  it('the combine of a refused dispatch\'s route carries that dispatch\'s error, not the stand-in counts of rank 0', () => {
    // Every rank's route of a refused dispatch holds -1 counts: the exchange names rank 0's first.
    const refused = new api.SplitsError({ problem: 'negative', rank: 0, peer: 0, expert: 0, needed: -1n, available: 0n, reportedBy: 2 });
    const badId = dispatchError(new api.SplitsError({ problem: 'negative', rank: 1, peer: 0, expert: 0, needed: -10n, available: 0n, reportedBy: 2 }), group) as api.MoeRoutingError;
    const err = combineError(refused, () => badId) as api.MoeRoutingError;
    assert.ok(err instanceof api.MoeRoutingError, String(err));
    assert.deepEqual([err.problem, err.rank, err.token, err.k, err.reportedBy, err.cause], ['route-refused', 1, 1, 1, 2, badId]);
    assert.equal(err.message, `MoE combine of a route whose dispatch was refused (reported by rank 2); nothing was written. The dispatch's error: MoeRoutingError: ${badId.message}`);
    const full = new api.MoeCapacityError({ rank: 3, expert: 7, localExpert: 3, needed: 9n, capacity: 8n, reportedBy: 2 }, refused);
    const past = combineError(refused, () => full) as api.MoeRoutingError;
    assert.deepEqual([past.rank, past.token, past.k, past.cause], [3, -1, -1, full]);
    // A dispatch whose handle cannot say (one captured in a graph): no rank named, no cause.
    const unknown = combineError(refused, () => new api.UsageError('a captured call has no outcome of its own')) as api.MoeRoutingError;
    assert.deepEqual([unknown.problem, unknown.rank, unknown.cause], ['route-refused', -1, undefined]);
    assert.match(unknown.message, /nothing was written\. That dispatch's handle \(or, for a dispatch in a graph, its replay's\) says why$/);
  });

  it('keep their class and fields across threads', () => {
    const back = reviveError(serializeError(new PeerAccessError(0, 1)));
    assert.ok(back instanceof PeerAccessError);
    assert.equal((back as PeerAccessError).peer, 1);
    assert.match(back.message, /GPU 0 cannot access GPU 1 \(no P2P path\)/);
  });

  it('JavaScript\'s own error classes come back as themselves; a class of the rank\'s own code as its nearest built-in, keeping its name', () => {
    for (const err of [new RangeError('x'), new TypeError('y'), new SyntaxError('z'), new Error('w')]) {
      const back = reviveError(serializeError(err));
      assert.equal(Object.getPrototypeOf(back), Object.getPrototypeOf(err), err.name);
      assert.deepEqual([back.name, back.message], [err.name, err.message]);
    }
    class OwnError extends RangeError {
      override name = 'OwnError';
    }
    const own = reviveError(serializeError(new OwnError('v')));
    assert.ok(own instanceof RangeError);
    assert.equal(own.name, 'OwnError');
  });

  it('every exported error class comes back as itself across threads, the MoE group\'s too', () => {
    const capacity = new api.MoeCapacityError({ rank: 1, expert: 300, localExpert: 44, needed: 70n, capacity: 64n, reportedBy: 0 }, Object.create(api.SplitsError.prototype) as api.SplitsError);
    const back = reviveError(serializeError(capacity));
    assert.ok(back instanceof api.MoeCapacityError, back.constructor.name);
    assert.deepEqual([(back as api.MoeCapacityError).expert, (back as api.MoeCapacityError).needed], [300, 70n]);
    const exported = Object.entries(api).filter(([, v]) => typeof v === 'function' && v.prototype instanceof A2avError);
    for (const [name, cls] of exported) {
      const fake = Object.create((cls as { prototype: object }).prototype) as Error;
      Object.defineProperty(fake, 'message', { value: `a ${name}` });
      assert.ok(reviveError(serializeError(fake)) instanceof (cls as unknown as new () => Error), `${name} revived as ${name}`);
    }
  });

  it('a rank thread that exits without returning rejects runRanks with RankExitedError', async () => {
    const err = (await runRanks({ backend: 'cpu', ranks: 2 }, new URL('./fixtures/exit-rank.js', import.meta.url), 'exits', { code: 3 }).then(
      () => assert.fail('expected a rejection'),
      (e: unknown) => e,
    )) as RankFailure & RankExitedError;
    assert.ok(err instanceof RankExitedError, String(err));
    assert.equal(err.code, 'A2AV_RANK_EXITED');
    assert.equal(err.exitCode, 3);
    assert.equal(err.rank, err.failedRank);
    assert.match(err.message, /^rank [01] failed: thread exited with code 3 before returning$/);
  });
});

describe('LibraryNotFoundError', () => {
  const spec = {
    name: 'libexample (a test library)',
    files: ['liba2av-missing.so.1'],
    folders: ['/nonexistent/a2av-a', '/nonexistent/a2av-b'],
    overrideEnv: 'A2AV_TEST_MISSING_LIB',
  };
  const caught = (s: Parameters<typeof loadLibrary>[0], override?: string): LibraryNotFoundError => {
    if (override !== undefined) process.env.A2AV_TEST_MISSING_LIB = override;
    try {
      loadLibrary(s);
    } catch (err) {
      return err as LibraryNotFoundError;
    } finally {
      delete process.env.A2AV_TEST_MISSING_LIB;
    }
    return assert.fail('the library loaded');
  };

  it('says the way out first, then every place searched on a line of its own', () => {
    const err = caught({ ...spec, instead: 'the cpu backend (--backend cpu)' });
    assert.ok(err instanceof LibraryNotFoundError);
    assert.equal(err.code, 'A2AV_LIBRARY_NOT_FOUND');
    assert.equal(err.overrideEnv, 'A2AV_TEST_MISSING_LIB');
    const searched = [
      'liba2av-missing.so.1',
      '/nonexistent/a2av-a/liba2av-missing.so.1',
      '/nonexistent/a2av-b/liba2av-missing.so.1',
    ];
    assert.deepEqual(err.searched, searched);
    assert.deepEqual(err.message.split('\n'), [
      "libexample (a test library) not found: use the cpu backend (--backend cpu), or set A2AV_TEST_MISSING_LIB to the library's path.",
      'searched:',
      "  liba2av-missing.so.1 (the loader's search path)",
      '  /nonexistent/a2av-a/liba2av-missing.so.1',
      '  /nonexistent/a2av-b/liba2av-missing.so.1',
    ]);
    assert.ok(err.cause instanceof Error, "the loader's own error is the cause");
  });

  it('a file the variable names is the only one tried: a missing one is said, never passed over for another', () => {
    const err = caught({ ...spec, instead: 'the cpu backend (--backend cpu)' }, '/nonexistent/override/liba2av-missing.so.1');
    assert.deepEqual(err.message.split('\n'), [
      'libexample (a test library) not found: use the cpu backend (--backend cpu), or correct A2AV_TEST_MISSING_LIB=/nonexistent/override/liba2av-missing.so.1 (it alone is tried), or unset it to search the usual places.',
      'searched:',
      '  /nonexistent/override/liba2av-missing.so.1 (A2AV_TEST_MISSING_LIB: no such file)',
    ]);
  });

  it('names why the file the variable gives does not load, beside it', () => {
    process.env.A2AV_TEST_MISSING_LIB = '/etc/passwd';
    try {
      assert.throws(() => loadLibrary(spec), (err: unknown) => err instanceof LibraryNotFoundError && /^ {2}\/etc\/passwd \(A2AV_TEST_MISSING_LIB: .+\)$/m.test(err.message));
    } finally {
      delete process.env.A2AV_TEST_MISSING_LIB;
    }
  });

  it('offers no other backend for a library that every backend needs', () => {
    const first = caught(spec).message.split('\n')[0];
    assert.equal(first, "libexample (a test library) not found: set A2AV_TEST_MISSING_LIB to the library's path.");
  });

  it("libcuda's absence names --backend cpu and A2AV_LIBCUDA in one short line", (t) => {
    const why = cudaUnavailableReason();
    if (why === undefined || !why.includes('not found')) return t.skip(`libcuda is present here (${why ?? 'a GPU is visible'})`);
    assert.match(why, /^libcuda .* not found: use the cpu backend \(backend 'cpu'; --backend cpu on the command line\), or set A2AV_LIBCUDA to the library's path\.$/);
  });
});
