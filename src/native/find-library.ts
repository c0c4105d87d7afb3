// Locates a native library: the loader's own search first, then the usual CUDA install places,
// then the lib folders of NVIDIA's Python wheels. Reports every place tried when nothing loads.
import { existsSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import koffi from 'koffi';
import { LibraryNotFoundError } from '../errors.js';

export interface LibrarySpec {
  /** Human name for errors, e.g. "libcuda". */
  name: string;
  /** File names to try, most preferred first (e.g. libnvrtc.so.13, libnvrtc.so.12). */
  files: string[];
  /** Extra folders to search, after the loader's default search. */
  folders: string[];
  /** Environment variable that names the file outright (e.g. A2AV_LIBCUDA). */
  overrideEnv: string;
  /** What works without the library, said first when it is missing: "the cpu backend (--backend cpu)". */
  instead?: string;
}

function pythonWheelLibFolders(subdirs: string[]): string[] {
  const roots: string[] = [];
  for (const base of ['/usr/lib', '/usr/local/lib', '/opt/conda/lib', `${process.env.HOME ?? ''}/.local/lib`]) {
    let entries: string[] = [];
    try {
      entries = readdirSync(base).filter((d) => d.startsWith('python3'));
    } catch {
      continue;
    }
    for (const py of entries) for (const site of ['site-packages', 'dist-packages']) roots.push(join(base, py, site));
  }
  if (process.env.VIRTUAL_ENV) roots.push(join(process.env.VIRTUAL_ENV, 'lib'));
  const out: string[] = [];
  for (const root of roots) for (const sub of subdirs) out.push(join(root, 'nvidia', sub, 'lib'));
  return out;
}

/** CUDA toolkit folders: $CUDA_HOME, $CUDA_PATH, /usr/local/cuda, /usr/local/cuda-*. */
export function cudaHomeFolders(): string[] {
  const homes = [process.env.CUDA_HOME, process.env.CUDA_PATH, '/usr/local/cuda'].filter((h): h is string => !!h);
  try {
    for (const d of readdirSync('/usr/local').sort().reverse()) if (d.startsWith('cuda-')) homes.push(join('/usr/local', d));
  } catch {
    /* no /usr/local */
  }
  return homes.flatMap((h) => [join(h, 'lib64'), join(h, 'lib'), join(h, 'targets/x86_64-linux/lib')]);
}

export const systemLibFolders = ['/usr/local/nvidia/lib64', '/usr/lib/x86_64-linux-gnu', '/usr/lib64', '/usr/lib/wsl/lib'];

export function wheelFolders(...subdirs: string[]): string[] {
  return pythonWheelLibFolders(subdirs);
}

export function loadLibrary(spec: LibrarySpec): ReturnType<typeof koffi.load> {
  const tried: string[] = [];
  const attempts: string[] = [];
  // A file the variable names is the one wanted: it alone is tried, never passed over for another.
  const override = process.env[spec.overrideEnv] || undefined;
  if (override) attempts.push(override);
  else {
    attempts.push(...spec.files);
    for (const folder of spec.folders) for (const file of spec.files) attempts.push(join(folder, file));
  }
  let lastError: unknown;
  for (const candidate of attempts) {
    if (candidate.includes('/') && !existsSync(candidate)) {
      tried.push(candidate === override ? `${candidate} (${spec.overrideEnv}: no such file)` : candidate);
      continue;
    }
    try {
      return koffi.load(candidate);
    } catch (err) {
      // The file the variable names does not load: say why, beside it.
      const why = candidate === override ? ` (${spec.overrideEnv}: ${String((err as Error).message ?? err).split('\n')[0]})` : '';
      tried.push(candidate + why);
      lastError = err;
    }
  }
  throw new LibraryNotFoundError({ library: spec.name, searched: [...new Set(tried)], overrideEnv: spec.overrideEnv, instead: spec.instead, overridden: override }, { cause: lastError });
}

/** Why the file the variable `env` names does not load ('no such file', the loader's error); undefined when it loads or is unset. */
export function overrideProblem(env: string): string | undefined {
  const path = process.env[env];
  if (!path) return undefined;
  if (path.includes('/') && !existsSync(path)) return 'no such file';
  try {
    koffi.load(path);
    return undefined;
  } catch (err) {
    return String((err as Error).message ?? err).split('\n')[0];
  }
}
