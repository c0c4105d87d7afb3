// Rank program for "every call accounted for": each handle reports its own call and no other,
// whatever order its handles are waited in, or whether they are waited at all.
import type { Comm, Handle } from '../../src/backends/backend.js';
import { expectSplitsError, type ExpectedSplitsError } from './expect.js';
import { ConformanceError, Exchange } from './harness.js';
import { makeSplits, Rng, rowSum } from './reference.js';

const INT64_MAX = 0x7fffffffffffffffn;
/** Input and output capacity of every call, in rows (odd byte sizes on purpose). */
const IN_ROWS = 24;
const OUT_ROWS = 40;

export interface OutcomesArg {
  seed: number;
  /** Calls queued per round, every third one refused. */
  calls: number;
}

interface Queued {
  ex: Exchange;
  call: number;
  handle: Handle;
  /** The splits of a good call, or the error a refused one must throw. */
  S?: number[][];
  refusal?: ExpectedSplitsError;
}

/**
 * Rounds of `calls` calls queued back to back on one lane, each with its own buffers, every third
 * refused (a negative split, one row past the input, splits whose sum overflows int64). Round 0
 * waits the handles in order, round 1 in reverse, round 2 only every other one and some twice;
 * then every output is checked: good calls delivered, refused calls wrote nothing.
 */
export async function ownOutcomes(comm: Comm, arg: OutcomesArg): Promise<number> {
  const W = comm.worldSize;
  const me = comm.rank;
  const rng = new Rng(arg.seed, 0xe5);
  const rowBytes = rng.pick([1, 8, 13, 48]);
  const exchanges: Exchange[] = [];
  for (let i = 0; i < arg.calls; i++) {
    exchanges.push(await Exchange.create(comm, { inputBytes: IN_ROWS * rowBytes + rowBytes - 1, outputBytes: OUT_ROWS * rowBytes + rowBytes - 1 }));
  }
  let call = 6000;
  for (let round = 0; round < 3; round++) {
    const queued: Queued[] = exchanges.map((ex, i) => {
      const S = makeSplits(new Rng(arg.seed, ++call), W, 'random', 1);
      ex.prepare(arg.seed, call, S, rowBytes);
      if (i % 3 !== 1) return { ex, call, S, handle: ex.call(rowBytes) };
      const q = rng.int(W);
      const r0 = rng.int(W);
      const kind = (round + i) % 3;
      let refusal: ExpectedSplitsError;
      if (kind === 0) {
        S[q][r0] = -1 - rng.int(9);
        refusal = { problem: 'negative', rank: q, peer: r0, needed: S[q][r0], available: 0 };
        ex.writeSplits(S[me]);
      } else if (kind === 1) {
        S[q][r0] += IN_ROWS + 1 - rowSum(S, q);
        let sum = 0;
        refusal = { problem: 'input-overflow', rank: q, peer: S[q].findIndex((x) => (sum += x) > IN_ROWS), needed: IN_ROWS + 1, available: IN_ROWS };
        ex.writeSplits(S[me]);
      } else {
        // 2^62 + 2^62, or INT64_MAX + 1: the sum does not fit int64 and must not wrap.
        const big: bigint[] = S[q].map((x) => BigInt(x));
        const a = rng.int(W);
        const b = (a + 1) % W;
        if (W === 1) big[0] = INT64_MAX;
        else if (rng.int(2) === 0) [big[a], big[b]] = [1n << 62n, 1n << 62n];
        else [big[a], big[b]] = [INT64_MAX, 1n];
        let sum = 0n;
        refusal = { problem: 'input-overflow', rank: q, peer: big.findIndex((x) => (sum += x) > BigInt(IN_ROWS)), needed: INT64_MAX, available: IN_ROWS };
        if (me === q) comm.write(ex.inSplits, BigInt64Array.from(big));
      }
      return { ex, call, refusal, handle: ex.call(rowBytes) };
    });
    const order = round === 1 ? [...queued].reverse() : queued;
    for (const [k, c] of order.entries()) {
      if (round === 2 && k % 2 === 1) continue; // never waited
      const times = round === 2 && k % 4 === 0 ? 2 : 1;
      for (let t = 0; t < times; t++) {
        const label = `round ${round}, call ${queued.indexOf(c)} of ${queued.length}${t ? ', waited again' : ''}`;
        if (c.refusal) expectSplitsError(c.handle, c.refusal, me, label);
        else ownResult(c, label);
      }
    }
    // Some calls of round 2 were never waited: wait for everything queued on the lane instead.
    comm.record(comm.lane(0).stream).wait();
    for (const [i, c] of queued.entries()) {
      if (c.refusal) c.ex.verifyUntouched(`round ${round}, refused call ${i}`);
      else c.ex.verify(arg.seed, c.call, c.S!, rowBytes, `round ${round}, call ${i}`);
    }
  }
  return call - 6000;
}

/** A good call's handle must not throw, whichever calls around it were refused. */
function ownResult(c: Queued, label: string): void {
  try {
    c.handle.wait();
  } catch (err) {
    throw new ConformanceError(`${label}: a good call's handle threw ${(err as Error).name}: ${(err as Error).message}`, { cause: err });
  }
}
