// Rank program of scripts/probe/instantiate-wait.mjs.
export async function probe(comm, { n, E, rb, kind, warm, peers = 'eager', prior = false }) {
  const W = comm.worldSize, me = comm.rank;
  const rows = W * E * n, bytes = rows * rb;
  const input = comm.alloc(bytes), mid = await comm.allocSymmetric(bytes + 8 * E * W * rb), back = await comm.allocSymmetric(bytes);
  const words = (k) => comm.alloc(8 * k);
  const inSplits = words(W * E), midSo = words(2 * W * E), backSo = words(2 * W * E), in1d = words(W), so1d = words(2 * W);
  comm.write(inSplits, new BigInt64Array(W * E).fill(BigInt(n)));
  comm.write(in1d, new BigInt64Array(W).fill(BigInt(E * n)));
  const lane = comm.lane(0), s = lane.stream;
  const common = { rowBytes: rb, lane, sizeHintBytes: bytes };
  const calls = {
    dispatch: () => comm.allToAllV2d({ ...common, input, output: mid, inSplits, outSplitsOffsets: midSo, expertsPerRank: E, majorAlign: 8 }),
    combine: () => comm.allToAllV2dOffset({ ...common, input: mid, output: back, inSplitsOffsets: midSo, outSplitsOffsets: backSo, expertsPerRank: E }),
    '1d-there': () => comm.allToAllV({ ...common, input, output: mid, inSplits: in1d, outSplitsOffsets: so1d }),
    '1d-back': () => comm.allToAllV({ ...common, input: mid, output: back, inSplits: in1d, outSplitsOffsets: so1d }),
  };
  calls.dispatch().wait();
  if (warm) for (const k of ['combine', '1d-there', '1d-back']) calls[k]().wait();
  const held = [];
  if (prior) {
    // Every rank holds a replayed graph of a combine, as the bench does before its 1-D comparison.
    const g = comm.capture(s, () => void calls.combine());
    held.push(g);
    await comm.barrier();
    g.launch(s).wait();
  }
  await comm.barrier();
  let captureMs = 0;
  if (me === 0) {
    await new Promise((r) => setTimeout(r, 300));
    const t = performance.now();
    const replay = comm.capture(s, () => void calls[kind]());
    captureMs = performance.now() - t;
    calls[kind]().wait();
    replay.close();
  } else if (peers === 'graph') {
    const replay = comm.capture(s, () => void calls[kind]());
    replay.launch(s).wait();
    replay.close();
  } else {
    calls[kind]().wait();
  }
  await comm.barrier();
  for (const g of held) g.close();
  return { captureMs };
}
