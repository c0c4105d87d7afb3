// Checks of a kernels/ .cu file where no GPU is needed: its argument structs against their specs
// (src/jit/kernel-set.ts: field i at byte 8·i, so a field out of order is a wrong argument on the
// GPU), and its compile under nvcc.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { basename, join } from 'node:path';
import type { TestContext } from 'node:test';
import type { FieldKind, StructSpec } from '../../src/jit/kernel-set.js';
import { kernelsDir } from '../../src/jit/module.js';

const KINDS: Record<string, FieldKind> = { u64: 'ptr', i64: 'int', double: 'float' };

/** Every struct of `file` has its spec's fields in order and an asserted size; every kernel has a spec. */
export function assertStructsMatch(file: string, specs: Readonly<Record<string, StructSpec>>): void {
  const source = readFileSync(join(kernelsDir(), file), 'utf8');
  for (const spec of Object.values(specs)) {
    const body = new RegExp(`struct ${spec.struct} \\{([^}]*)\\};`).exec(source);
    assert.ok(body, `struct ${spec.struct} in ${file}`);
    const fields = [...body[1].matchAll(/^\s*(u64|i64|double) (\w+);/gm)].map((m) => [m[2], KINDS[m[1]]]);
    assert.deepEqual(fields, spec.fields.map(([n, k]) => [n, k]), spec.struct);
    assert.match(source, new RegExp(`static_assert\\(sizeof\\(${spec.struct}\\) == ${spec.fields.length} \\* 8`), `${spec.struct}'s size is asserted`);
    for (const k of spec.kernels) assert.match(source, new RegExp(`__global__ void (__launch_bounds__\\([\\w, ]+\\) )?${k}\\(const ${spec.struct} p\\)`), k);
  }
  const kernels = [...source.matchAll(/__global__ void (?:__launch_bounds__\([\w, ]+\) )?(\w+)\(/g)].map((m) => m[1]).sort();
  assert.deepEqual(kernels, Object.values(specs).flatMap((s) => s.kernels).sort(), 'every kernel has a spec');
}

/** nvcc, where there is one (CI has it; GPU machines may not). */
export const nvcc = ['nvcc', '/usr/local/cuda/bin/nvcc'].find((c) => spawnSync(c, ['--version']).status === 0);

/** `file` compiles for sm_90 under nvcc, with `args` besides; skips `t` where there is no nvcc. */
export function assertCompilesForDevice(t: TestContext, file: string, args: string[] = []): void {
  if (nvcc === undefined) return t.skip('nvcc not found: the kernels cannot be compiled here (CI has nvcc)');
  const name = basename(file, '.cu');
  const dir = mkdtempSync(join(tmpdir(), `a2av-${name}-cu-`));
  try {
    const r = spawnSync(nvcc, ['-std=c++17', '-arch=sm_90', ...args, '-c', join(kernelsDir(), file), '-o', join(dir, `${name}.o`)], { encoding: 'utf8' });
    assert.equal(r.status, 0, r.stderr);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}
