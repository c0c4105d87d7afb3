// What each call publishes for the splits exchange (its record's header, and which splits buffer
// holds its data), from the call's arguments, checked already (check.ts); shared by the backends
// that run the rules on the host (cpu, nccl). Plans publish row size 0, output -1 and plan -1: they
// hold no payload yet, and a rank that makes a direct call meanwhile differs from them.
import type { AllToAllV2dArgs, AllToAllV2dOffsetArgs, AllToAllVArgs, DeviceBuffer, PlanCapacity } from '../backends/backend.js';
import type { PlanCheckArgs } from './check.js';
import { OP_OF_KIND, planWhat } from './call-names.js';
import { recordDataWords, type ExchangeKind, type RecordHeader } from './exchange-rules.js';


/** One rank's part of a splits exchange. */
export interface CallRecord {
  header: RecordHeader;
  /** The buffer whose first `words` int64 are the record's data: inSplits, or combine's inSplitsOffsets. */
  splits: DeviceBuffer;
  words: number;
  outSplitsOffsets: DeviceBuffer;
  /** For messages: 'allToAllV', 'allToAllV2d', ... */
  what: string;
}

/** The rows of one call, or of one move of a plan. */
export interface Payload {
  input: DeviceBuffer;
  output: DeviceBuffer;
  rowBytes: number;
}

type AnyCall = AllToAllVArgs | AllToAllV2dArgs | AllToAllV2dOffsetArgs;
type Rows = Pick<RecordHeader, 'rowBytes' | 'outId' | 'inRows' | 'outRows'>;

function record(kind: ExchangeKind, world: number, a: Partial<AllToAllV2dArgs & AllToAllV2dOffsetArgs & PlanCheckArgs>, rows: Rows, plan: boolean): CallRecord {
  const experts = kind === '1d' ? 1 : a.expertsPerRank!;
  const align = kind === 'dispatch' ? (a.majorAlign ?? 1) : 1;
  return {
    header: { kind, rowBytes: rows.rowBytes, outId: rows.outId, experts, align, inRows: rows.inRows, outRows: rows.outRows, plan: plan ? -1 : 0 },
    splits: (kind === 'combine' ? a.inSplitsOffsets : a.inSplits)!,
    words: recordDataWords(kind, world, experts),
    outSplitsOffsets: a.outSplitsOffsets!,
    what: plan ? planWhat(kind) : OP_OF_KIND[kind],
  };
}

/** A direct call: its record (capacities in whole rows of its buffers), and its rows. */
export function directRecord(kind: ExchangeKind, world: number, args: AnyCall): { x: CallRecord; p: Payload } {
  const p: Payload = { input: args.input, output: args.output, rowBytes: args.rowBytes };
  const rows = {
    rowBytes: p.rowBytes,
    outId: p.output.symmetricId,
    inRows: Math.floor(p.input.bytes / p.rowBytes),
    outRows: Math.floor(p.output.bytes / p.rowBytes),
  };
  return { x: record(kind, world, args, rows, false), p };
}

/** A plan's exchange: its record, with the plan's capacity in rows. */
export function planRecord(kind: ExchangeKind, world: number, args: PlanCheckArgs & PlanCapacity): CallRecord {
  return record(kind, world, args, { rowBytes: 0, outId: -1, inRows: args.inputRows, outRows: args.outputRows }, true);
}

/**
 * The header of a plan's move: the plan's, with the move's row size and output, and which plan (the
 * lane call number of its exchange: ranks moving different plans, or one moving while another calls
 * directly, differ there).
 */
export const moveHeader = (plan: RecordHeader, p: Payload, planId: number): RecordHeader => ({ ...plan, rowBytes: p.rowBytes, outId: p.output.symmetricId, inRows: 0, outRows: 0, plan: planId });
