// Output files checked before the work that fills them, so a run does not end in a write error.
import { accessSync, constants, statSync } from 'node:fs';
import { dirname, resolve } from 'node:path';
import { UsageError } from './errors.js';

/** Refuses a file this process cannot write: a missing or read-only folder, a folder of that name. */
export function checkWritable(path: string): void {
  const dir = dirname(resolve(path));
  try {
    if (!statSync(dir).isDirectory()) throw new UsageError(`${path}: cannot write (${dir} is not a folder)`);
    const existing = statSync(path, { throwIfNoEntry: false });
    if (existing?.isDirectory()) throw new UsageError(`${path}: cannot write (a folder of that name is there)`);
    accessSync(existing ? path : dir, constants.W_OK);
  } catch (err) {
    if (err instanceof UsageError) throw err;
    throw new UsageError(`${path}: cannot write (${(err as NodeJS.ErrnoException).code ?? (err as Error).message} on ${dir})`);
  }
}
