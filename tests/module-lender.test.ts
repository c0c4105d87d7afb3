// Which rank loads the kernels another runs (backends/cuda/modules.ts moduleLender): ranks of one
// process on one GPU share its context and run one copy, loaded by the first of them; ranks in other
// processes, on other GPUs or other hosts load their own; A2AV_SHARED_MODULES=0 gives each its own.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { moduleLender } from '../src/backends/cuda/modules.js';
import type { RankPlace } from '../src/backends/cuda/symmetric.js';

const place = (pid: number, ordinal: number, host = 'h'): RankPlace => ({ pid, ordinal, host });
const lenders = (where: RankPlace[], shared = true) => where.map((_, r) => moduleLender(where, r, shared));

test('threads on one GPU: the first lends to the others', () => {
  const got = lenders([place(7, 0), place(7, 0), place(7, 0)]);
  assert.deepEqual(got, [
    { lender: 0, lends: true },
    { lender: 0, lends: false },
    { lender: 0, lends: false },
  ]);
});

test('threads on two GPUs, ranks interleaved: the first rank of each GPU lends to that GPU\'s others', () => {
  const got = lenders([place(7, 0), place(7, 1), place(7, 0), place(7, 1), place(7, 1)]);
  assert.deepEqual(
    got.map((g) => g.lender),
    [0, 1, 0, 1, 1],
  );
  assert.deepEqual(
    got.map((g) => g.lends),
    [true, true, false, false, false],
  );
});

test('one process a rank (even on one GPU), one rank a GPU, or other hosts: each loads its own', () => {
  for (const where of [
    [place(1, 0), place(2, 0), place(3, 0)],
    [place(7, 0), place(7, 1)],
    [place(7, 0, 'a'), place(7, 0, 'b')],
  ]) {
    assert.deepEqual(
      lenders(where),
      where.map((_, r) => ({ lender: r, lends: false })),
    );
  }
});

test('A2AV_SHARED_MODULES=0: each rank loads its own, beside ranks of its process on its GPU', () => {
  const where = [place(7, 0), place(7, 0), place(7, 1), place(7, 1)];
  assert.deepEqual(
    lenders(where, false),
    where.map((_, r) => ({ lender: r, lends: false })),
  );
});
