// Names of a job's POSIX shared-memory files, and their removal after the job. Kept free of the FFI
// so the launcher can clean up without loading it.
import { readdirSync, rmSync } from 'node:fs';
import { join } from 'node:path';

/** Where Linux keeps POSIX shared-memory objects ("/name" is the file /dev/shm/name). */
export const SHM_DIR = '/dev/shm';

/** Every shared-memory file of job `jobId` starts with this. */
export function shmPrefix(jobId: string): string {
  return `a2av-${jobId}-`;
}

/** The job's files still in /dev/shm (ranks unlink theirs once mapped; a killed one may not). */
export function listShmFiles(jobId: string): string[] {
  const prefix = shmPrefix(jobId);
  try {
    return readdirSync(SHM_DIR).filter((name) => name.startsWith(prefix));
  } catch {
    return []; // no /dev/shm: nothing can have been left there
  }
}

/** Removes the job's files; returns how many there were. */
export function removeShmFiles(jobId: string): number {
  const names = listShmFiles(jobId);
  for (const name of names) rmSync(join(SHM_DIR, name), { force: true });
  return names.length;
}
