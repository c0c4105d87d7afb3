// Rank program of scripts/probe/moe-timing.mjs.
export async function timing(comm, arg) {
  const W = comm.worldSize;
  const out = [];
  for (const { E, rowsPer, rb, align = 1 } of arg.configs) {
    const bytes = W * E * rowsPer * rb;
    const input = comm.alloc(bytes);
    const output = await comm.allocSymmetric(W * E * Math.max(rowsPer, align) * rb + align * E * rb);
    const back = await comm.allocSymmetric(bytes);
    const inSplits = comm.alloc(8 * W * E), so = comm.alloc(16 * W * E), so2 = comm.alloc(16 * W * E);
    const in1 = comm.alloc(8 * W), so1 = comm.alloc(16 * W);
    comm.write(inSplits, BigInt64Array.from({ length: W * E }, () => BigInt(rowsPer)));
    comm.write(in1, BigInt64Array.from({ length: W }, () => BigInt(E * rowsPer)));
    const s = comm.lane(0).stream;
    const dispatch = () => comm.allToAllV2d({ input, output, inSplits, outSplitsOffsets: so, expertsPerRank: E, rowBytes: rb, majorAlign: align, stream: s });
    const combine = () => comm.allToAllV2dOffset({ input: output, output: back, inSplitsOffsets: so, outSplitsOffsets: so2, expertsPerRank: E, rowBytes: rb, stream: s });
    const oneD = () => comm.allToAllV({ input, output, inSplits: in1, outSplitsOffsets: so1, rowBytes: rb, stream: s });
    for (const fn of [dispatch, combine, oneD]) fn().wait();
    const iters = Math.max(5, Math.min(2000, Math.floor(2e9 / bytes)));
    const time = (fn) => {
      const xs = [];
      for (let k = 0; k < 5; k++) xs.push((comm.timeLoop(s, iters, fn, 2) * 1000) / iters);
      return xs.sort((a, b) => a - b)[2];
    };
    const r = { E, rowsPer, rb, align, MiB: bytes / 2 ** 20, d: time(dispatch), c: time(combine), one: time(oneD) };
    if (bytes <= 4 << 20) {
      for (const [key, fn] of [['dg', dispatch], ['cg', combine], ['oneg', oneD]]) {
        const graph = comm.capture(s, () => {
          for (let k = 0; k < 20; k++) fn();
        });
        r[key] = time(() => graph.launch(s)) / 20;
        graph.close();
      }
    }
    out.push(r);
    for (const b of [input, output, back, inSplits, so, so2, in1, so1]) comm.free(b);
  }
  return out;
}
