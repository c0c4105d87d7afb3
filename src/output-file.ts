// Output files checked before the work that fills them, so a run does not end in a write error.
import { accessSync, closeSync, constants, openSync, statSync, unlinkSync, type Stats } from 'node:fs';
import { dirname, resolve } from 'node:path';
import { UsageError } from './errors.js';

const errno = (err: unknown): string => (err as NodeJS.ErrnoException).code ?? (err as Error).message;

/**
 * Refuses a file this process cannot write: a missing or read-only folder, a folder of that name,
 * or a place that takes no files at all (/proc, a read-only mount).
 */
export function checkWritable(path: string): void {
  if (path === '') throw new UsageError('an empty file name: give the file to write');
  const dir = dirname(resolve(path));
  let existing: Stats | undefined;
  try {
    if (!statSync(dir).isDirectory()) throw new UsageError(`${path}: cannot write (${dir} is not a folder)`);
    existing = statSync(path, { throwIfNoEntry: false });
  } catch (err) {
    if (err instanceof UsageError) throw err;
    throw new UsageError(`${path}: cannot write (${errno(err)} on ${dir})`);
  }
  if (existing?.isDirectory()) throw new UsageError(`${path}: cannot write (a folder of that name is there)`);
  // Permission bits do not say it all: root passes access(W_OK) on every folder, yet /proc or a
  // read-only mount refuse the file. Only opening it is sure: a new file is made and removed again,
  // an existing one opened without truncating. A FIFO or device is only asked (opening a FIFO for
  // writing waits for its reader).
  try {
    if (existing === undefined) {
      closeSync(openSync(path, 'wx'));
      unlinkSync(path);
    } else if (existing.isFile()) {
      closeSync(openSync(path, constants.O_WRONLY));
    } else {
      accessSync(path, constants.W_OK);
    }
  } catch (err) {
    throw new UsageError(`${path}: cannot write (${errno(err)})`);
  }
}
