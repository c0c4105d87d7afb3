// One table of several backends' sweeps over the same sizes: every row names its backend, and where
// one of the sweeps ran on nccl, the others' rows say how they compare with NCCL at that size.
import type { BenchResult, BenchRow } from './table.js';

/** Rows by size, then in the order of `results`; `vsNccl` = NCCL's time / the row's time. */
export function compareBackends(results: readonly BenchResult[]): BenchResult {
  if (results.length === 0) throw new RangeError('compareBackends: no results');
  const nccl = results.find((r) => r.backend === 'nccl');
  const ncclUs = new Map((nccl?.rows ?? []).map((r) => [r.bytes, r.timeUs]));
  // Memory may lower one sweep's largest size more than another's: keep every size any of them ran.
  const sizes = [...new Set(results.flatMap((r) => r.rows.map((row) => row.bytes)))].sort((a, b) => a - b);
  const rows: BenchRow[] = [];
  for (const bytes of sizes) {
    for (const result of results) {
      const row = result.rows.find((r) => r.bytes === bytes);
      if (row === undefined) continue;
      const out: BenchRow = { backend: result.backend, ...row };
      const base = ncclUs.get(bytes);
      if (result !== nccl && base !== undefined) out.vsNccl = base / row.timeUs;
      rows.push(out);
    }
  }
  const devices = [...new Set(results.map((r) => r.device))].join(' / ');
  const notes = results.flatMap((r) => r.notes ?? []);
  return { ...results[0], backend: results.map((r) => r.backend).join(','), device: devices, ...(notes.length > 0 ? { notes } : {}), rows };
}
