// Rank program of scripts/probe/run.mjs: times one size and plan at a time (see run.mjs).
export async function perf(comm, { sizes, rowBytes, plans, zero }) {
  const W = comm.worldSize, me = comm.rank;
  const maxBytes = Math.max(...sizes);
  const input = comm.alloc(maxBytes);
  const output = await comm.allocSymmetric(maxBytes);
  const inSplits = comm.alloc(8 * W), oso = comm.alloc(16 * W);
  const refBytes = Math.min(maxBytes * comm.ranksOnDevice, 1 << 30);
  const lead = me % comm.ranksOnDevice === 0;
  const refSrc = lead ? comm.alloc(refBytes) : undefined, refDst = lead ? comm.alloc(refBytes) : undefined;
  const lane = comm.lane(0), s = lane.stream;
  const rows = [];
  for (const S of sizes) {
    const nrows = Math.floor(S / rowBytes);
    const sp = new BigInt64Array(W); for (let r = 0; r < W; r++) sp[r] = zero ? 0n : BigInt(Math.floor(nrows / W) + (r < nrows % W ? 1 : 0));
    comm.write(inSplits, sp);
    const iters = Math.max(5, Math.min(2000, Math.floor(2e9 / (S * W + 1e6))));
    for (const plan of plans) {
      const args = { input, output, inSplits, outSplitsOffsets: oso, rowBytes, lane, plan: plan ?? undefined, sizeHintBytes: S };
      const one = () => comm.allToAllV(args);
      await comm.barrier(); comm.timeLoop(s, 3, one); await comm.barrier();
      const eager = []; for (let k = 0; k < 3; k++) { await comm.barrier(); eager.push(comm.timeLoop(s, iters, one, 1) / iters); }
      const per = Math.min(100, iters);
      const g = comm.capture(s, () => { for (let k = 0; k < per; k++) one(); });
      const reps = Math.max(1, Math.ceil(iters / per));
      const graph = []; for (let k = 0; k < 3; k++) { await comm.barrier(); graph.push(comm.timeLoop(s, reps, () => g.launch(s), 1) / (reps * per)); }
      // Wall time (host clock) over >= 1000 back-to-back calls: graph replays, then one host wait.
      await comm.barrier();
      const t0 = performance.now();
      const wallReps = Math.ceil(1000 / per);
      for (let k = 0; k < wallReps; k++) g.launch(s);
      s.synchronize();
      const wallUs = ((performance.now() - t0) * 1e3) / (wallReps * per);
      g.close();
      const wall0 = performance.now(); await comm.barrier();
      let ref = 0;
      if (lead) {
        const total = S * comm.ranksOnDevice;
        const refOnce = () => { for (let off = 0; off < total; off += refBytes) comm.copy(refDst, refSrc, Math.min(refBytes, total - off)); };
        comm.timeLoop(s, 2, refOnce);
        const rs = []; for (let k = 0; k < 3; k++) rs.push(comm.timeLoop(s, Math.max(3, iters >> 1), refOnce) / Math.max(3, iters >> 1));
        ref = rs.sort((a, b) => a - b)[1];
      }
      await comm.barrier();
      const e = eager.sort((a, b) => a - b)[1], gr = graph.sort((a, b) => a - b)[1];
      rows.push({ W, S, zero: !!zero, plan: plan ? `${plan.blocks}x${plan.threads}` : 'default', eagerUs: +(e * 1e3).toFixed(2), graphUs: +(gr * 1e3).toFixed(2), wallUs: +wallUs.toFixed(2), refUs: +(ref * 1e3).toFixed(2), algbw: +(S / (Math.min(e, gr) * 1e6)).toFixed(1), ratio: ref ? +(ref / Math.min(e, gr)).toFixed(3) : 0 });
    }
  }
  return rows;
}
