// Under a launcher every rank parses its own command line (`a2av launch -- sh -c '... $RANK ...'`),
// so ranks can be started with different options. Left alone, that fails far from its cause: a
// wrong result (--splits), a symmetric buffer of another size on each rank (--max, --row-bytes),
// or both ranks waiting out the timeout in different calls (--op). Every bench rank program
// compares the options first, before it allocates anything or calls a collective.
import type { Comm } from '../backends/backend.js';
import { UsageError } from '../errors.js';
import { gatherBytes } from '../collectives/agree.js';

export interface RankOptions {
  /** 'bench', 'bench allreduce': ranks running different commands differ here first. */
  command: string;
  /** The rank program's argument less its per-rank fields. Undefined fields are unset. */
  options: object;
  /** How the CLI names a field where that is not the field's own name (rowBytes: '--row-bytes'). */
  flags?: Readonly<Record<string, string>>;
  /**
   * This rank's own refusal of its options, where it has one: it is still sent, so that peers
   * started well are told which rank refused and why rather than waiting for it, and it is what
   * this rank throws.
   */
  refused?: Error;
}

interface Sent {
  command: string;
  options: Record<string, unknown>;
  refused?: string;
}

/**
 * Collective: returns when every rank has the same command and options; otherwise throws, on every
 * rank, a UsageError naming the first option that differs (op first: it picks the rank program,
 * then by name) with this rank's value and a differing rank's.
 */
export async function checkSameOptions(comm: Comm, mine: RankOptions): Promise<void> {
  // Refused options are not sent: they may not be JSON at all (a BigInt).
  const sent = JSON.stringify(mine.refused ? { command: mine.command, options: {}, refused: mine.refused.message } : { command: mine.command, options: canonical(mine.options) });
  const all = (await gatherBytes(comm, new TextEncoder().encode(sent))).map((b) => new TextDecoder().decode(b));
  if (mine.refused) throw mine.refused;
  const refusing = all.findIndex((s) => (JSON.parse(s) as Sent).refused !== undefined);
  if (refusing >= 0) throw new UsageError(`${mine.command}: rank ${refusing} refused its options: ${(JSON.parse(all[refusing]!) as Sent).refused}`);
  // The rank to name: rank 0 where this rank differs from it, else the first rank that does.
  const peer = all[comm.rank] !== all[0] ? 0 : all.findIndex((s) => s !== all[0]);
  if (peer < 0) return;
  const here = JSON.parse(sent) as Sent;
  const there = JSON.parse(all[peer]!) as Sent;
  if (here.command !== there.command) {
    throw new UsageError(`${here.command}: ranks were started with different commands: '${here.command}' here, '${there.command}' on rank ${peer}`);
  }
  const names = [...new Set([...Object.keys(here.options), ...Object.keys(there.options)])].sort(opFirst);
  const name = names.find((k) => JSON.stringify(here.options[k]) !== JSON.stringify(there.options[k]))!;
  throw new UsageError(
    `${here.command}: ranks were started with different options: ${mine.flags?.[name] ?? name} is ${show(here.options[name])} here, ` +
      `${show(there.options[name])} on rank ${peer}`,
  );
}

/** Sort order of option names: op, then the rest by name. */
function opFirst(a: string, b: string): number {
  return Number(b === 'op') - Number(a === 'op') || (a < b ? -1 : a > b ? 1 : 0);
}

/** `value` with every object's keys sorted, so equal options give equal JSON. */
function canonical(value: unknown): unknown {
  if (Array.isArray(value)) return value.map(canonical);
  if (value === null || typeof value !== 'object') return value;
  const entries = Object.entries(value as Record<string, unknown>).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
  return Object.fromEntries(entries.map(([k, v]) => [k, canonical(v)]));
}

function show(value: unknown): string {
  if (value === undefined) return 'unset';
  return typeof value === 'string' ? `'${value}'` : JSON.stringify(value);
}
