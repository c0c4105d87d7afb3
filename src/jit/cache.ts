// On-disk cache of compiled kernels: key = hash of source, headers, options, architecture and
// compiler version. Written to a temporary name then renamed, so concurrent ranks never read a
// half-written file.
import { createHash, randomBytes } from 'node:crypto';
import { mkdirSync, readFileSync, renameSync, writeFileSync } from 'node:fs';
import { homedir, tmpdir } from 'node:os';
import { join } from 'node:path';

export function cacheDir(): string {
  if (process.env.A2AV_CACHE_DIR) return process.env.A2AV_CACHE_DIR;
  const base = process.env.XDG_CACHE_HOME ?? (homedir() ? join(homedir(), '.cache') : tmpdir());
  return join(base, 'a2av', 'kernels');
}

export function cacheKey(parts: string[]): string {
  const h = createHash('sha256');
  for (const p of parts) h.update(`${p.length}:`).update(p);
  return h.digest('hex').slice(0, 32);
}

export function cached(key: string, build: () => Buffer): Buffer {
  const dir = cacheDir();
  const file = join(dir, `${key}.cubin`);
  try {
    return readFileSync(file);
  } catch {
    /* miss */
  }
  const data = build();
  try {
    mkdirSync(dir, { recursive: true });
    const tmp = `${file}.${randomBytes(6).toString('hex')}.tmp`;
    writeFileSync(tmp, data);
    renameSync(tmp, file);
  } catch {
    // A read-only or full cache only costs a recompile next time.
  }
  return data;
}
