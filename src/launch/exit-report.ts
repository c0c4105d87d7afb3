// What the launcher learns from its ranks' exit records (src/world/exit-record.ts): each rank gets
// its own file in a private directory of this node, read once the rank has exited. The rank that
// fails first is usually a victim: it timed out waiting for a rank that hung, and a hung rank may
// never exit or write anything. So the report names the ranks that the TimeoutErrors named.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { LAUNCH_DIR_PREFIX, readExitRecord, type ExitRecord } from '../world/exit-record.js';

/** This node's ranks' record files: one directory (owner only), removed with everything in it. */
export class ExitRecordDir {
  readonly #dir: string | undefined;

  constructor() {
    try {
      this.#dir = mkdtempSync(join(tmpdir(), LAUNCH_DIR_PREFIX));
    } catch {
      // No writable temp directory: the job still runs; the report just cannot name a hung rank.
      this.#dir = undefined;
    }
  }

  /** The file rank `rank` writes its record to; undefined when there is no directory. */
  pathFor(rank: number): string | undefined {
    return this.#dir === undefined ? undefined : join(this.#dir, `rank-${rank}.json`);
  }

  /** The records of `ranks` that left one. */
  read(ranks: Iterable<number>): Map<number, ExitRecord> {
    const records = new Map<number, ExitRecord>();
    for (const rank of ranks) {
      const path = this.pathFor(rank);
      const record = path === undefined ? undefined : readExitRecord(path);
      if (record !== undefined) records.set(rank, record);
    }
    return records;
  }

  remove(): void {
    if (this.#dir !== undefined) rmSync(this.#dir, { recursive: true, force: true });
  }
}

/**
 * Whom the ranks that timed out were waiting for, or undefined when none timed out. Survivors may
 * name different ranks (each names the first it waited for), so every named rank is listed, the
 * most-named first: "rank 1 stopped answering (named by ranks 0, 2 in TimeoutError)". A named rank
 * in `ended` (ranks that had exited with status 0) did not stop: it left while its peers still
 * waited for it, and is said so.
 */
export function describeTimeouts(records: ReadonlyMap<number, ExitRecord>, ended: ReadonlySet<number> = new Set(), failedFirst?: number): string | undefined {
  const namedBy = new Map<number, number[]>();
  const unnamed: number[] = [];
  for (const [rank, { missingRank }] of [...records].sort(([a], [b]) => a - b)) {
    if (missingRank === undefined) continue;
    if (missingRank < 0) unnamed.push(rank);
    else namedBy.set(missingRank, [...(namedBy.get(missingRank) ?? []), rank]);
  }
  const named = [...namedBy].sort(([a, byA], [b, byB]) => byB.length - byA.length || a - b);
  const parts: string[] = [];
  const left = named.filter(([missing]) => ended.has(missing));
  // The rank that failed first is said with its own error (waitedFor): it did not merely stop answering.
  const stopped = named.filter(([missing]) => !ended.has(missing) && missing !== failedFirst);
  for (const [missing, by] of left) parts.push(`rank ${missing} exited with status 0 while ${ranks(by)} still waited for it (named in TimeoutError)`);
  if (stopped.length === 1) {
    const [[missing, by]] = stopped as [[number, number[]]];
    parts.push(`rank ${missing} stopped answering (named by ${ranks(by)} in TimeoutError)`);
  } else if (stopped.length > 1) {
    const each = stopped.map(([missing, by]) => `rank ${missing} by ${ranks(by)}`).join('; ');
    parts.push(`ranks ${stopped.map(([missing]) => missing).join(', ')} stopped answering (named in TimeoutError: ${each})`);
  }
  if (unnamed.length > 0) parts.push(`${ranks(unnamed)} timed out waiting for a peer they could not name (TimeoutError)`);
  return parts.length > 0 ? parts.join('; ') : undefined;
}

/** The ranks whose TimeoutError named `rank`: "ranks 0, 2 timed out waiting for it", or undefined. */
export function waitedFor(records: ReadonlyMap<number, ExitRecord>, rank: number): string | undefined {
  const by = [...records].filter(([, r]) => r.missingRank === rank).map(([r]) => r).sort((a, b) => a - b);
  return by.length === 0 ? undefined : `${ranks(by)} timed out waiting for it (TimeoutError)`;
}

/** The failed rank's own error, for the "failed first" line, unless describeTimeouts covers it. */
export function describeError(record: ExitRecord | undefined): string | undefined {
  if (record === undefined || record.missingRank !== undefined) return undefined;
  return record.name === undefined ? record.message : `${record.name}: ${record.message}`;
}

function ranks(list: readonly number[]): string {
  return list.length === 1 ? `rank ${list[0]}` : `ranks ${list.join(', ')}`;
}
