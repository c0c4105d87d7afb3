// rankEnv(): torchrun, Slurm and Open MPI variables, and refusal of inconsistent ones; and the
// driver's hardware queues, which depend on whether the process is a launched rank.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { queueShortfall, shareHardwareQueues } from '../src/cuda/hardware-queues.js';
import { UsageError } from '../src/errors.js';
import { firstHost, jobId, rankEnv, storeToken } from '../src/world/env.js';

test('not launched: undefined', () => {
  assert.equal(rankEnv({ PATH: '/bin' }), undefined);
});

test('torchrun variables', () => {
  const env = { RANK: '5', WORLD_SIZE: '8', LOCAL_RANK: '1', LOCAL_WORLD_SIZE: '4', MASTER_ADDR: 'node0', MASTER_PORT: '29500' };
  assert.deepEqual(rankEnv(env), { launcher: 'torchrun', rank: 5, worldSize: 8, localRank: 1, localWorldSize: 4, masterAddr: 'node0', masterPort: 29500 });
  // RANK and WORLD_SIZE alone: one node.
  assert.deepEqual(rankEnv({ RANK: '2', WORLD_SIZE: '3' }), { launcher: 'torchrun', rank: 2, worldSize: 3, localRank: 2, localWorldSize: 3, masterAddr: undefined, masterPort: undefined });
});

test('torchrun variables win over Slurm and Open MPI ones', () => {
  const env = { RANK: '0', WORLD_SIZE: '1', SLURM_PROCID: '3', SLURM_STEP_ID: '0', OMPI_COMM_WORLD_RANK: '2' };
  assert.equal(rankEnv(env)?.launcher, 'torchrun');
});

test('Slurm srun task', () => {
  const env = {
    SLURM_PROCID: '5', SLURM_NTASKS: '7', SLURM_LOCALID: '1', SLURM_NODEID: '2', SLURM_STEP_ID: '0',
    SLURM_STEP_TASKS_PER_NODE: '2(x3),1', SLURM_STEP_NODELIST: 'gpu[07-09,12]',
  };
  assert.deepEqual(rankEnv(env), { launcher: 'slurm', rank: 5, worldSize: 7, localRank: 1, localWorldSize: 2, masterAddr: 'gpu07', masterPort: undefined });
  assert.equal(rankEnv({ ...env, MASTER_ADDR: 'head', MASTER_PORT: '1234' })?.masterAddr, 'head');
});

test('Slurm batch script (no step) is not a rank', () => {
  assert.equal(rankEnv({ SLURM_PROCID: '0', SLURM_NTASKS: '8', SLURM_LOCALID: '0', SLURM_TASKS_PER_NODE: '4(x2)' }), undefined);
});

test('Open MPI variables', () => {
  const env = { OMPI_COMM_WORLD_RANK: '3', OMPI_COMM_WORLD_SIZE: '4', OMPI_COMM_WORLD_LOCAL_RANK: '1', OMPI_COMM_WORLD_LOCAL_SIZE: '2' };
  assert.deepEqual(rankEnv(env), { launcher: 'openmpi', rank: 3, worldSize: 4, localRank: 1, localWorldSize: 2, masterAddr: undefined, masterPort: undefined });
});

