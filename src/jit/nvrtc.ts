// NVRTC: CUDA C++ source -> CUBIN for one architecture. Every call checked; compile errors carry the log.
import { NvrtcError } from '../errors.js';
import { cudaHomeFolders, loadLibrary, systemLibFolders, wheelFolders } from '../native/find-library.js';

type Fn = (...args: any[]) => number;
interface Nvrtc {
  nvrtcVersion: Fn;
  nvrtcGetErrorString: (status: number) => string;
  nvrtcCreateProgram: Fn;
  nvrtcCompileProgram: Fn;
  nvrtcGetProgramLogSize: Fn;
  nvrtcGetProgramLog: Fn;
  nvrtcGetCUBINSize: Fn;
  nvrtcGetCUBIN: Fn;
  nvrtcDestroyProgram: Fn;
}

let nvrtc: Nvrtc | undefined;

function lib(): Nvrtc {
  if (nvrtc) return nvrtc;
  const l = loadLibrary({
    name: 'NVRTC (libnvrtc)',
    files: ['libnvrtc.so.13', 'libnvrtc.so.12', 'libnvrtc.so'],
    folders: [...cudaHomeFolders(), ...systemLibFolders, ...wheelFolders('cu13', 'cuda_nvrtc')],
    overrideEnv: 'A2AV_LIBNVRTC',
    instead: "the cpu backend (backend 'cpu'; --backend cpu on the command line)",
  });
  nvrtc = {
    nvrtcVersion: l.func('int nvrtcVersion(_Out_ int *major, _Out_ int *minor)') as Fn,
    nvrtcGetErrorString: l.func('const char *nvrtcGetErrorString(int status)') as (s: number) => string,
    nvrtcCreateProgram: l.func(
      'int nvrtcCreateProgram(_Out_ uint64_t *prog, const char *src, const char *name, int numHeaders, const char **headers, const char **includeNames)',
    ) as Fn,
    nvrtcCompileProgram: l.func('int nvrtcCompileProgram(uint64_t prog, int numOptions, const char **options)') as Fn,
    nvrtcGetProgramLogSize: l.func('int nvrtcGetProgramLogSize(uint64_t prog, _Out_ size_t *size)') as Fn,
    nvrtcGetProgramLog: l.func('int nvrtcGetProgramLog(uint64_t prog, _Out_ uint8_t *log)') as Fn,
    nvrtcGetCUBINSize: l.func('int nvrtcGetCUBINSize(uint64_t prog, _Out_ size_t *size)') as Fn,
    nvrtcGetCUBIN: l.func('int nvrtcGetCUBIN(uint64_t prog, _Out_ uint8_t *cubin)') as Fn,
    nvrtcDestroyProgram: l.func('int nvrtcDestroyProgram(_Inout_ uint64_t *prog)') as Fn,
  };
  return nvrtc;
}

function check(call: string, status: number, log = ''): void {
  if (status !== 0) throw new NvrtcError(call, status, lib().nvrtcGetErrorString(status), log);
}

export function nvrtcVersion(): string {
  const major = new Int32Array(1);
  const minor = new Int32Array(1);
  check('nvrtcVersion', lib().nvrtcVersion(major, minor));
  return `${major[0]}.${minor[0]}`;
}

export interface CompileRequest {
  name: string;
  source: string;
  /** Headers resolved by #include "name". */
  headers: Record<string, string>;
  /** e.g. 90 for sm_90 */
  arch: number;
  options: string[];
}

export function compileToCubin(req: CompileRequest): Buffer {
  const n = lib();
  const prog = new BigUint64Array(1);
  const names = Object.keys(req.headers);
  check(
    'nvrtcCreateProgram',
    n.nvrtcCreateProgram(prog, req.source, req.name, names.length, names.map((k) => req.headers[k]), names),
  );
  try {
    const options = [`--gpu-architecture=sm_${req.arch}`, ...req.options];
    const status = n.nvrtcCompileProgram(prog[0], options.length, options);
    const size = new BigUint64Array(1);
    check('nvrtcGetProgramLogSize', n.nvrtcGetProgramLogSize(prog[0], size));
    const logBuf = Buffer.alloc(Number(size[0]) + 1);
    check('nvrtcGetProgramLog', n.nvrtcGetProgramLog(prog[0], logBuf));
    const log = logBuf.toString('utf8', 0, Math.max(0, logBuf.indexOf(0)));
    check('nvrtcCompileProgram', status, `${req.name} (${options.join(' ')}):\n${log}`);
    check('nvrtcGetCUBINSize', n.nvrtcGetCUBINSize(prog[0], size));
    const cubin = Buffer.alloc(Number(size[0]));
    check('nvrtcGetCUBIN', n.nvrtcGetCUBIN(prog[0], cubin));
    return cubin;
  } finally {
    n.nvrtcDestroyProgram(prog);
  }
}
