// The environment's switches (A2AV_*), each parsed in one place. Most are read only by the backend
// they steer (the cuda backend's copy grids, the MoE paths), so a typo would pass unnoticed on cpu
// and surface only on a GPU: checkKnobs() reads them all when any communicator is made, and the
// CLI before it starts ranks. A value that is not one the switch knows is a UsageError, never a
// silent default. (A2AV_LIBCUDA, A2AV_PLAN, A2AV_CACHE_DIR and A2AV_PROBE_DEFINES are paths or
// lists, checked where they are used.)
import { UsageError } from './errors.js';

export type GridCopy = 'auto' | 'always' | 'never';
export type PeerSplit = 'auto' | 'always' | 'never';
export type MoeGrid = 'never' | 'auto' | 'always';

function choice<T extends string>(name: string, value: string | undefined, choices: readonly T[], fallback: T): T {
  if (value === undefined || value === '') return fallback;
  if ((choices as readonly string[]).includes(value)) return value as T;
  throw new UsageError(`${name} must be ${choices.slice(0, -1).join(', ')} or ${choices[choices.length - 1]}, got '${value}'`);
}

/** A switch of 0 and 1; unset or empty: `fallback`. */
function onOff(name: string, value: string | undefined, fallback: boolean): boolean {
  if (value === undefined || value === '') return fallback;
  if (value === '0' || value === '1') return value === '1';
  throw new UsageError(`${name} must be 0 or 1, got '${value}'`);
}

/** A2AV_GRID_COPY: where the 1-D call moves its bytes in grid mode (tune/plan.ts). */
export function gridCopyFromEnv(value = process.env.A2AV_GRID_COPY): GridCopy {
  return choice('A2AV_GRID_COPY', value, ['auto', 'always', 'never'], 'auto');
}

/** A2AV_PEER_SPLIT: whether a copy across GPUs gives each destination its own blocks (tune/plan.ts). */
export function peerSplitFromEnv(value = process.env.A2AV_PEER_SPLIT): PeerSplit {
  return choice('A2AV_PEER_SPLIT', value, ['auto', 'always', 'never'], 'auto');
}

/**
 * A2AV_MOE_GRID: where MoE calls whose ranks share one GPU copy in the slice grid (backends/cuda/moe.ts
 * leavesFused): 'auto' (from GRID_MIN_BYTES of output, as the 1-D call's grid mode; at W = 8 on one
 * H200, 256 MiB, 1136 us against x_fused's 1514 with lane shares: docs/perf.md; the token group
 * says for its own), 'never' (x_fused for every call that fits it), 'always' (every such call: the
 * tests and probes).
 */
export function moeGridFromEnv(value = process.env.A2AV_MOE_GRID): MoeGrid {
  return choice('A2AV_MOE_GRID', value, ['never', 'auto', 'always'], 'auto');
}

/** A2AV_LANE_SHARES=0: a call's grid takes its rank's whole share, not its lane's (tune/plan.ts laneShares). */
export const laneSharesOn = (value = process.env.A2AV_LANE_SHARES): boolean => onOff('A2AV_LANE_SHARES', value, true);
/** A2AV_MOE_GATHER=0: a token dispatch copies its rows into send order first (moe/group.ts). */
export const moeGatherOn = (value = process.env.A2AV_MOE_GATHER): boolean => onOff('A2AV_MOE_GATHER', value, true);
export type MoePull = 'auto' | 'always' | 'never';
/**
 * A2AV_MOE_PULL: where a token combine whose y is symmetric reads y in place (moe/group.ts): 'auto'
 * where every rank shares one GPU, 'never' (the exchange copies the rows back first), 'always'
 * (across GPUs too, reading over NVLink: not yet measured there, so not the default).
 */
export function moePullFromEnv(value = process.env.A2AV_MOE_PULL): MoePull {
  return choice('A2AV_MOE_PULL', value, ['auto', 'always', 'never'], 'auto');
}
/** A2AV_MOE_FUSED=0: every MoE call as three kernels (backends/cuda/moe.ts). */
export const moeFusedOn = (value = process.env.A2AV_MOE_FUSED): boolean => onOff('A2AV_MOE_FUSED', value, true);
/** A2AV_EARLY_LAUNCH=0: no programmatic dependent launch (jit/module.ts). */
export const earlyLaunchOn = (value = process.env.A2AV_EARLY_LAUNCH): boolean => onOff('A2AV_EARLY_LAUNCH', value, true);
/** A2AV_SHARED_MODULES=0: every rank loads its own copy of the kernels, even beside ranks of its process on its GPU (backends/cuda/modules.ts). */
export const sharedModulesOn = (value = process.env.A2AV_SHARED_MODULES): boolean => onOff('A2AV_SHARED_MODULES', value, true);
/** A2AV_FORCE_SYSTEM_SCOPE=1: system-scope flags even where every rank is on one GPU (backends/cuda/setup.ts). */
export const forceSystemScope = (value = process.env.A2AV_FORCE_SYSTEM_SCOPE): boolean => onOff('A2AV_FORCE_SYSTEM_SCOPE', value, false);

/** A2AV_DRIVER_TRACE=1: ranks as threads note their driver calls, printed when a rank fails (cuda/driver-trace.ts). */
export const driverTraceOn = (value = process.env.A2AV_DRIVER_TRACE): boolean => onOff('A2AV_DRIVER_TRACE', value, false);

/** Reads every switch above: the first bad value is a UsageError naming it. */
export function checkKnobs(): void {
  gridCopyFromEnv();
  peerSplitFromEnv();
  moeGridFromEnv();
  laneSharesOn();
  moeGatherOn();
  moePullFromEnv();
  moeFusedOn();
  earlyLaunchOn();
  sharedModulesOn();
  forceSystemScope();
  driverTraceOn();
}
