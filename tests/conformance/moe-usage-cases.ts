// Rank program for host-side misuse of the MoE calls and exchange plans: UsageError at once, nothing
// queued, nothing written; a good round trip and a good plan afterwards still work.
import type { AllToAllV2dArgs, AllToAllV2dOffsetArgs, Comm, PlanAllToAllV2dArgs, PlanMoveArgs } from '../../src/backends/backend.js';
import { expectUsageError } from './expect.js';
import { Moe } from './moe-harness.js';
import { dispatchOffsets, makeMoeSplits, moeInputKey } from './moe-reference.js';
import { Rng } from './reference.js';

const E = 4;
const ROWS = 64;
const ROW_BYTES = 8;

export async function moeUsage(comm: Comm, arg: { seed: number }): Promise<number> {
  const W = comm.worldSize;
  const me = comm.rank;
  const moe = await Moe.create(comm, { experts: E, inputBytes: ROWS * ROW_BYTES, outputBytes: ROWS * ROW_BYTES });
  const local = comm.alloc(moe.mid.bytes);
  const d: AllToAllV2dArgs = { input: moe.input, output: moe.mid, inSplits: moe.inSplits, outSplitsOffsets: moe.midOffsets, expertsPerRank: E, rowBytes: ROW_BYTES, majorAlign: 2 };
  const c: AllToAllV2dOffsetArgs = { input: moe.mid, output: moe.back, inSplitsOffsets: moe.midOffsets, outSplitsOffsets: moe.backOffsets, expertsPerRank: E, rowBytes: ROW_BYTES };
  const p: PlanAllToAllV2dArgs = { inSplits: moe.inSplits, outSplitsOffsets: moe.midOffsets, expertsPerRank: E, majorAlign: 2, inputRows: ROWS, outputRows: ROWS };
  const small = comm.alloc(8 * W * E - 1);
  // Where a third element is given, the message must say it: the argument by the name the call takes.
  const misuse: [string, () => unknown, RegExp?][] = [
    ...[0, -1, 1.5, NaN, 257, 2 * E].map((x): [string, () => unknown] => [`dispatch with expertsPerRank ${x}`, () => comm.allToAllV2d({ ...d, expertsPerRank: x })]),
    ...[0, -2, 2.5, 2 ** 21].map((x): [string, () => unknown] => [`dispatch with majorAlign ${x}`, () => comm.allToAllV2d({ ...d, majorAlign: x })]),
    ['dispatch with rowBytes 0', () => comm.allToAllV2d({ ...d, rowBytes: 0 })],
    ...[0, -1, 1.5].map((x): [string, () => unknown] => [`dispatch with maxBlocks ${x}`, () => comm.allToAllV2d({ ...d, maxBlocks: x })]),
    ['combine with maxBlocks NaN', () => comm.allToAllV2dOffset({ ...c, maxBlocks: NaN })],
    ['dispatch with sizeHintBytes NaN', () => comm.allToAllV2d({ ...d, sizeHintBytes: NaN })],
    ['combine with sizeHintBytes -1', () => comm.allToAllV2dOffset({ ...c, sizeHintBytes: -1 })],
    ['dispatch with inSplits smaller than int64[W*E]', () => comm.allToAllV2d({ ...d, inSplits: small })],
    ['dispatch with outSplitsOffsets smaller than int64[2][E*W]', () => comm.allToAllV2d({ ...d, outSplitsOffsets: small })],
    ['dispatch into a buffer that is not symmetric', () => comm.allToAllV2d({ ...d, output: local })],
    ['dispatch into its own splits', () => comm.allToAllV2d({ ...d, inSplits: moe.mid }), /: output is also inSplits:/],
    ['combine into its own inSplitsOffsets', () => comm.allToAllV2dOffset({ ...c, inSplitsOffsets: moe.back }), /: output is also inSplitsOffsets:/],
    ['combine with expertsPerRank 0', () => comm.allToAllV2dOffset({ ...c, expertsPerRank: 0 })],
    ['combine with inSplitsOffsets smaller than int64[2][E*W]', () => comm.allToAllV2dOffset({ ...c, inSplitsOffsets: small })],
    ['combine with outSplitsOffsets smaller than int64[2][W*E]', () => comm.allToAllV2dOffset({ ...c, outSplitsOffsets: small })],
    ['combine with output = input', () => comm.allToAllV2dOffset({ ...c, output: moe.mid })],
    ['dispatch with inSplits = outSplitsOffsets', () => comm.allToAllV2d({ ...d, inSplits: moe.midOffsets }), /: inSplits and outSplitsOffsets are the same buffer/],
    ['dispatch with input = outSplitsOffsets', () => comm.allToAllV2d({ ...d, input: moe.midOffsets }), /: input and outSplitsOffsets are the same buffer/],
    ['combine with input = outSplitsOffsets', () => comm.allToAllV2dOffset({ ...c, input: moe.backOffsets }), /: input and outSplitsOffsets are the same buffer/],
    ['combine with inSplitsOffsets = outSplitsOffsets', () => comm.allToAllV2dOffset({ ...c, inSplitsOffsets: moe.backOffsets }), /: inSplitsOffsets and outSplitsOffsets are the same buffer/],
    ['combine on a lane past the last', () => comm.allToAllV2dOffset({ ...c, lane: { index: comm.laneCount, stream: comm.lane(0).stream } })],
    ['plan with negative inputRows', () => comm.planAllToAllV2d({ ...p, inputRows: -1 })],
    ['plan with outputRows 1.5', () => comm.planAllToAllV2d({ ...p, outputRows: 1.5 })],
    ['plan with expertsPerRank 300', () => comm.planAllToAllV2d({ ...p, expertsPerRank: 300 })],
    ['plan with maxBlocks 0', () => comm.planAllToAllV2d({ ...p, maxBlocks: 0 }), /maxBlocks must be a positive integer/],
    ['1-D plan with inSplits smaller than int64[W]', () => comm.planAllToAllV({ inSplits: comm.alloc(8 * W - 1), outSplitsOffsets: moe.midOffsets, inputRows: 1, outputRows: 1 })],
    // A misspelt option would otherwise be dropped and the call run without it (majorAlign 1 here).
    ['dispatch with majoralign (misspelt)', () => comm.allToAllV2d({ ...d, majoralign: 2 } as never)],
    ['combine with rowbytes beside rowBytes', () => comm.allToAllV2dOffset({ ...c, rowbytes: ROW_BYTES } as never)],
    ['plan with inSplits = outSplitsOffsets', () => comm.planAllToAllV2d({ ...p, inSplits: moe.midOffsets }), /the plan's inSplits and outSplitsOffsets are the same buffer/],
    [
      'combine plan with inSplitsOffsets = outSplitsOffsets',
      () => comm.planAllToAllV2dOffset({ inSplitsOffsets: moe.backOffsets, outSplitsOffsets: moe.backOffsets, expertsPerRank: E, inputRows: 1, outputRows: 1 }),
      /the plan's inSplitsOffsets and outSplitsOffsets are the same buffer/,
    ],
    ['plan with majoralign (misspelt)', () => comm.planAllToAllV2d({ ...p, majoralign: 2 } as never)],
    ['1-D plan with sizeHintBytes (not a plan option)', () => comm.planAllToAllV({ inSplits: moe.inSplits, outSplitsOffsets: moe.midOffsets, inputRows: 1, outputRows: 1, sizeHintBytes: 8 } as never)],
    ['combine plan with inSplitsOffsets smaller than int64[2][E*W]', () => comm.planAllToAllV2dOffset({ inSplitsOffsets: small, outSplitsOffsets: moe.backOffsets, expertsPerRank: E, inputRows: 1, outputRows: 1 })],
  ];
  moe.poison(1);
  for (const [label, fn, message] of misuse) expectUsageError(fn, label, message);
  moe.verifyUntouched('misuse');
  // The misuse allocated: no rank may spin in the next call until every rank is past that.
  await comm.barrier();

  // A good plan: its moves check their payloads against its capacity.
  const C = makeMoeSplits(new Rng(arg.seed, 4100), W, E, 'random', 1);
  moe.writeSplits(C.row(me));
  const plan = comm.planAllToAllV2d(p);
  plan.ready.wait();
  moe.verifyOffsets('midOffsets', dispatchOffsets(C, me, 2), 'good plan after misuse');
  const m: PlanMoveArgs = { input: moe.input, output: moe.mid, rowBytes: ROW_BYTES };
  const moves: [string, () => unknown][] = [
    ['move with an input smaller than the plan\'s rows', () => plan.move({ ...m, rowBytes: ROW_BYTES + 1 })],
    ['move into a buffer that is not symmetric', () => plan.move({ ...m, output: local })],
    ['move with rowBytes -1', () => plan.move({ ...m, rowBytes: -1 })],
    ['move with lane (a plan moves on its own lane)', () => plan.move({ ...m, lane: comm.lane(0) } as never)],
  ];
  for (const [label, fn] of moves) expectUsageError(fn, label);
  plan.close();
  expectUsageError(() => plan.move(m), 'move of a closed plan');

  const key = (q: number): number => moeInputKey(arg.seed, 4101, q);
  moe.prepare(key, C, ROW_BYTES, 4101);
  moe.dispatch({ experts: E, rowBytes: ROW_BYTES, align: 2 }).wait();
  moe.verifyDispatch(key, C, 2, ROW_BYTES, 'good dispatch after misuse');
  moe.combine({ experts: E, rowBytes: ROW_BYTES }).wait();
  moe.verifyCombine(key, C, ROW_BYTES, 'good combine after misuse');
  return misuse.length + moves.length + 1;
}