test('inconsistent or malformed values throw UsageError', () => {
  const bad: Record<string, string>[] = [
    { RANK: '4', WORLD_SIZE: '4' },
    { RANK: '0' },
    { RANK: '0', WORLD_SIZE: '0' },
    { RANK: '-1', WORLD_SIZE: '2' },
    { RANK: 'x', WORLD_SIZE: '2' },
    { RANK: '0', WORLD_SIZE: '2', LOCAL_RANK: '0' },
    { RANK: '0', WORLD_SIZE: '2', LOCAL_RANK: '2', LOCAL_WORLD_SIZE: '2' },
    { RANK: '0', WORLD_SIZE: '2', LOCAL_RANK: '0', LOCAL_WORLD_SIZE: '3' },
    { RANK: '0', WORLD_SIZE: '2', MASTER_PORT: '70000' },
    { RANK: '0', WORLD_SIZE: '2', MASTER_ADDR: '' },
    { SLURM_PROCID: '0', SLURM_NTASKS: '2', SLURM_LOCALID: '0', SLURM_STEP_ID: '1', SLURM_TASKS_PER_NODE: 'two' },
    { SLURM_PROCID: '0', SLURM_NTASKS: '4', SLURM_LOCALID: '0', SLURM_STEP_ID: '1', SLURM_NODEID: '5', SLURM_TASKS_PER_NODE: '2,2' },
    { OMPI_COMM_WORLD_RANK: '1', OMPI_COMM_WORLD_SIZE: '2', OMPI_COMM_WORLD_LOCAL_RANK: '0' },
  ];
  for (const env of bad) assert.throws(() => rankEnv(env), UsageError, JSON.stringify(env));
});

test('firstHost expands Slurm node lists', () => {
  assert.equal(firstHost('a,b'), 'a');
  assert.equal(firstHost('gpu[07-09,12],cpu1'), 'gpu07');
  assert.equal(firstHost('r[1-2]-n[3-4]'), 'r1-n3');
  assert.equal(firstHost(''), undefined);
});

test('storeToken reads A2AV_STORE_TOKEN', () => {
  assert.equal(storeToken({ A2AV_STORE_TOKEN: 'abc' }), 'abc');
  assert.equal(storeToken({}), undefined);
});

test('jobId reads A2AV_JOB_ID: letters and digits only, since it goes into file names', () => {
  assert.equal(jobId({ A2AV_JOB_ID: '0f3a9c' }), '0f3a9c');
  assert.equal(jobId({}), undefined);
  assert.equal(jobId({ A2AV_JOB_ID: '' }), undefined);
  for (const bad of ['../x', 'a-b', 'x'.repeat(33)]) assert.throws(() => jobId({ A2AV_JOB_ID: bad }), UsageError);
});

test('32 hardware queues for ranks as threads, before the driver starts; a launched rank or the program\'s own value keeps its own', () => {
  const queues = (env: NodeJS.ProcessEnv, main = true) => (shareHardwareQueues(env, main), env.CUDA_DEVICE_MAX_CONNECTIONS);
  assert.equal(queues({}), '32');
  assert.equal(queues({ CUDA_DEVICE_MAX_CONNECTIONS: '4' }), '4');
  assert.equal(queues({ RANK: '0', WORLD_SIZE: '2', LOCAL_WORLD_SIZE: '2' }), undefined, 'a2av launch or torchrun: MPS may be on');
  assert.equal(queues({ SLURM_PROCID: '1', SLURM_NTASKS: '2', SLURM_STEP_ID: '0' }), undefined, 'an srun task');
  assert.equal(queues({ OMPI_COMM_WORLD_RANK: '0', OMPI_COMM_WORLD_SIZE: '2' }), undefined, 'an mpirun rank');
  assert.equal(queues({ SLURM_PROCID: '0', SLURM_NTASKS: '2' }), '32', 'a Slurm batch script is not a rank');
  assert.equal(queues({}, false), undefined, 'a worker thread cannot change what the driver reads');
});

test('lanes of ranks sharing a context past its hardware queues are named, with what to do', () => {
  assert.equal(queueShortfall(32, { CUDA_DEVICE_MAX_CONNECTIONS: '32' }), undefined, '16 ranks x 2 lanes fit');
  assert.equal(queueShortfall(8, {}), undefined, "the driver's default of 8");
  assert.match(queueShortfall(9, {}) ?? '', /^9 lanes .* over 8 hardware queues/);
  assert.match(queueShortfall(48, { CUDA_DEVICE_MAX_CONNECTIONS: '64' }) ?? '', /over 32 hardware queues .*fewer lanes/, 'the driver caps it at 32');
});
