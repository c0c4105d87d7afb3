// NCCL bindings without a GPU: where libnccl is looked for and what is said when it is not found;
// then, where a C compiler is at hand, the bindings against a stand-in library
// (fixtures/fake-nccl.c) that checks what koffi passes: the 128-byte unique id by value, the config
// layout, 64-bit counts, NCCL's error texts, a nonblocking init that never completes.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { after, describe, it } from 'node:test';
import { ncclLibrarySpec } from '../src/nccl/library.js';

const repo = fileURLToPath(new URL('../../', import.meta.url));

/** Runs `code` (an ES module) in a fresh node, so the library is loaded anew with `env`. */
function runModule(code: string, env: Record<string, string>): { status: number | null; stdout: string; stderr: string } {
  const r = spawnSync(process.execPath, ['--input-type=module', '-e', code], { cwd: repo, env: { ...process.env, ...env }, encoding: 'utf8' });
  return { status: r.status, stdout: r.stdout, stderr: r.stderr };
}

describe('finding libnccl', () => {
  it('looks in $NCCL_HOME, the system folders, CUDA homes and NVIDIA wheels (unless $A2AV_LIBNCCL names the file)', () => {
    const spec = ncclLibrarySpec({ NCCL_HOME: '/opt/nccl' });
    assert.equal(spec.overrideEnv, 'A2AV_LIBNCCL');
    assert.deepEqual(spec.files, ['libnccl.so.2', 'libnccl.so']);
    assert.equal(spec.folders[0], '/opt/nccl/lib');
    for (const folder of ['/usr/lib/x86_64-linux-gnu', '/usr/local/cuda/lib64']) assert.ok(spec.folders.includes(folder), folder);
    assert.match(spec.instead ?? '', /--backend cuda/);
  });

  const search = (env: Record<string, string>) => {
    const r = runModule(
      `import { LibraryNotFoundError } from './dist/src/errors.js';
       const { ncclLib } = await import('./dist/src/nccl/library.js');
       try { ncclLib(); console.log('LOADED'); } catch (e) { console.log(JSON.stringify({ cls: e instanceof LibraryNotFoundError, code: e.code, message: e.message, searched: e.searched })); }`,
      env,
    );
    assert.equal(r.status, 0, r.stderr);
    return r.stdout.trim() === 'LOADED' ? undefined : (JSON.parse(r.stdout) as { cls: boolean; code: string; message: string; searched: string[] });
  };

  it('A2AV_LIBNCCL names the one file tried: a missing one is said, not passed over for another', () => {
    const err = search({ A2AV_LIBNCCL: '/nonexistent/a2av-test/libnccl.so.2', NCCL_HOME: '/nonexistent/nccl-home' })!;
    assert.ok(err.cls);
    assert.deepEqual(err.searched, ['/nonexistent/a2av-test/libnccl.so.2 (A2AV_LIBNCCL: no such file)']);
    assert.match(err.message, /or correct A2AV_LIBNCCL=\/nonexistent\/a2av-test\/libnccl\.so\.2 \(it alone is tried\), or unset it to search the usual places\.\nsearched:\n/);
  });

  it('names every place it searched when nothing loads', (t) => {
    const err = search({ A2AV_LIBNCCL: '', NCCL_HOME: '/nonexistent/nccl-home' });
    if (err === undefined) return t.skip('an NCCL is installed here, so not finding one cannot be shown');
    assert.ok(err.cls);
    assert.equal(err.code, 'A2AV_LIBRARY_NOT_FOUND');
    assert.match(err.message, /^libnccl \(NCCL\) not found: use the cuda or cpu backend .*, or set A2AV_LIBNCCL to the library's path\.\nsearched:\n/);
    for (const place of ['libnccl.so.2', '/nonexistent/nccl-home/lib/libnccl.so.2', '/usr/lib/x86_64-linux-gnu/libnccl.so.2']) {
      assert.ok(err.searched.includes(place), `${place} in ${err.searched.join(', ')}`);
      assert.ok(err.message.split('\n').some((line) => line.startsWith(`  ${place}`)), `${place} on a line of its own`);
    }
  });
});

describe('NCCL bindings against a stand-in library', () => {
  const dir = mkdtempSync(join(tmpdir(), 'a2av-fake-nccl-'));
  after(() => rmSync(dir, { recursive: true, force: true }));
  const lib = join(dir, 'libnccl.so.2');
  const cc = spawnSync(process.env.CC ?? 'cc', ['-shared', '-fPIC', '-o', lib, join(repo, 'tests/fixtures/fake-nccl.c')], { encoding: 'utf8' });
  const skip = cc.error || cc.status !== 0 ? `no C compiler to build the stand-in (${cc.error?.message ?? cc.stderr.split('\n')[0]})` : undefined;
  const run = (code: string) => {
    const r = runModule(
      `import { NcclCommunicator, groupEnd, groupStart } from './dist/src/nccl/communicator.js';
       import { ncclLib, formatNcclVersion, NcclType } from './dist/src/nccl/library.js';
       const id = NcclCommunicator.uniqueId();
       const out = (v) => console.log(JSON.stringify(v, (_, x) => (typeof x === 'bigint' ? String(x) : x)));
       const caught = (f) => { try { f(); return 'no error'; } catch (e) { return { name: e.name, code: e.code, message: e.message, missingRank: e.missingRank }; } };
       ${code}`,
      { A2AV_LIBNCCL: lib },
    );
    assert.equal(r.status, 0, r.stderr);
    return r.stdout.trim().split('\n').map((line) => JSON.parse(line));
  };

  it('loads, reads the version, and probes ncclAlltoAll without failing when it is absent', { skip }, () => {
    const [v] = run(`out({ version: ncclLib().version, text: formatNcclVersion(ncclLib().version), alltoall: ncclLib().ncclAlltoAll === undefined })`);
    assert.deepEqual(v, { version: 22805, text: '2.28.5', alltoall: true });
  });

  it('passes the unique id by value and a 2.17 config; counts past 4 GiB arrive whole', { skip }, () => {
    const [handle, send, alltoall] = run(
      `const c = NcclCommunicator.init({ rank: 1, nranks: 2, id, blocking: true, timeoutMs: 1000 });
       out(c.handle);
       groupStart(); const s = c.send(1n, 5 * 2 ** 32 + 3, NcclType.uint8, 0, 0n); const e = groupEnd(); c.settle('ncclSend', s || e, 1000); out(s);
       out(caught(() => c.allToAll(1n, 2n, 4, NcclType.uint8, 0n)));
       c.destroy(1000);`,
    );
    assert.equal(handle, '4097');
    assert.equal(send, 0);
    assert.equal(alltoall.name, 'UsageError');
  });

  it("turns a failed call into NcclError with NCCL's name, text and last error", { skip }, () => {
    const [tooMany, badId] = run(
      `out(caught(() => NcclCommunicator.init({ rank: 0, nranks: 5, id, blocking: true, timeoutMs: 1000 })));
       out(caught(() => NcclCommunicator.init({ rank: 0, nranks: 2, id: new Uint8Array(128), blocking: true, timeoutMs: 1000 })));`,
    );
    assert.deepEqual(tooMany, {
      name: 'NcclError',
      code: 'A2AV_NCCL',
      message: 'ncclCommInitRankConfig failed: ncclInvalidUsage (5): unhandled error: nranks 5 is too many',
    });
    assert.equal(badId.message, 'ncclCommInitRankConfig failed: ncclInvalidArgument (4): invalid argument: unique id byte 0 is 0');
  });

  it('polls a nonblocking init to completion, and aborts one that never completes', { skip }, () => {
    const [ready, stuck] = run(
      `const c = NcclCommunicator.init({ rank: 0, nranks: 3, id, blocking: false, timeoutMs: 5000 });
       out({ handle: c.handle, state: c.asyncError() });
       const started = performance.now();
       const err = caught(() => NcclCommunicator.init({ rank: 2, nranks: 4, id, blocking: false, timeoutMs: 150 }));
       out({ ...err, waited: performance.now() - started });`,
    );
    assert.deepEqual(ready, { handle: '4096', state: 0 });
    assert.equal(stuck.name, 'TimeoutError');
    assert.equal(stuck.missingRank, -1);
    assert.match(stuck.message, /^rank 2: timed out after 150 ms waiting for a peer \(ncclCommInitRankConfig: .*communicator aborted\)$/);
    assert.ok(stuck.waited >= 150 && stuck.waited < 5000, `waited ${stuck.waited} ms`);
  });
});
