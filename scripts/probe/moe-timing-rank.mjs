// Rank program of scripts/probe/moe-timing.mjs.
export async function timing(comm, arg) {
  const W = comm.worldSize;
  const out = [];
  for (const { E, rowsPer, rb, align = 1, maxBlocks } of arg.configs) {
    const bytes = W * E * rowsPer * rb;
    const input = comm.alloc(bytes);
    const output = await comm.allocSymmetric(W * E * Math.max(rowsPer, align) * rb + align * E * rb);
    const back = await comm.allocSymmetric(bytes);
    const inSplits = comm.alloc(8 * W * E), so = comm.alloc(16 * W * E), so2 = comm.alloc(16 * W * E);
    const in1 = comm.alloc(8 * W), so1 = comm.alloc(16 * W);
    comm.write(inSplits, BigInt64Array.from({ length: W * E }, () => BigInt(rowsPer)));
    comm.write(in1, BigInt64Array.from({ length: W }, () => BigInt(E * rowsPer)));
    const s = comm.lane(0).stream;
    const dispatch = () => comm.allToAllV2d({ input, output, inSplits, outSplitsOffsets: so, expertsPerRank: E, rowBytes: rb, majorAlign: align, stream: s, maxBlocks });
    const combine = () => comm.allToAllV2dOffset({ input: output, output: back, inSplitsOffsets: so, outSplitsOffsets: so2, expertsPerRank: E, rowBytes: rb, stream: s, maxBlocks });
    const oneD = () => comm.allToAllV({ input, output, inSplits: in1, outSplitsOffsets: so1, rowBytes: rb, stream: s });
    // A move along a plan of the same routing (x_check + x_copy + x_done): the call less its exchange.
    const planArgs = { inSplits, outSplitsOffsets: so, expertsPerRank: E, majorAlign: align, inputRows: bytes / rb, outputRows: output.bytes / rb, stream: s };
    const built = comm.planAllToAllV2d(planArgs);
    built.ready.wait();
    const move = () => built.move({ input, output, rowBytes: rb, stream: s });
    for (const fn of [dispatch, combine, oneD, move]) fn().wait();
    const iters = Number(process.env.A2AV_PROBE_ITERS ?? Math.max(5, Math.min(2000, Math.floor(2e9 / bytes))));
    // A2AV_PROBE_ONLY=dg,cg: only these timings (d c one mv eager; dg cg oneg mvg in graphs).
    const only = process.env.A2AV_PROBE_ONLY?.split(',');
    const wanted = (key) => !only || only.includes(key);
    const time = (fn) => {
      const xs = [];
      for (let k = 0; k < 5; k++) xs.push((comm.timeLoop(s, iters, fn, 2) * 1000) / iters);
      return xs.sort((a, b) => a - b)[2];
    };
    const r = { E, rowsPer, rb, align, MiB: bytes / 2 ** 20 };
    for (const [key, fn] of [['d', dispatch], ['c', combine], ['one', oneD], ['mv', move]]) if (wanted(key)) r[key] = time(fn);
    if (bytes <= 4 << 20) {
      for (const [key, fn] of [['dg', dispatch], ['cg', combine], ['oneg', oneD], ['mvg', move]]) {
        if (!wanted(key)) continue;
        const graph = comm.capture(s, () => {
          for (let k = 0; k < 20; k++) fn();
        });
        r[key] = time(() => graph.launch(s)) / 20;
        graph.close();
      }
    }
    built.close();
    out.push(r);
    for (const b of [input, output, back, inSplits, so, so2, in1, so1]) comm.free(b);
  }
  return out;
}
