// The numbers calls carry in their records, kernel parameters and error fields: what ranks compare,
// and what a mismatch's needed / available hold (errors.ts names them back). The kernels use the
// same: X_1D, X_DISPATCH, X_COMBINE (kernels/exchange.cuh); AR_F32, AR_BF16, AR_SUM
// (kernels/all-reduce.cuh). A module of its own, importing nothing, so errors.ts can read them.

/** The splits exchange's call kinds. */
export const ExchangeKind = { '1d': 1, dispatch: 2, combine: 3 } as const;
export type ExchangeKind = keyof typeof ExchangeKind;
/**
 * The kind word of the record an allReduce publishes where a backend judges records on the host
 * (cpu): a rank in an exchange call beside it differs from it in kind, and both refuse the call.
 */
export const ALL_REDUCE_KIND = 4;

/** allReduce's element types (every ReduceDtype has one: collectives/reduce.ts checks) and ops. */
export const DTYPE_CODE = { f32: 1, bf16: 2 } as const;
export const OP_CODE = { sum: 1 } as const;
