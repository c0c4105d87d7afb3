// Comm.copy with offsets (the benchmark's references copy a rank's chunks where they sit): the bytes
// land where asked and nothing around them moves; a range past a buffer, or overlapping its own
// source, is refused with nothing moved. The same on every backend.
import type { Comm } from '../../src/backends/backend.js';
import { expectUsageError } from './expect.js';
import { patternBytes, Rng } from './reference.js';

export interface CopyOffsetsArg {
  seed: number;
}

export async function copyOffsets(comm: Comm, arg: CopyOffsetsArg): Promise<number> {
  const N = 4099; // odd: no copy is a whole number of words
  const rng = new Rng(arg.seed, 7000, comm.rank);
  const a = comm.alloc(N);
  const b = comm.alloc(N);
  const host = { a: patternBytes(rng.next(), 0, N), b: patternBytes(rng.next(), 0, N) };
  comm.write(a, host.a);
  comm.write(b, host.b);
  const stream = comm.lane(0).stream;
  const check = (label: string): void => {
    comm.record(stream).wait();
    for (const [name, buf] of [['a', a], ['b', b]] as const) {
      const got = comm.read(buf, 0, N);
      const want = host[name];
      const at = got.findIndex((v, i) => v !== want[i]);
      if (at >= 0) throw new Error(`rank ${comm.rank}: ${label}: buffer ${name} byte ${at} is ${got[at]}, expected ${want[at]}`);
    }
  };
  let checked = 0;
  // Across buffers, then within one (ranges apart), at random offsets and at the edges.
  const moves: [typeof a, typeof a, number, number, number][] = [
    [b, a, N, 0, 0],
    [b, a, 2000, 17, 1000],
    [b, a, 5, N - 5, 3],
    [b, a, 0, N, N],
    [a, a, 100, 300, 0],
  ];
  for (let i = 0; i < 4; i++) {
    const bytes = 1 + rng.int(N - 1);
    moves.push([b, a, bytes, rng.int(N - bytes + 1), rng.int(N - bytes + 1)]);
  }
  for (const [dst, src, bytes, dstOffset, srcOffset] of moves) {
    comm.copy(dst, src, bytes, stream, { dstOffset, srcOffset });
    const [to, from] = [dst === a ? host.a : host.b, src === a ? host.a : host.b];
    to.set(from.slice(srcOffset, srcOffset + bytes), dstOffset);
    check(`copy of ${bytes} bytes from ${srcOffset} to ${dstOffset}`);
    checked++;
  }
  // Refused, nothing moved.
  const refused: [string, () => void, RegExp][] = [
    ['past the destination', () => comm.copy(b, a, 10, stream, { dstOffset: N - 9 }), /copy destination of 10 bytes at offset 4090 is outside a 4099-byte buffer/],
    ['past the source', () => comm.copy(b, a, 10, stream, { srcOffset: N }), /copy source of 10 bytes at offset 4099 is outside/],
    ['a negative offset', () => comm.copy(b, a, 10, stream, { srcOffset: -1 }), /offset must be a non-negative integer, got -1/],
    ['overlapping ranges of one buffer', () => comm.copy(a, a, 100, stream, { dstOffset: 50 }), /overlapping ranges/],
    // The count is the copy's, not the destination's.
    ['4.5 bytes', () => comm.copy(b, a, 4.5, stream), /^rank \d+: copy: byte count must be a non-negative integer, got 4\.5$/],
  ];
  for (const [label, call, message] of refused) {
    expectUsageError(call, `rank ${comm.rank}: copy ${label}`, message);
    check(`after the refused copy ${label}`);
    checked++;
  }
  return checked;
}
