// A2AV_PROBE_DEFINES="NAME NAME=value ...": extra -D flags for every kernel module, for probes and
// tuning runs (scripts/probe/, docs/perf.md). Two kinds: switches that leave a phase out or take
// another variant (A2AV_PROBE_NO_COPY: results are then wrong by design, never in real runs), and
// sizes the host must know too (allReduce's A2AV_PROBE_AR_*: layout.ts reads them with probeNumber,
// config.cuh takes them in place of its defaults).
import { UsageError } from '../../errors.js';

function parse(value: string | undefined): [name: string, value: string | undefined][] {
  if (value === undefined || value.trim() === '') return [];
  return value
    .trim()
    .split(/\s+/)
    .map((d) => {
      const m = /^(A2AV_PROBE_[A-Z0-9_]+)(?:=([A-Za-z0-9_]+))?$/.exec(d);
      if (!m) throw new UsageError(`A2AV_PROBE_DEFINES: '${d}' is not A2AV_PROBE_NAME or A2AV_PROBE_NAME=value`);
      return [m[1], m[2]];
    });
}

/** The -D flags. */
export function probeDefines(value = process.env.A2AV_PROBE_DEFINES): string[] {
  return parse(value).map(([name, v]) => (v === undefined ? `-D${name}` : `-D${name}=${v}`));
}

/** Whether switch `name` is among the defines (a switch the host reads too: it picks a kernel). */
export function probeSwitch(name: string, value = process.env.A2AV_PROBE_DEFINES): boolean {
  return parse(value).some(([n, v]) => n === name && v === undefined);
}

/** The value `name` is given (a positive integer, a multiple of `multipleOf`), else `fallback`. */
export function probeNumber(name: string, fallback: number, multipleOf = 1, value = process.env.A2AV_PROBE_DEFINES): number {
  const found = parse(value).find(([n]) => n === name);
  if (found === undefined) return fallback;
  const n = Number(found[1]);
  if (!Number.isSafeInteger(n) || n <= 0 || n % multipleOf !== 0) {
    throw new UsageError(`A2AV_PROBE_DEFINES: ${name} must be a positive integer${multipleOf > 1 ? `, a multiple of ${multipleOf}` : ''} (in bytes or a count), got '${found[1] ?? ''}'`);
  }
  return n;
}
