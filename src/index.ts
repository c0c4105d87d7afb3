// The public API of a2av. Everything else is private to the package.
export { runRanks } from './world/threads.js';
export { init, type InitOptions } from './world/init.js';
export type { RankContext, RankFn, RunRanksOptions } from './world/ranks.js';
export { createComm, defaultBackend, type CommOptions } from './backends/create.js';
export type { AllToAllVArgs, BackendName, Comm, CopyOffsets, DeviceBuffer, Handle, Lane, Replay, Stream } from './backends/backend.js';
export {
  MAX_EXPERTS_PER_RANK,
  type AllToAllV2dArgs,
  type AllToAllV2dOffsetArgs,
  type ExchangePlan,
  type PlanAllToAllV2dArgs,
  type PlanAllToAllV2dOffsetArgs,
  type PlanAllToAllVArgs,
  type PlanCapacity,
  type PlanMoveArgs,
} from './backends/backend.js';
export type { LaunchPlan } from './tune/plan.js';
export { cudaDeviceCount } from './cuda/probe.js';
export { rankEnv, type RankEnv } from './world/env.js';
export type { Store } from './world/store.js';
export { TcpStoreClient, TcpStoreServer } from './world/tcp-store.js';
export { launch, type LaunchOptions } from './launch/launcher.js';
export { recordExitError } from './world/exit-record.js';
export { createMoeGroup } from './moe/group.js';
export type { CombineDtype, MoeCombineArgs, MoeDispatchArgs, MoeDispatchResult, MoeGroup, MoeGroupOptions, MoeLayout, MoeRoute, TopkIdxType } from './moe/api.js';
export { MoeCapacityError, MoeRoutingError, type MoeRoutingProblem } from './moe/errors.js';
export { runPipeline, type PipelineOptions, type PipelineResult } from './pipeline/run.js';
export { pipelineRank, type ArmResult, type PipelineArg, type PipelineRankResult } from './pipeline/rank.js';
export { type PipelineInput } from './pipeline/options.js';
export { pipelineRows, type PipelineReportData, type PipelineRow } from './pipeline/table.js';
export { chromeTrace, writeChromeTrace, type ArmTrace, type ChromeTrace } from './pipeline/trace.js';
export { ARMS as PIPELINE_ARMS, type Arm as PipelineArm } from './pipeline/train.js';
export { SHAPES as PIPELINE_SHAPES, type Shape as PipelineShape, type ShapeName as PipelineShapeName } from './pipeline/shapes.js';
export {
  A2avError,
  ClosedError,
  CommAbortedError,
  CublasError,
  CudaError,
  HostMemoryError,
  KernelSourcesNotFoundError,
  LibraryNotFoundError,
  NcclError,
  NvrtcError,
  PeerAccessError,
  RankExitedError,
  SharedMemoryError,
  SplitsError,
  StoreError,
  TimeoutError,
  UnsupportedDeviceError,
  UsageError,
  type LibrarySearch,
  type MismatchField,
  type SplitsProblem,
} from './errors.js';
